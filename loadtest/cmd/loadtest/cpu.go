package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// listenerPID returns the process that listens on TCP host:port (a
// loopback address), found through the socket's inode in /proc/net/tcp
// and /proc/net/tcp6 and the file descriptors under /proc/*/fd. Reading
// other users' descriptors needs root; without it the error says so.
func listenerPID(hostport string) (int, error) {
	_, portText, err := splitHostPort(hostport)
	if err != nil {
		return 0, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q: %w", portText, err)
	}
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, ino := range listeningInodes(b, uint16(port)) {
			inodes["socket:["+ino+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on port %d", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, fdDir := range procs {
		entries, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
			if err == nil && inodes[target] {
				return strconv.Atoi(filepath.Base(filepath.Dir(fdDir)))
			}
		}
	}
	return 0, fmt.Errorf("the process listening on port %d is not visible (run as root or as its owner)", port)
}

// listeningInodes returns the socket inodes of the LISTEN rows (state 0A)
// for port in the text of /proc/net/tcp or /proc/net/tcp6.
func listeningInodes(table []byte, port uint16) []string {
	var out []string
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(bytes.NewReader(table))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], want) {
			continue
		}
		out = append(out, f[9])
	}
	return out
}

func splitHostPort(hostport string) (string, string, error) {
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 {
		return "", "", fmt.Errorf("want host:port, got %q", hostport)
	}
	return hostport[:i], hostport[i+1:], nil
}

// cpuGroup is one named set of processes whose CPU the meter sums, such as
// "postgres": the backends of the benchmark database.
type cpuGroup struct {
	name string
	// pids lists the group's processes now. It is called at every sample,
	// so that processes that come and go (PostgreSQL backends) are seen.
	pids func() []int
}

// pidGroup is a group of one fixed process.
func pidGroup(name string, pid int) cpuGroup {
	return cpuGroup{name: name, pids: func() []int { return []int{pid} }}
}

// backendsGroup is the PostgreSQL backends, children of the postmaster,
// that serve database: their process title names it ("postgres: user
// database host(port) state"). Backends of other databases on the same
// server are left out.
func backendsGroup(name string, postmaster int, database string) cpuGroup {
	var mu sync.Mutex
	matches := map[int]bool{} // pid -> serves database, decided once per pid
	return cpuGroup{name: name, pids: func() []int {
		mu.Lock()
		defer mu.Unlock()
		var out []int
		for _, pid := range bench.Children(postmaster) {
			ok, known := matches[pid]
			if !known {
				title, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				if err != nil {
					continue
				}
				ok = backendServes(title, database)
				matches[pid] = ok
			}
			if ok {
				out = append(out, pid)
			}
		}
		return out
	}}
}

// backendServes reports whether a backend's process title (its
// /proc/<pid>/cmdline) shows it serving database.
func backendServes(title []byte, database string) bool {
	t := strings.ReplaceAll(string(title), "\x00", " ")
	return strings.HasPrefix(t, "postgres: ") && strings.Contains(t, " "+database+" ")
}

// cpuMeter measures the CPU that groups of processes use during a window.
type cpuMeter struct {
	groups []cpuGroup
	// interval between samples inside a window; processes that exit
	// during the window lose at most their last interval of CPU.
	interval time.Duration
}

// cpuWindow is a running measurement.
type cpuWindow struct {
	m     *cpuMeter
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	// seen holds, per group and pid, the CPU at the window's start (zero
	// for a process that appeared later) and at the last sample.
	seen  map[string]map[int]*[2]time.Duration
	start time.Time
	wall  time.Duration
}

// start begins a window: it samples every group now and then every
// interval until stop.
func (m *cpuMeter) start() *cpuWindow {
	w := &cpuWindow{m: m, stopc: make(chan struct{}), done: make(chan struct{}), seen: map[string]map[int]*[2]time.Duration{}, start: time.Now()}
	w.sample(true)
	go func() {
		defer close(w.done)
		t := time.NewTicker(m.interval)
		defer t.Stop()
		for {
			select {
			case <-w.stopc:
				return
			case <-t.C:
				w.sample(false)
			}
		}
	}()
	return w
}

func (w *cpuWindow) sample(first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.m.groups {
		seen := w.seen[g.name]
		if seen == nil {
			seen = map[int]*[2]time.Duration{}
			w.seen[g.name] = seen
		}
		for _, pid := range g.pids() {
			st, err := bench.ReadProcStat(pid)
			if err != nil {
				continue // exited since it was listed
			}
			if s, ok := seen[pid]; ok {
				s[1] = max(s[1], st.CPU)
				continue
			}
			base := time.Duration(0) // a process that started inside the window
			if first {
				base = st.CPU
			}
			seen[pid] = &[2]time.Duration{base, st.CPU}
		}
	}
}

// stop ends the window with a last sample and returns the CPU time each
// group used in it, and the window's wall time.
func (w *cpuWindow) stop() (map[string]time.Duration, time.Duration) {
	close(w.stopc)
	<-w.done
	w.sample(false)
	w.wall = time.Since(w.start)
	out := map[string]time.Duration{}
	for _, g := range w.m.groups {
		var sum time.Duration
		for _, s := range w.seen[g.name] {
			sum += s[1] - s[0]
		}
		out[g.name] = sum
	}
	return out, w.wall
}
