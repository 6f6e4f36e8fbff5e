package bench

import (
	"fmt"
	"math"
	"time"
)

// Process groups whose CPU the harness measures during each attack, in the
// order the report shows them.
const (
	ProcServer    = "server"    // the process under test: warmcache, or a floor
	ProcRedis     = "redis"     // redis-server
	ProcPostgres  = "postgres"  // the backends of the benchmark database, summed
	ProcPgBouncer = "pgbouncer" // the PgBouncer process
	ProcLoad      = "load"      // the load generator: the harness (vegeta, gRPC client) or pgbench
)

// ProcOrder is the column order of the CPU table.
var ProcOrder = []string{ProcServer, ProcRedis, ProcPostgres, ProcPgBouncer, ProcLoad}

// CPU is the CPU time that each process group used during one attack,
// from /proc/<pid>/stat (utime + stime) before and after it.
type CPU struct {
	// Used maps a process group to the CPU time it used in the window.
	// A group that could not be measured is absent.
	Used map[string]time.Duration
	// Wall is the length of the window.
	Wall time.Duration
	// Requests is the number of requests (or transactions) answered in
	// the window, the divisor of PerRequest.
	Requests uint64
	// Server names the process under test ("warmcache", "floor",
	// "PostgreSQL"), for the table.
	Server string
}

// PerRequest returns the CPU time group used per request, or NaN when the
// group was not measured or nothing was answered.
func (c *CPU) PerRequest(group string) float64 {
	if c == nil || c.Requests == 0 {
		return math.NaN()
	}
	d, ok := c.Used[group]
	if !ok {
		return math.NaN()
	}
	return float64(d) / float64(time.Microsecond) / float64(c.Requests)
}

// TotalPerRequest sums PerRequest over the measured groups, the load
// generator excepted when withLoad is false.
func (c *CPU) TotalPerRequest(withLoad bool) float64 {
	if c == nil || c.Requests == 0 {
		return math.NaN()
	}
	var sum time.Duration
	for g, d := range c.Used {
		if g == ProcLoad && !withLoad {
			continue
		}
		sum += d
	}
	return float64(sum) / float64(time.Microsecond) / float64(c.Requests)
}

// Cores returns the cores group kept busy on average during the window.
func (c *CPU) Cores(group string) float64 {
	if c == nil || c.Wall <= 0 {
		return math.NaN()
	}
	d, ok := c.Used[group]
	if !ok {
		return math.NaN()
	}
	return float64(d) / float64(c.Wall)
}

// FormatMicros prints microseconds with one decimal, or "n/a".
func FormatMicros(us float64) string {
	if math.IsNaN(us) || math.IsInf(us, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f µs", us)
}
