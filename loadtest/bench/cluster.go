package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cluster roles of a Greenplum cluster's processes.
const (
	RoleCoordinator = "coordinator"
	RoleSegments    = "segments"
)

// Cluster is the processes of Greenplum clusters on this machine: each
// postmaster (found by its gp_role, dispatch for the coordinator, execute
// for a segment) and the processes it forked, by role.
type Cluster struct {
	postmasters map[int]string // pid: RoleCoordinator or RoleSegments
	children    map[int]string
}

// FindCluster scans /proc for the processes of the Greenplum clusters
// whose data directories (the postmasters' -D) lie under dataDir, or of
// every cluster when dataDir is empty.
func FindCluster(dataDir string) Cluster {
	c := Cluster{postmasters: map[int]string{}, children: map[int]string{}}
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
				role := ""
				switch {
				case strings.Contains(string(cmd), "gp_role=dispatch"):
					role = RoleCoordinator
				case strings.Contains(string(cmd), "gp_role=execute"):
					role = RoleSegments
				}
				if role != "" {
					if dataDir == "" || underDir(args, dataDir) {
						c.postmasters[pid] = role
					}
					continue
				}
			}
		}
		if st, err := ReadProcStat(pid); err == nil {
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

// underDir reports whether a postmaster's arguments give a data directory
// (-D) under dir.
func underDir(args []string, dir string) bool {
	dir = filepath.Clean(dir) + string(filepath.Separator)
	for i, a := range args {
		if a == "-D" && i+1 < len(args) {
			return strings.HasPrefix(filepath.Clean(args[i+1])+string(filepath.Separator), dir)
		}
	}
	return false
}

// Pids returns every process of the cluster.
func (c Cluster) Pids() []int {
	out := make([]int, 0, len(c.postmasters)+len(c.children))
	for pid := range c.postmasters {
		out = append(out, pid)
	}
	for pid := range c.children {
		out = append(out, pid)
	}
	return out
}

// CPU returns the CPU time of each role so far: every live process's own,
// and the postmasters' reaped children (backends that ended).
func (c Cluster) CPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	for pid, role := range c.postmasters {
		if st, err := ReadProcStat(pid); err == nil {
			out[role] += st.CPU + st.Children
		}
	}
	for pid, role := range c.children {
		if st, err := ReadProcStat(pid); err == nil {
			out[role] += st.CPU
		}
	}
	return out
}

// ClusterCPU starts measuring the CPU of the clusters under dataDir (all
// when empty) and returns the function that ends the window and returns
// each role's CPU in it. It scans /proc again at the end, so that backends
// forked during the window count.
func ClusterCPU(dataDir string) func() map[string]time.Duration {
	c0 := FindCluster(dataDir).CPU()
	return func() map[string]time.Duration {
		c1 := FindCluster(dataDir).CPU()
		out := map[string]time.Duration{}
		for _, role := range []string{RoleCoordinator, RoleSegments} {
			out[role] = c1[role] - c0[role]
		}
		return out
	}
}
