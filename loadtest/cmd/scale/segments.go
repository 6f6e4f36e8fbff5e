package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// gpCluster is one Greenplum cluster of the segment curve: its
// coordinator's port on 127.0.0.1 and the data directory (the kit's
// GP_DATA) under which its postmasters' data directories lie, by which its
// processes are told from another cluster's.
type gpCluster struct {
	port    int
	dataDir string
}

// parseClusters reads -gp-clusters: port:datadir, comma-separated.
func parseClusters(s string) ([]gpCluster, error) {
	var out []gpCluster
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		port, dir, ok := strings.Cut(f, ":")
		n, err := strconv.Atoi(port)
		if !ok || err != nil || dir == "" {
			return nil, fmt.Errorf("-gp-clusters: %q is not port:datadir", f)
		}
		out = append(out, gpCluster{port: n, dataDir: dir})
	}
	return out, nil
}

// Process groups of the segment curve's CPU.
const (
	groupService = "warmcache"
	groupCluster = "cluster" // the coordinator and the segments, summed
	// groupNet is the cluster's CPU less its idle work over the attack
	// (point.idle): what the requests themselves cost it.
	groupNet = "cluster-net"
)

// segmentPaths are the segment curve's requests: a miss, a hit, a cold
// key of an _mget batch and a PUT.
var segmentPaths = []string{"miss", "hit", "mget", "put"}

// measureFunc measures the point of rows values of size bytes (0: the
// widget document) on w, running extra (when not nil) while it is served.
type measureFunc func(w warehouse, rows, size int, extra func(p *point, base string, pid int) error) (point, error)

// segmentReport measures the segment curve (segmentCurve) and writes its
// charts and SEGMENTS.md to o.out.
func segmentReport(ctx context.Context, o options, measurePoint measureFunc, log io.Writer) error {
	began := time.Now()
	segs, err := segmentCurve(ctx, o, measurePoint, log)
	if err != nil {
		return err
	}
	if err := drawSegments(o.out, segs); err != nil {
		return err
	}
	return reportSegments(filepath.Join(o.out, "SEGMENTS.md"), o, segs, time.Since(began))
}

// segmentCurve measures the same table of o.segmentRows rows on each
// cluster of o.gpClusters: misses, hits, cold _mget batches of o.gpBatch
// keys and writes, with the CPU per request of the service, of the
// coordinator and of the segments (from /proc, the cluster's processes by
// its data directory), and the doctor's lines on each.
func segmentCurve(ctx context.Context, o options, measurePoint measureFunc, log io.Writer) ([]point, error) {
	type at struct {
		lanes   string
		cluster int
	}
	best := map[at]point{}
	for round := range o.segmentRounds {
		modes := slices.Clone(o.segmentLanes)
		if round%2 == 1 {
			slices.Reverse(modes) // the modes take turns: A B, B A
		}
		for _, lanes := range modes {
			for i, c := range o.gpClusters {
				fmt.Fprintf(log, "==> round %d of %d, segment lanes %s\n", round+1, o.segmentRounds, lanes)
				p, err := segmentPoint(ctx, o, c, lanes, measurePoint, log)
				if err != nil {
					return nil, err
				}
				best[at{lanes, i}] = p.keepCheapest(best[at{lanes, i}], round)
			}
		}
	}
	var out []point
	for _, lanes := range o.segmentLanes {
		for i := range o.gpClusters {
			out = append(out, best[at{lanes, i}])
		}
	}
	return out, nil
}

