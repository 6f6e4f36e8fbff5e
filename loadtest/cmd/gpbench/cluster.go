package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of the CPU times of /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// clusterProcs are the processes of the Greenplum cluster on this machine:
// each postmaster (found by its gp_role, dispatch for the coordinator,
// execute for a segment) and the processes it forked, by role.
type clusterProcs struct {
	postmasters map[int]string // pid: "coordinator" or "segments"
	children    map[int]string
}

// findCluster scans /proc for the cluster's processes.
func findCluster() clusterProcs {
	c := clusterProcs{postmasters: map[int]string{}, children: map[int]string{}}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	parents := map[int]int{}
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		if cmd, err := os.ReadFile(dir + "/cmdline"); err == nil {
			args := strings.Split(string(cmd), "\x00")
			if strings.HasSuffix(args[0], "/postgres") {
				switch {
				case strings.Contains(string(cmd), "gp_role=dispatch"):
					c.postmasters[pid] = "coordinator"
					continue
				case strings.Contains(string(cmd), "gp_role=execute"):
					c.postmasters[pid] = "segments"
					continue
				}
			}
		}
		if st, err := readStat(pid); err == nil {
			parents[pid] = st.ppid
		}
	}
	for pid, ppid := range parents {
		if role, ok := c.postmasters[ppid]; ok {
			c.children[pid] = role
		}
	}
	return c
}

// pids returns every process of the cluster.
func (c clusterProcs) pids() []int {
	out := make([]int, 0, len(c.postmasters)+len(c.children))
	for pid := range c.postmasters {
		out = append(out, pid)
	}
	for pid := range c.children {
		out = append(out, pid)
	}
	return out
}

// cpu returns the CPU time of each role so far: every live process's own,
// and the postmasters' reaped children (backends that ended).
func (c clusterProcs) cpu() map[string]time.Duration {
	out := map[string]time.Duration{}
	for pid, role := range c.postmasters {
		if st, err := readStat(pid); err == nil {
			out[role] += st.self + st.children
		}
	}
	for pid, role := range c.children {
		if st, err := readStat(pid); err == nil {
			out[role] += st.self
		}
	}
	return out
}

// procStat is what the budget reads of /proc/<pid>/stat.
type procStat struct {
	ppid           int
	self, children time.Duration // utime+stime; cutime+cstime
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+2:]) // state ppid ... utime(11) stime cutime cstime
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	return procStat{ppid: int(n(1)), self: time.Duration(n(11)+n(12)) * clockTick, children: time.Duration(n(13)+n(14)) * clockTick}, nil
}

// budget is the CPU of each process of a measured window.
type budget map[string]time.Duration

// meter measures the CPU of the service, the cluster's coordinator and
// segments, gpbench itself and its waited-for children (pgbench) over a
// window: start it, run, then call the function it returns.
func meter(svcPID int) func() budget {
	c0 := findCluster().cpu()
	svc0, _ := readStat(svcPID)
	self0, kids0 := rusage()
	return func() budget {
		c1 := findCluster().cpu()
		svc1, _ := readStat(svcPID)
		self1, kids1 := rusage()
		return budget{
			"warmcache":   svc1.self - svc0.self,
			"coordinator": c1["coordinator"] - c0["coordinator"],
			"segments":    c1["segments"] - c0["segments"],
			"gpbench":     self1 - self0,
			"pgbench":     kids1 - kids0,
		}
	}
}

// rusage returns the CPU of this process and of its children that ended.
func rusage() (self, children time.Duration) {
	var s, c syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &s)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(s.Utime) + tv(s.Stime), tv(c.Utime) + tv(c.Stime)
}
