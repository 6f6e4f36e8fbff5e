package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

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
		if st, err := bench.ReadProcStat(pid); err == nil {
			parents[pid] = st.PPID
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
		if st, err := bench.ReadProcStat(pid); err == nil {
			out[role] += st.CPU + st.Children
		}
	}
	for pid, role := range c.children {
		if st, err := bench.ReadProcStat(pid); err == nil {
			out[role] += st.CPU
		}
	}
	return out
}

// budget is the CPU of each process of a measured window.
type budget map[string]time.Duration

// meter measures the CPU of the service, the cluster's coordinator and
// segments, gpbench itself and its waited-for children (pgbench) over a
// window: start it, run, then call the function it returns.
func meter(svcPID int) func() budget {
	c0 := findCluster().cpu()
	svc0, _ := bench.ReadProcStat(svcPID)
	self0, kids0 := rusage()
	return func() budget {
		c1 := findCluster().cpu()
		svc1, _ := bench.ReadProcStat(svcPID)
		self1, kids1 := rusage()
		return budget{
			"warmcache":   svc1.CPU - svc0.CPU,
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