// segmentPoint measures the segment curve on cluster c once.
func segmentPoint(ctx context.Context, o options, c gpCluster, lanes string, measurePoint measureFunc, log io.Writer) (point, error) {
	w, err := greenplumWarehouse(fmt.Sprintf("postgres://gpadmin@127.0.0.1:%d/postgres?sslmode=disable", c.port))
	if err != nil {
		return point{}, err
	}
	w.dataDir, w.prefix, w.lanes = c.dataDir, "warmcache_scale_seg_", lanes
	segments, err := countSegments(ctx, w.admin)
	if err != nil {
		return point{}, fmt.Errorf("cluster on port %d: %w", c.port, err)
	}
	fmt.Fprintf(log, "==> %d segments (port %d, %s)\n", segments, c.port, c.dataDir)
	p, err := measurePoint(w, o.segmentRows, 0, func(p *point, base string, pid int) error {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.workers * 2}, Timeout: 30 * time.Second}
		perm := rand.New(rand.NewPCG(uint64(o.gpBatch), 4)).Perm(o.segmentRows)
		var next atomic.Int64
		p.attackPath(ctx, client, pid, o, w, "mget", o.gpBatch, func() *http.Request {
			i := int(next.Add(1)-1) * o.gpBatch
			if i+o.gpBatch > len(perm) {
				return nil
			}
			return mgetRequest(base, perm[i:i+o.gpBatch])
		})
		return nil
	})
	if err != nil {
		return point{}, err
	}
	p.segments, p.lanes = segments, lanes
	fmt.Fprintf(log, "    idle: coordinator %s/s, segments %s/s\n", p.idle[bench.RoleCoordinator], p.idle[bench.RoleSegments])
	for _, path := range segmentPaths {
		c := p.cluster[path]
		fmt.Fprintf(log, "    %-5s %8.0f/s  µs per request: warmcache %.1f, coordinator %.1f, segments %.1f, cluster net of idle %.1f\n", path, p.rate[path],
			c[groupService], c[bench.RoleCoordinator], c[bench.RoleSegments], c[groupNet])
	}
	return p, nil
}

// keepCheapest returns, path by path, the measurement of p or of best
// (the cheapest of the rounds before round) whose requests cost the
// cluster the fewest µs in all, with every round's net µs recorded in
// rounds. The choice goes by the whole cost, not the net: interference
// only adds CPU, but a round whose idle window it hit takes off too much.
func (p point) keepCheapest(best point, round int) point {
	if round == 0 {
		p.rounds = map[string][]float64{}
		for _, path := range segmentPaths {
			p.rounds[path] = []float64{p.cluster[path][groupNet]}
		}
		return p
	}
	for _, path := range segmentPaths {
		best.rounds[path] = append(best.rounds[path], p.cluster[path][groupNet])
		if p.cluster[path][groupCluster] < best.cluster[path][groupCluster] {
			best.cluster[path], best.rate[path], best.cpu[path] = p.cluster[path], p.rate[path], p.cpu[path]
			if path == "miss" {
				best.missFold = p.missFold
			}
		}
	}
	return best
}

// idleCPU measures the CPU per second of each role of the cluster under
// dataDir over a window of d in which nothing is asked of the service.
func idleCPU(ctx context.Context, dataDir string, d time.Duration) map[string]time.Duration {
	began := time.Now()
	used := bench.ClusterCPU(dataDir)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	took := time.Since(began)
	out := map[string]time.Duration{}
	for role, cpu := range used() {
		out[role] = time.Duration(float64(cpu) / took.Seconds())
	}
	return out
}

// countSegments returns the primary segments of the cluster of dsn.
func countSegments(ctx context.Context, dsn string) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM gp_segment_configuration WHERE content >= 0 AND role = 'p'").Scan(&n)
	return n, err
}

// mgetRequest is the _mget of keys (0-based, as a permutation gives them).
func mgetRequest(base string, keys []int) *http.Request {
	var b strings.Builder
	b.WriteString(`{"keys":[`)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(k + 1))
	}
	b.WriteString(`]}`)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/kv/widgets/_mget", strings.NewReader(b.String()))
	req.Header.Set("Content-Type", "application/json")
	return req
}

