package main

import (
	"syscall"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// budget is the CPU of each process of a measured window.
type budget map[string]time.Duration

// meter measures the CPU of the service, the cluster's coordinator and
// segments, gpbench itself and its waited-for children (pgbench) over a
// window: start it, run, then call the function it returns.
func meter(svcPID int) func() budget {
	cluster := bench.ClusterCPU("")
	svc0, _ := bench.ReadProcStat(svcPID)
	self0, kids0 := rusage()
	return func() budget {
		c := cluster()
		svc1, _ := bench.ReadProcStat(svcPID)
		self1, kids1 := rusage()
		return budget{
			"warmcache":   svc1.CPU - svc0.CPU,
			"coordinator": c[bench.RoleCoordinator],
			"segments":    c[bench.RoleSegments],
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
