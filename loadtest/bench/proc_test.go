package bench_test

import (
	"os"
	"os/exec"
	"slices"
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

func TestTreeCPUCountsTheChildren(t *testing.T) {
	// A child that burns some CPU, then waits to be measured.
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 10")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	self := os.Getpid()
	if kids := bench.Children(self); !slices.Contains(kids, child.Process.Pid) {
		t.Fatalf("Children(self) = %v, want the child %d among them", kids, child.Process.Pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for bench.ProcessCPU(child.Process.Pid) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// Each read before the tree's, which can only be larger.
	kid, own := bench.ProcessCPU(child.Process.Pid), bench.ProcessCPU(self)
	if tree := bench.TreeCPU(self); tree < own+kid {
		t.Errorf("TreeCPU(self) = %v, want at least its own %v and the child's %v", tree, own, kid)
	}
	if bench.TreeCPU(1<<30) != 0 {
		t.Error("TreeCPU of a gone process is not zero")
	}
}

func TestContextSwitchesCountsEveryThread(t *testing.T) {
	self := os.Getpid()
	before := bench.ContextSwitches(self)
	for range 20 {
		time.Sleep(time.Millisecond) // each sleep parks a thread
	}
	if after := bench.ContextSwitches(self); after <= before {
		t.Errorf("ContextSwitches(self) went from %d to %d across 20 sleeps", before, after)
	}
	if n := bench.ContextSwitches(1 << 30); n != 0 {
		t.Errorf("ContextSwitches of a gone process = %d, want 0", n)
	}
}

func TestSyscallsCountsReadsAndWrites(t *testing.T) {
	self := os.Getpid()
	before := bench.Syscalls(self)
	for range 10 {
		if _, err := os.ReadFile("/proc/self/stat"); err != nil {
			t.Fatal(err)
		}
	}
	if after := bench.Syscalls(self); after < before+10 {
		t.Errorf("Syscalls(self) went from %d to %d across 10 reads of a file", before, after)
	}
	if n := bench.Syscalls(1 << 30); n != 0 {
		t.Errorf("Syscalls of a gone process = %d, want 0", n)
	}
}
