package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// Children returns the live children of pid: from
// /proc/<pid>/task/*/children, or by scanning /proc for their parent pid
// where that file does not exist.
func Children(pid int) []int {
	var out []int
	if tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid)); len(tasks) > 0 {
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
		return out
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		child, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		if st, err := ReadProcStat(child); err == nil && st.PPID == pid {
			out = append(out, child)
		}
	}
	return out
}

// LoadAverages returns the machine's load averages over 1, 5 and 15
// minutes as /proc/loadavg prints them, or nil where it cannot be read.
func LoadAverages() []string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return f[:3]
	}
	return nil
}

// TreeCPU returns the CPU time that root and its children have used so
// far: root's own, that of the children it has reaped, and that of each
// live child (a PostgreSQL postmaster and its backends). Between two
// calls, a child that ended is counted through root's reaped children and
// one forked in between in full. A root that cannot be read counts as none.
func TreeCPU(root int) time.Duration {
	st, err := ReadProcStat(root)
	if err != nil {
		return 0
	}
	return st.CPU + st.Children + ProcessCPU(Children(root)...)
}

// ContextSwitches returns the context switches, voluntary and not, of
// every thread of the processes pids so far, from
// /proc/<pid>/task/<tid>/status; a thread that ended is not counted.
func ContextSwitches(pids ...int) int64 {
	var sum int64
	for _, pid := range pids {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*/status", pid))
		for _, t := range tasks {
			sum += sumFields(t, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
		}
	}
	return sum
}

// Syscalls returns the read and write system calls (syscr and syscw of
// /proc/<pid>/io, every thread's) that the processes pids have made so
// far, counting a process that cannot be read as none.
func Syscalls(pids ...int) int64 {
	var sum int64
	for _, pid := range pids {
		sum += sumFields(fmt.Sprintf("/proc/%d/io", pid), "syscr", "syscw")
	}
	return sum
}

// sumFields sums the numbers of the "name: number" lines of file that
// names lists; a file that cannot be read sums to zero.
func sumFields(file string, names ...string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	var sum int64
	for _, line := range strings.Split(string(b), "\n") {
		name, value, _ := strings.Cut(line, ":")
		if slices.Contains(names, name) {
			n, _ := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			sum += n
		}
	}
	return sum
}
