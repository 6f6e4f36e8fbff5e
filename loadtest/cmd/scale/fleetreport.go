package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// fleetTarget bounds a hit's CPU over every process with the most
// instances on the Redis Cluster, against one instance.
const fleetTarget = 1.5

// fleetSeries returns the points of each series (hot tier and near cache)
// in the order measured, and the series' names in that order.
func fleetSeries(points []fleetPoint) (map[string][]fleetPoint, []string) {
	by := map[string][]fleetPoint{}
	var names []string
	for _, p := range points {
		if _, ok := by[p.series()]; !ok {
			names = append(names, p.series())
		}
		by[p.series()] = append(by[p.series()], p)
	}
	return by, names
}

// drawFleet writes fleet-miss.png and fleet-hit.png, the CPU per request
// over every process by instances, one line per series, and
// fleet-cluster-hit.png, a hit's CPU by process on the cluster.
func drawFleet(dir string, points []fleetPoint) error {
	if len(points) == 0 {
		return nil
	}
	by, names := fleetSeries(points)
	save := func(file, title string, lines []any) error {
		pl := plot.New()
		pl.Title.Text = title
		pl.X.Label.Text, pl.Y.Label.Text = "instances", "CPU µs per request"
		if err := plotutil.AddLinePoints(pl, lines...); err != nil {
			return err
		}
		pl.Y.Min = 0
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		return pl.Save(vg.Points(640), vg.Points(360), filepath.Join(dir, file))
	}
	xys := func(ps []fleetPoint, y func(fleetPoint) float64) plotter.XYs {
		out := plotter.XYs{}
		for _, p := range ps {
			out = append(out, plotter.XY{X: float64(p.n), Y: y(p)})
		}
		return out
	}
	for _, path := range fleetPaths {
		var lines []any
		for _, name := range names {
			lines = append(lines, name, xys(by[name], func(p fleetPoint) float64 { return p.total(path) }))
		}
		if err := save("fleet-"+path+".png", "fleet: CPU µs per "+path+" over every process, by instances", lines); err != nil {
			return err
		}
	}
	cluster := by[fleetPoint{hot: "cluster"}.series()]
	if len(cluster) == 0 {
		return nil
	}
	var lines []any
	lines = append(lines, "all", xys(cluster, func(p fleetPoint) float64 { return p.total("hit") }))
	for _, g := range fleetGroups {
		lines = append(lines, g, xys(cluster, func(p fleetPoint) float64 { return p.paths["hit"].cpu[g] }))
	}
	return save("fleet-cluster-hit.png", "Redis Cluster, near cache off: CPU µs per hit by process", lines)
}

