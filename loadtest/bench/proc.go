package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux architecture the load tools run on).
const ClockTick = 10 * time.Millisecond

// ProcStat is what the load tools read of one /proc/<pid>/stat.
type ProcStat struct {
	PPID int
	// CPU is utime + stime: the CPU time the process (all its threads)
	// has used so far.
	CPU time.Duration
	// Children is cutime + cstime: the CPU time of the children the
	// process has waited for.
	Children time.Duration
}

// ReadProcStat reads /proc/<pid>/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStat{}, err
	}
	return ParseProcStat(b)
}

// ParseProcStat parses the text of /proc/<pid>/stat: "pid (comm) state
// ppid ... utime stime cutime cstime ...". The command name may hold
// spaces and parentheses, so fields are counted from its last ')'.
func ParseProcStat(b []byte) (ProcStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcStat{}, errors.New("proc stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime, stime, cutime and cstime are
	// fields 14 to 17.
	if len(f) < 15 {
		return ProcStat{}, fmt.Errorf("proc stat: %d fields after the command name", len(f))
	}
	var ticks [5]int64
	var errs []error
	for n, field := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[field], 10, 64)
		ticks[n] = v
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return ProcStat{}, fmt.Errorf("proc stat: %w", err)
	}
	return ProcStat{
		PPID:     int(ticks[0]),
		CPU:      time.Duration(ticks[1]+ticks[2]) * ClockTick,
		Children: time.Duration(ticks[3]+ticks[4]) * ClockTick,
	}, nil
}

// ProcessCPU returns the CPU time (utime + stime) the processes pids have
// used so far, counting a process that cannot be read (gone) as none.
func ProcessCPU(pids ...int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		if st, err := ReadProcStat(pid); err == nil {
			sum += st.CPU
		}
	}
	return sum
}