// attackPath attacks one path of p with next and records its rate and the
// service's CPU per request, both per key when each request carries keys
// of them; on a warehouse with a data directory also the CPU per request
// of the service, the coordinator and the segments.
func (p *point) attackPath(ctx context.Context, client *http.Client, pid int, o options, w warehouse, path string, keys int, next func() *http.Request) {
	var cluster func() map[string]time.Duration
	if w.dataDir != "" {
		cluster = bench.ClusterCPU(w.dataDir)
	}
	svc0 := bench.ProcessCPU(pid)
	res := bench.ClosedLoop(ctx, client, o.workers, o.duration, next)
	svc := bench.ProcessCPU(pid) - svc0
	n := max(float64(len(res.Latencies)*keys), 1)
	per := func(d time.Duration) float64 { return d.Seconds() * 1e6 / n }
	p.rate[path], p.cpu[path] = res.Rate()*float64(keys), per(svc)
	if cluster == nil {
		return
	}
	used := cluster()
	if p.cluster == nil {
		p.cluster = map[string]map[string]float64{}
	}
	all := used[bench.RoleCoordinator] + used[bench.RoleSegments]
	idle := time.Duration(float64(p.idle[bench.RoleCoordinator]+p.idle[bench.RoleSegments]) * res.Took.Seconds())
	p.cluster[path] = map[string]float64{
		groupService:          per(svc),
		bench.RoleCoordinator: per(used[bench.RoleCoordinator]),
		bench.RoleSegments:    per(used[bench.RoleSegments]),
		groupCluster:          per(all),
		groupNet:              per(max(all-idle, 0)),
	}
}

// doctorLines runs the doctor of env and returns its lines on dispatch
// and on connections.
func doctorLines(ctx context.Context, o options, env []string) []string {
	out, _ := command(ctx, append(env, "WARMCACHE_PG_POOLER=none"), o.bin, "doctor").CombinedOutput()
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "dispatch") || strings.Contains(l, "connections:") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

// drawSegments writes one PNG per path of the segment curve: CPU per
// request by segments, of the cluster, the coordinator, the segments and
// the service.
func drawSegments(dir string, points []point) error {
	if len(points) == 0 {
		return nil
	}
	for _, path := range segmentPaths {
		pl := plot.New()
		what := map[string]string{"miss": "a miss", "hit": "a hit", "mget": "a cold key of an _mget batch", "put": "a PUT"}[path]
		pl.Title.Text = "Greenplum: CPU µs per request by segments, " + what
		pl.X.Label.Text, pl.Y.Label.Text = "primary segments", "CPU µs per request"
		var lines []any
		modes := laneModes(points)
		groups := []struct{ name, group string }{
			{"coordinator + segments", groupCluster}, {"the same, net of idle work", groupNet}, {"coordinator", bench.RoleCoordinator}, {"segments", bench.RoleSegments}, {"warmcache", groupService},
		}
		if len(modes) > 1 { // the cluster's and the service's lines of each mode, no more
			groups = []struct{ name, group string }{{"cluster", groupCluster}, {"cluster net of idle work", groupNet}, {"warmcache", groupService}}
		}
		for _, g := range groups {
			for _, lanes := range modes {
				xys := plotter.XYs{}
				for _, p := range points {
					if p.lanes == lanes {
						xys = append(xys, plotter.XY{X: float64(p.segments), Y: p.cluster[path][g.group]})
					}
				}
				name := g.name
				if len(modes) > 1 {
					name += ", lanes " + lanes
				}
				lines = append(lines, name, xys)
			}
		}
		if err := plotutil.AddLinePoints(pl, lines...); err != nil {
			return err
		}
		pl.Y.Min = 0
		pl.Legend.Top, pl.Legend.Left = true, true
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := pl.Save(vg.Points(640), vg.Points(360), filepath.Join(dir, "gp-segments-"+path+".png")); err != nil {
			return err
		}
	}
	return nil
}