// reportFleet writes the fleet curve's results: the CPU per request of
// each process, the idle CPU, the target and the budget of a hit.
func reportFleet(path string, o options, points []fleetPoint, took time.Duration, loadAvg string) error {
	if len(points) == 0 {
		return nil
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# The fleet on a standalone Redis and on a Redis Cluster\n\n")
	p("One run of the fleet curve of `make bench-scale` (loadtest/cmd/scale, `-curves fleet`) on %s, load average %s before it: %s instances of `warmcache serve` on the widgets table of %d rows (values of about 440 bytes, through PgBouncer), sharing the local stack's standalone Redis, then a Redis Cluster of %d masters (%d replicas each) started by the run; each with the near cache off and on (%d MiB per instance, `near_ttl: 30s`). %s, %s per attack, the requests dealt to the instances in turn; %d rounds of every point, of which each attack keeps the round that cost the fewest µs over every process (the machine is shared: interference only adds CPU), the costliest round's total beside it; the curve took %s. ",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), loadAvg, joinInts(o.instances), o.fleetRows, o.clusterMasters, o.clusterReplicas, fleetNearBytes>>20, fleetClients(o), o.duration, o.fleetRounds, took.Round(time.Second))
	p("Placement: %s; every server (the instances, each redis-server, PostgreSQL, PgBouncer) on the servers' CPU. ", o.place)
	p("`miss` reads each key once after the hot tier is flushed, `hit` the keys `miss` read. CPU is per successful request, from /proc: every instance's, every redis-server's of the hot tier, the postmaster's with its backends (live and reaped), PgBouncer's; `all` is their sum. Keys per fold are the keys of each folded read of the instances, to Redis and to the warehouse (their `warmcache_batch_keys`); Redis reads are per request over every redis-server (INFO's `total_reads_processed`, about one per round trip); syscalls are the instances' read and write system calls per request (`syscr` + `syscw` of /proc/<pid>/io), switches their threads' context switches.\n\n")
	p("```sh\nmake bench-scale SCALEFLAGS='%s'\n```\n\n", fleetFlags(o))
	by, names := fleetSeries(points)
	for _, path := range fleetPaths {
		p("## %s\n\n| Redis | near cache | instances | per second | warmcache µs | redis µs | postgres µs | pgbouncer µs | all µs | costliest round | all × 1 instance |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", path)
		for _, name := range names {
			first := by[name][0].total(path)
			for _, pt := range by[name] {
				a := pt.paths[path]
				p("| %s | %s | %d | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f |\n", pt.hot, onOff(pt.near), pt.n, a.rate,
					a.cpu[fleetService], a.cpu[fleetRedis], a.cpu[fleetPostgres], a.cpu[fleetPgBouncer], a.total(), max(a.worst, a.total()), a.total()/first)
			}
		}
		p("\n![%s](fleet-%s.png)\n\nWhat each %s did, in the same attacks:\n\n", path, path, path)
		p("| Redis | near cache | instances | from the near cache | keys per fold: Redis, SQL | Redis reads | warmcache syscalls | warmcache switches |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, pt := range points {
			a := pt.paths[path]
			p("| %s | %s | %d | %.0f%% | %.1f, %.1f | %.2f | %.1f | %.2f |\n", pt.hot, onOff(pt.near), pt.n, 100*a.nearShare,
				a.foldKeys["redis"], a.foldKeys["sql"], a.reads, a.syscalls, a.switches)
		}
		p("\n")
	}
	p("![hit on the cluster by process](fleet-cluster-hit.png)\n\n")
	p("## Idle, after the attacks\n\nCPU in ms per second over %s with the instances serving nothing; the clients connected to the hot tier's servers after the hits, and the MOVED and ASK replies they sent in the point.\n\n", fleetIdle)
	p("| Redis | near cache | instances | warmcache | redis | postgres | pgbouncer | Redis connections | redirections |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, pt := range points {
		p("| %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %d | %d |\n", pt.hot, onOff(pt.near), pt.n,
			pt.idle[fleetService], pt.idle[fleetRedis], pt.idle[fleetPostgres], pt.idle[fleetPgBouncer], pt.clients, pt.redirects)
	}
	p("\n")
	fleetBudget(p, by, names)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// fleetBudget writes, for each series on the cluster, a hit's CPU by
// process with the fewest and the most instances, against the target.
func fleetBudget(p func(string, ...any), by map[string][]fleetPoint, names []string) {
	p("## A hit on the cluster: the target and the budget\n\nThe target: a hit's CPU over every process with the most instances at most %.1f× that with one.\n\n", fleetTarget)
	for _, name := range names {
		ps := by[name]
		first, last := ps[0], ps[len(ps)-1]
		if first.hot != "cluster" || len(ps) < 2 {
			continue
		}
		ratio := last.total("hit") / first.total("hit")
		verdict := "met"
		if ratio > fleetTarget {
			verdict = "missed"
		}
		allowed := fleetTarget * first.total("hit")
		p("**%s**: %d instances cost %.2f× a hit of %d (%.1f against %.1f µs): %s. At %.1f×, %d instances may spend %.1f µs per hit, %.1f µs %s than measured.\n\n",
			name, last.n, ratio, first.n, last.total("hit"), first.total("hit"), verdict, fleetTarget, last.n, allowed, abs(last.total("hit")-allowed), moreOrLess(last.total("hit")-allowed))
		p("| process | µs with %d | µs with %d | growth µs | share of the growth |\n|---|---:|---:|---:|---:|\n", first.n, last.n)
		growth := last.total("hit") - first.total("hit")
		for _, g := range fleetGroups {
			a, z := first.paths["hit"].cpu[g], last.paths["hit"].cpu[g]
			p("| %s | %.1f | %.1f | %+.1f | %.0f%% |\n", g, a, z, z-a, 100*(z-a)/nonZero(growth))
		}
		p("\n")
	}
}

// fleetFlags are the flags that reproduce the fleet curve of o.
func fleetFlags(o options) string {
	flags := fmt.Sprintf("-curves fleet -keep -fleet-rows %d -fleet-rounds %d -instances %s -cluster-masters %d -cluster-replicas %d -workers %d -duration %s",
		o.fleetRows, o.fleetRounds, joinInts(o.instances), o.clusterMasters, o.clusterReplicas, o.workers, o.duration)
	if o.fleetPerInstance {
		flags += " -fleet-per-instance -out " + o.out
	}
	return flags
}

// fleetClients says how many clients each attack had.
func fleetClients(o options) string {
	if o.fleetPerInstance {
		return fmt.Sprintf("%d workers for each instance (%d with %d instances: the load grows with the fleet, as a fleet of sidecars does with its applications)", o.workers, o.workers*slices.Max(o.instances), slices.Max(o.instances))
	}
	return fmt.Sprintf("%d workers shared by the instances (the load stays the same as the fleet grows)", o.workers)
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func moreOrLess(d float64) string {
	if d > 0 {
		return "less"
	}
	return "more"
}

func abs(x float64) float64 { return max(x, -x) }

func nonZero(x float64) float64 {
	if x == 0 {
		return 1
	}
	return x
}
