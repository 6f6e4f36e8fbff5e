// Package pin places the servers of a benchmark on one set of CPUs and its
// load generators on another, with taskset, where the machine has two or
// more: so that a load generator's own CPU stays out of the servers'
// throughput. `make bench` (loadtest/cmd/loadtest) and loadtest/cmd/gpbench use it.
package pin

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// Placement places the servers (warmcache, the floors, the peer, Redis,
// PostgreSQL, PgBouncer) on one set of CPUs and the load generators (the
// harness's vegeta and gRPC clients, pgbench, redis-benchmark) on another,
// with taskset, so that the load generator's own CPU stays out of the
// servers' throughput. On one CPU, or without taskset, nothing is pinned
// and the report says so.
type Placement struct {
	servers, load string // taskset CPU lists; empty: not pinned
	all           string // every CPU: the shared servers' affinity afterwards
	why           string // why nothing is pinned, when it is not
}

// New splits the CPUs: the first for the servers, the rest for the
// load generators, when enabled and the machine has two or more.
func New(enabled bool) Placement {
	n := runtime.NumCPU()
	switch {
	case !enabled:
		return Placement{why: "pinning is off"}
	case n < 2:
		return Placement{why: fmt.Sprintf("the machine has %d CPU", n)}
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return Placement{why: "taskset is not installed (util-linux)"}
	}
	load := "1"
	if n > 2 {
		load = fmt.Sprintf("1-%d", n-1)
	}
	return Placement{servers: "0", load: load, all: fmt.Sprintf("0-%d", n-1)}
}

// On reports whether the run is pinned.
func (p Placement) On() bool { return p.servers != "" }

// String describes the placement for the report.
func (p Placement) String() string {
	if !p.On() {
		return "not pinned: " + p.why
	}
	return fmt.Sprintf("servers on CPU %s, load generators on CPU %s (taskset)", p.servers, p.load)
}

// Server returns the command that runs bin with args on the servers' CPUs.
// taskset execs bin, so the process keeps the pid the harness measures.
func (p Placement) Server(bin string, args []string) (string, []string) {
	return p.wrap(p.servers, bin, args)
}

// Loader returns the command that runs bin with args on the load
// generators' CPUs.
func (p Placement) Loader(bin string, args []string) (string, []string) {
	return p.wrap(p.load, bin, args)
}

// LoaderPrefix is the command that runs a program on the load generators'
// CPUs, or nil when nothing is pinned.
func (p Placement) LoaderPrefix() []string {
	if p.load == "" {
		return nil
	}
	return []string{"taskset", "-c", p.load}
}

func (p Placement) wrap(cpus, bin string, args []string) (string, []string) {
	if cpus == "" {
		return bin, args
	}
	return "taskset", append([]string{"-c", cpus, bin}, args...)
}

// PinSelf moves every thread of the calling process to the load generators' CPUs;
// threads the Go runtime starts later inherit the affinity.
func (p Placement) PinSelf() error {
	if !p.On() {
		return nil
	}
	return setAffinity(p.load, os.Getpid())
}

// PinServers moves running servers to the servers' CPUs: every thread of
// each pid. A process forked later inherits its parent's affinity, so for
// PostgreSQL the postmaster and the backends it has forked are enough.
func (p Placement) PinServers(pids ...int) error {
	return p.setAll(p.servers, pids)
}

// Release gives the processes every CPU again.
func (p Placement) Release(pids ...int) error {
	return p.setAll(p.all, pids)
}

func (p Placement) setAll(cpus string, pids []int) error {
	if !p.On() {
		return nil
	}
	var failed []string
	for _, pid := range pids {
		if pid <= 0 {
			continue
		}
		if err := setAffinity(cpus, pid); err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("taskset: %s", strings.Join(failed, "; "))
	}
	return nil
}

// setAffinity sets the CPU affinity of every thread of pid.
func setAffinity(cpus string, pid int) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pid %d: %v: %s", pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}
