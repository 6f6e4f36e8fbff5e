package bench_test

import (
	"os"
	"testing"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

func TestParseProcStat(t *testing.T) {
	// The command name holds a space and a parenthesis, as a process title
	// may; utime 150 and stime 50 ticks are 2s of CPU, cutime 7 and cstime
	// 3 are 100ms.
	line := "4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 100 0 0 0 150 50 7 3 20 0 4 0 12345 0 0\n"
	st, err := bench.ParseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != 17 || st.CPU != 2*time.Second || st.Children != 100*time.Millisecond {
		t.Errorf("ParseProcStat = %+v, want ppid 17, cpu 2s, children 100ms", st)
	}
	if _, err := bench.ParseProcStat([]byte("4242 (x) S 1")); err == nil {
		t.Error("a truncated line parsed")
	}
}

func TestProcessCPUCountsAGoneProcessAsNone(t *testing.T) {
	self := bench.ProcessCPU(os.Getpid())
	if both := bench.ProcessCPU(os.Getpid(), 1<<30); both < self {
		t.Errorf("ProcessCPU(self, gone) = %v, below ProcessCPU(self) = %v", both, self)
	}
}