// reportSegments writes the segment curve's results: the table, each
// path's ratio to the first cluster, and the doctor's lines.
func reportSegments(path string, o options, points []point, took time.Duration) error {
	if len(points) == 0 {
		return nil
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Greenplum by segments\n\n")
	p("One run of the segment curve of `make bench-scale` (loadtest/cmd/scale, `-gp-clusters`) on %s: the same table of %d widget rows (values of about 440 bytes, heap, `DISTRIBUTED BY (key)`, loaded by `warmcache load`) on each cluster, served by `warmcache serve` straight to the coordinator, %d workers, %s per attack; the curve took %s. ",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.segmentRows, o.workers, o.duration, took.Round(time.Second))
	p("warmcache serve and the clients: %s; the clusters are unpinned. CPU is per request (per key for `mget`, cold batches of %d keys), from /proc: the service's, and the coordinator's and the segments' processes of the one cluster, found by its data directory. ", o.place, o.gpBatch)
	p("`miss` reads each key once after the Redis prefix is flushed, `hit` the keys `miss` read, `put` random keys.\n\n")
	p("The cluster's idle work is its CPU per second over %s with `warmcache serve` running and no requests (the service's watermark polls, generation reads and sweeps, and the cluster's own background processes); the net columns take it off each attack, over the attack's length. ", o.idleWindow)
	if o.segmentRounds > 1 {
		p("The clusters took turns for %d rounds; each path keeps the round that cost the cluster the fewest µs (interference only adds CPU), and the net µs of every round are in the last column but one. ", o.segmentRounds)
	}
	p("\n\n| segments | idle: coordinator ms/s | idle: segments ms/s |\n|---:|---:|---:|\n")
	for _, pt := range points {
		p("| %d | %.1f | %.1f |\n", pt.segments, ms(pt.idle[bench.RoleCoordinator]), ms(pt.idle[bench.RoleSegments]))
	}
	p("\n`lanes` is serve's `--gp-segment-lanes`; `× the first` is against the first cluster measured with the same lanes.\n")
	p("\n| segments | lanes | path | per second | warmcache µs | coordinator µs | segments µs | cluster µs | × the first | cluster net of idle µs | × the first | net µs by round | keys per SQL fold |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, path := range segmentPaths {
		for _, pt := range points {
			first := firstOf(points, pt.lanes).cluster[path]
			c := pt.cluster[path]
			var rounds []string
			for _, r := range pt.rounds[path] {
				rounds = append(rounds, fmt.Sprintf("%.0f", r))
			}
			fold := "—"
			switch path {
			case "miss":
				fold = fmt.Sprintf("%.1f", pt.missFold)
			case "mget":
				fold = strconv.Itoa(o.gpBatch)
			}
			p("| %d | %s | %s | %.0f | %.1f | %.1f | %.1f | %.1f | %s | %.1f | %s | %s | %s |\n", pt.segments, pt.lanes, path, pt.rate[path], c[groupService], c[bench.RoleCoordinator], c[bench.RoleSegments],
				c[groupCluster], times(c[groupCluster], first[groupCluster]), c[groupNet], times(c[groupNet], first[groupNet]), strings.Join(rounds, ", "), fold)
		}
	}
	if modes := laneModes(points); len(modes) > 1 {
		p("\nThe cluster's CPU per request net of idle work with lanes `%s` against `%s`, at each size:\n\n| segments | path | %s µs | %s µs | ratio |\n|---:|---|---:|---:|---:|\n", modes[0], modes[1], modes[0], modes[1])
		for _, path := range segmentPaths {
			for _, a := range points {
				for _, b := range points {
					if a.lanes == modes[0] && b.lanes == modes[1] && a.segments == b.segments {
						p("| %d | %s | %.1f | %.1f | %s |\n", a.segments, path, a.cluster[path][groupNet], b.cluster[path][groupNet], times(a.cluster[path][groupNet], b.cluster[path][groupNet]))
					}
				}
			}
		}
	}
	p("\n")
	for _, path := range segmentPaths {
		p("![%s](gp-segments-%s.png)\n", path, path)
	}
	p("\n## The doctor on each cluster\n\n")
	for _, pt := range points {
		p("%d segments, lanes %s:\n\n```text\n%s\n```\n\n", pt.segments, pt.lanes, strings.Join(pt.dispatch, "\n"))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

// times is a as a multiple of b, or a dash where b is zero.
func times(a, b float64) string {
	if b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// firstOf is the first point of points measured with lanes.
func firstOf(points []point, lanes string) point {
	for _, p := range points {
		if p.lanes == lanes {
			return p
		}
	}
	return points[0]
}

// laneModes are the lane modes of points, in their order.
func laneModes(points []point) []string {
	var out []string
	for _, p := range points {
		if !slices.Contains(out, p.lanes) {
			out = append(out, p.lanes)
		}
	}
	return out
}
