package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// pinning places the servers (warmcache, the floors, the peer, Redis,
// PostgreSQL, PgBouncer) on one set of CPUs and the load generators (the
// harness's vegeta and gRPC clients, pgbench, redis-benchmark) on another,
// with taskset, so that the load generator's own CPU stays out of the
// servers' throughput. On one CPU, or without taskset, nothing is pinned
// and the report says so.
type pinning struct {
	servers, load string // taskset CPU lists; empty: not pinned
	all           string // every CPU: the shared servers' affinity afterwards
	why           string // why nothing is pinned, when it is not
}

// newPinning splits the CPUs: the first for the servers, the rest for the
// load generators, when enabled and the machine has two or more.
func newPinning(enabled bool) pinning {
	n := runtime.NumCPU()
	switch {
	case !enabled:
		return pinning{why: "pinning is off (-pin=false)"}
	case n < 2:
		return pinning{why: fmt.Sprintf("the machine has %d CPU", n)}
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return pinning{why: "taskset is not installed (util-linux)"}
	}
	load := "1"
	if n > 2 {
		load = fmt.Sprintf("1-%d", n-1)
	}
	return pinning{servers: "0", load: load, all: fmt.Sprintf("0-%d", n-1)}
}

// on reports whether the run is pinned.
func (p pinning) on() bool { return p.servers != "" }

// String describes the placement for the report.
func (p pinning) String() string {
	if !p.on() {
		return "not pinned: " + p.why
	}
	return fmt.Sprintf("servers on CPU %s, load generators on CPU %s (taskset)", p.servers, p.load)
}

// server returns the command that runs bin with args on the servers' CPUs.
// taskset execs bin, so the process keeps the pid the harness measures.
func (p pinning) server(bin string, args []string) (string, []string) {
	return p.wrap(p.servers, bin, args)
}

// loader returns the command that runs bin with args on the load
// generators' CPUs.
func (p pinning) loader(bin string, args []string) (string, []string) {
	return p.wrap(p.load, bin, args)
}

// loaderPrefix is the command that runs a program on the load generators'
// CPUs, or nil when nothing is pinned.
func (p pinning) loaderPrefix() []string {
	if p.load == "" {
		return nil
	}
	return []string{"taskset", "-c", p.load}
}

func (p pinning) wrap(cpus, bin string, args []string) (string, []string) {
	if cpus == "" {
		return bin, args
	}
	return "taskset", append([]string{"-c", cpus, bin}, args...)
}

// pinSelf moves every thread of the harness to the load generators' CPUs;
// threads the Go runtime starts later inherit the affinity.
func (p pinning) pinSelf() error {
	if !p.on() {
		return nil
	}
	return setAffinity(p.load, os.Getpid())
}

// pinServers moves running shared servers (and, for PostgreSQL, every
// backend the postmaster has forked; later ones inherit its affinity) to
// the servers' CPUs.
func (p pinning) pinServers(pids ...int) error {
	return p.setAll(p.servers, pids)
}

// release gives the shared servers every CPU again.
func (p pinning) release(pids ...int) error {
	return p.setAll(p.all, pids)
}

func (p pinning) setAll(cpus string, pids []int) error {
	if !p.on() {
		return nil
	}
	var failed []string
	for _, pid := range pids {
		if pid <= 0 {
			continue
		}
		for _, q := range append([]int{pid}, childPIDs(pid)...) {
			if err := setAffinity(cpus, q); err != nil {
				failed = append(failed, err.Error())
			}
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
