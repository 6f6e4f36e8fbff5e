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
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/loadtest/bench"
)

// Process groups of the fleet curve's CPU, in the order of its tables.
const (
	fleetService   = "warmcache" // every instance
	fleetRedis     = "redis"     // every redis-server of the hot tier
	fleetPostgres  = "postgres"  // the postmaster, its backends and their reaped children
	fleetPgBouncer = "pgbouncer"
)

var fleetGroups = []string{fleetService, fleetRedis, fleetPostgres, fleetPgBouncer}

// fleetPaths are the fleet curve's requests.
var fleetPaths = []string{"miss", "hit"}

// fleetNearBytes bounds each instance's near cache when it is on: room
// for the whole table.
const fleetNearBytes = 256 << 20

// fleetIdle is the window of the idle CPU, after the attacks.
const fleetIdle = 2 * time.Second

// fleetHot is the hot tier the instances of a series share.
type fleetHot struct {
	name  string   // "standalone" or "cluster"
	addrs []string // every node's, as WARMCACHE_REDIS_ADDRS names them
	pids  []int    // the redis-servers
	flush func(ctx context.Context)
}

// fleetPoint is the fleet curve at one hot tier, near cache and instance
// count.
type fleetPoint struct {
	hot       string
	near      bool
	n         int
	paths     map[string]fleetPath // by path
	idle      map[string]float64   // ms of CPU per second by group, the instances idle after the attacks
	clients   int                  // connections on the redis-servers after the hits
	redirects int64                // MOVED and ASK replies in the point
}

// fleetPath is one attack of a point.
type fleetPath struct {
	rate      float64            // requests per second
	cpu       map[string]float64 // µs per request by group
	nearShare float64            // of the requests, answered by the instance's near cache
	// Per request: the reads of a socket over every redis-server (about
	// one per round trip, a pipeline's commands arriving together), and
	// the instances' read and write system calls and their threads'
	// context switches.
	reads, syscalls, switches float64
	// Keys per folded read of the instances, by tier ("redis", "sql"),
	// from their warmcache_batch_keys.
	foldKeys map[string]float64
	// worst is the all-process CPU per request of the round that cost
	// most, when there were several.
	worst float64
}

// total is the CPU µs per request over every group.
func (f fleetPath) total() float64 {
	var sum float64
	for _, g := range fleetGroups {
		sum += f.cpu[g]
	}
	return sum
}

// total is the CPU µs per request of path over every group.
func (p fleetPoint) total(path string) float64 { return p.paths[path].total() }

// merge keeps, of p and a later round q of the same point, each path's
// attack that cost the fewest µs over every process (interference from
// outside the run only adds CPU), with the costlier one's total as worst,
// and the idle window that cost the least.
func (p fleetPoint) merge(q fleetPoint) fleetPoint {
	for path, a := range p.paths {
		b := q.paths[path]
		worst := max(a.worst, a.total(), b.total())
		if b.total() < a.total() {
			a = b
		}
		a.worst = worst
		p.paths[path] = a
	}
	if idleSum(q.idle) < idleSum(p.idle) {
		p.idle, p.clients, p.redirects = q.idle, q.clients, q.redirects
	}
	return p
}

func idleSum(m map[string]float64) float64 {
	var sum float64
	for _, v := range m {
		sum += v
	}
	return sum
}

// series names p's hot tier and near cache.
func (p fleetPoint) series() string {
	if p.near {
		return p.hot + ", near cache on"
	}
	return p.hot + ", near cache off"
}

// fleet is what every point of the fleet curve shares: the table, the
// environment of serve on it, and the stack's processes.
type fleet struct {
	o                     options
	w                     warehouse
	db                    string
	env                   []string
	rows                  int
	postmaster, pgbouncer int
	client                *http.Client
}

// fleetReport measures the fleet curve (fleetCurve) and writes its charts
// and FLEET.md to o.out.
func fleetReport(ctx context.Context, o options, dbs *databases, log io.Writer) error {
	began, load := time.Now(), loadAverage()
	points, err := fleetCurve(ctx, o, dbs, log)
	if err != nil {
		return err
	}
	if err := drawFleet(o.out, points); err != nil {
		return err
	}
	return reportFleet(filepath.Join(o.out, "FLEET.md"), o, points, time.Since(began), load)
}

// loadAverage returns the machine's load averages over 1, 5 and 15
// minutes, from /proc/loadavg.
func loadAverage() string {
	if f := bench.LoadAverages(); f != nil {
		return strings.Join(f, ", ")
	}
	return "unknown"
}

// fleetCurve serves the widgets table of o.fleetRows rows from each count
// of o.instances of warmcache serve, first on the stack's standalone Redis
// and then on a Redis Cluster of its own, each with the near cache off and
// on, and measures misses and hits with the CPU per request of every
// process: the instances, the redis-servers, PostgreSQL and PgBouncer, all
// on the servers' CPUs.
func fleetCurve(ctx context.Context, o options, dbs *databases, log io.Writer) ([]fleetPoint, error) {
	f, cleanup, err := newFleet(ctx, o, dbs, log)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var hots []fleetHot
	redisPid := localstack.Pids(o.stack)["redis-server"]
	if redisPid > 0 {
		hots = append(hots, fleetHot{name: "standalone", addrs: []string{o.stack.RedisAddr()}, pids: []int{redisPid},
			flush: func(ctx context.Context) { flush(ctx, o) }})
	} else {
		fmt.Fprintf(log, "==> the stack did not start the Redis on %s, whose CPU the curve cannot tell: no standalone series\n", o.stack.RedisAddr())
	}
	// The stack's servers share the servers' CPU with the instances
	// while the curve runs; the backends forked meanwhile are released too.
	stack := func() []int {
		return append(bench.Children(f.postmaster), f.postmaster, f.pgbouncer, redisPid)
	}
	if err := o.place.PinServers(stack()...); err != nil {
		return nil, err
	}
	defer func() { _ = o.place.Release(stack()...) }()
	fmt.Fprintf(log, "==> a Redis Cluster of %d masters and %d replicas each\n", o.clusterMasters, o.clusterReplicas)
	rc, err := startRedisCluster(ctx, o.place, o.clusterMasters, o.clusterReplicas)
	if err != nil {
		return nil, err
	}
	defer rc.stop()
	hots = append(hots, fleetHot{name: "cluster", addrs: rc.addrs, pids: rc.pids(), flush: func(ctx context.Context) { flushCluster(ctx, rc.addrs) }})
	var out []fleetPoint
	for round := range o.fleetRounds {
		i := 0
		for _, hot := range hots {
			for _, near := range []bool{false, true} {
				for _, n := range o.instances {
					fmt.Fprintf(log, "==> round %d: %d instances, %s, near cache %s\n", round+1, n, hot.name, onOff(near))
					p, err := f.point(ctx, hot, near, n, log)
					if err != nil {
						return nil, err
					}
					if round == 0 {
						out = append(out, p)
					} else {
						out[i] = out[i].merge(p)
					}
					i++
				}
			}
		}
	}
	hots[0].flush(ctx) // the stack's Redis, unless there was none
	return out, nil
}

// newFleet prepares the table of the fleet curve and finds the stack's
// PostgreSQL and PgBouncer; cleanup removes its temporary files.
func newFleet(ctx context.Context, o options, dbs *databases, log io.Writer) (*fleet, func(), error) {
	w := postgresWarehouse(o)
	// Every instance may keep a near cache of the namespace.
	w.storage = "    near_ttl: 30s\n" + w.storage
	f := &fleet{o: o, w: w, rows: o.fleetRows, db: fmt.Sprintf("%s%d_0", w.prefix, o.fleetRows),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.workers * 2 * slices.Max(o.instances)}, Timeout: 30 * time.Second}}
	fmt.Fprintf(log, "==> the fleet's table %s\n", f.db)
	p := point{rows: f.rows}
	dir, env, err := prepareTable(ctx, o, w, f.db, &p, log)
	dbs.add(w, f.db)
	if err != nil {
		return nil, nil, err
	}
	f.env = env
	pids := localstack.Pids(o.stack)
	f.postmaster, f.pgbouncer = pids["postgres"], pids["pgbouncer"]
	if f.postmaster == 0 || f.pgbouncer == 0 {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("the fleet curve measures the stack's PostgreSQL and PgBouncer, and found %v in %s", pids, o.stack.Dir)
	}
	return f, func() { os.RemoveAll(dir) }, nil
}

// point starts n instances on hot, with the near cache on or off, and
// attacks them together: misses (each key once, after a flush of the hot
// tier) and hits (the keys the misses read), the requests dealt to the
// instances in turn; then it measures their idle CPU.
func (f *fleet) point(ctx context.Context, hot fleetHot, near bool, n int, log io.Writer) (fleetPoint, error) {
	p := fleetPoint{hot: hot.name, near: near, n: n, paths: map[string]fleetPath{}}
	nearBytes := 0
	if near {
		nearBytes = fleetNearBytes
	}
	var instances []*localstack.Served
	defer func() {
		for _, s := range instances {
			_ = s.Stop(syscall.SIGTERM, time.Minute)
		}
	}()
	for range n {
		s, err := startServe(ctx, f.o, f.env, f.w, f.db, "WARMCACHE_REDIS_ADDRS="+strings.Join(hot.addrs, ","),
			"WARMCACHE_NEAR_CACHE_BYTES="+strconv.Itoa(nearBytes))
		if err != nil {
			return p, err
		}
		instances = append(instances, s)
	}
	hot.flush(ctx)
	resetRedisStats(ctx, hot.addrs)
	var turn atomic.Int64
	get := func(k int) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, instances[int(turn.Add(1))%n].HTTP()+"/v1/kv/widgets/"+strconv.Itoa(k+1), nil)
		return req
	}
	perm := rand.New(rand.NewPCG(uint64(n), 5)).Perm(f.rows)
	var next atomic.Int64
	p.paths["miss"] = f.attack(ctx, hot, instances, func() *http.Request {
		i := next.Add(1) - 1
		if i >= int64(len(perm)) {
			return nil
		}
		return get(perm[i])
	})
	read := int(min(next.Load(), int64(len(perm))))
	p.paths["hit"] = f.attack(ctx, hot, instances, func() *http.Request { return get(perm[rand.IntN(max(read, 1))]) })
	st := readRedisStats(ctx, hot.addrs)
	p.clients, p.redirects = st.clients, st.redirects
	p.idle = f.idle(hot, instances)
	miss, hit := p.paths["miss"], p.paths["hit"]
	fmt.Fprintf(log, "    miss %6.0f/s %6.1f µs (%.1f keys per SQL fold); hit %6.0f/s %6.1f µs (%.0f%% from the near cache, %.2f Redis reads, %.1f keys per Redis fold, %.1f syscalls and %.2f switches each); %d connections on Redis, %d redirections\n",
		miss.rate, miss.total(), miss.foldKeys["sql"], hit.rate, hit.total(), 100*hit.nearShare, hit.reads, hit.foldKeys["redis"], hit.syscalls, hit.switches, p.clients, p.redirects)
	return p, nil
}

// workers returns the clients of an attack on n instances: -workers in
// all, or -workers for each instance with -fleet-per-instance.
func (f *fleet) workers(n int) int {
	if f.o.fleetPerInstance {
		return f.o.workers * n
	}
	return f.o.workers
}

// cpu returns the CPU time each group has used so far.
func (f *fleet) cpu(hot fleetHot, instances []*localstack.Served) map[string]time.Duration {
	var pids []int
	for _, s := range instances {
		pids = append(pids, s.Pid())
	}
	return map[string]time.Duration{
		fleetService:   bench.ProcessCPU(pids...),
		fleetRedis:     bench.ProcessCPU(hot.pids...),
		fleetPostgres:  bench.TreeCPU(f.postmaster),
		fleetPgBouncer: bench.ProcessCPU(f.pgbouncer),
	}
}

// attack attacks the instances with next and returns the rate, each
// group's CPU per successful request, and the rest of fleetPath.
func (f *fleet) attack(ctx context.Context, hot fleetHot, instances []*localstack.Served, next func() *http.Request) fleetPath {
	var pids []int
	for _, s := range instances {
		pids = append(pids, s.Pid())
	}
	folds0 := f.folds(ctx, instances)
	before, st0, sw0, sc0 := f.cpu(hot, instances), readRedisStats(ctx, hot.addrs), bench.ContextSwitches(pids...), bench.Syscalls(pids...)
	res := bench.ClosedLoop(ctx, f.client, f.workers(len(instances)), f.o.duration, next)
	after, st1, sw1, sc1 := f.cpu(hot, instances), readRedisStats(ctx, hot.addrs), bench.ContextSwitches(pids...), bench.Syscalls(pids...)
	folds1 := f.folds(ctx, instances)
	n := max(float64(len(res.Latencies)), 1)
	out := fleetPath{rate: res.Rate(), cpu: map[string]float64{}, foldKeys: map[string]float64{},
		nearShare: float64(res.Tags[string(warmcache.SourceNear)]) / n,
		reads:     float64(st1.reads-st0.reads) / n, switches: float64(sw1-sw0) / n, syscalls: float64(sc1-sc0) / n}
	for _, g := range fleetGroups {
		out.cpu[g] = (after[g] - before[g]).Seconds() * 1e6 / n
	}
	for _, tier := range []string{"redis", "sql"} {
		if c := folds1[tier+"_count"] - folds0[tier+"_count"]; c > 0 {
			out.foldKeys[tier] = (folds1[tier+"_sum"] - folds0[tier+"_sum"]) / c
		}
	}
	return out
}

// folds returns the folded reads of the instances so far, summed: the
// count and the sum of warmcache_batch_keys by tier, as "redis_count",
// "redis_sum", "sql_count" and "sql_sum".
func (f *fleet) folds(ctx context.Context, instances []*localstack.Served) map[string]float64 {
	bases := make([]string, len(instances))
	for i, s := range instances {
		bases[i] = s.HTTP()
	}
	return batchKeys(ctx, f.client, bases)
}

// batchKeys returns the folded reads of the services at bases so far,
// summed: the count and the sum of warmcache_batch_keys by tier, as
// "redis_count", "redis_sum", "sql_count" and "sql_sum".
func batchKeys(ctx context.Context, client *http.Client, bases []string) map[string]float64 {
	out := map[string]float64{}
	for _, base := range bases {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			name, value, ok := strings.Cut(line, " ")
			for _, tier := range []string{"redis", "sql"} {
				for _, part := range []string{"count", "sum"} {
					if ok && name == "warmcache_batch_keys_"+part+`{tier="`+tier+`"}` {
						v, _ := strconv.ParseFloat(value, 64)
						out[tier+"_"+part] += v
					}
				}
			}
		}
	}
	return out
}

// idle returns each group's CPU in ms per second over fleetIdle, with the
// instances serving nothing.
func (f *fleet) idle(hot fleetHot, instances []*localstack.Served) map[string]float64 {
	before := f.cpu(hot, instances)
	time.Sleep(fleetIdle)
	after := f.cpu(hot, instances)
	out := map[string]float64{}
	for _, g := range fleetGroups {
		out[g] = (after[g] - before[g]).Seconds() * 1e3 / fleetIdle.Seconds()
	}
	return out
}

// flushCluster empties every master of the cluster whose nodes are addrs.
func flushCluster(ctx context.Context, addrs []string) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.FlushAll(ctx).Err() })
}

// resetRedisStats resets the statistics of every server of addrs.
func resetRedisStats(ctx context.Context, addrs []string) {
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		_ = c.ConfigResetStat(ctx).Err()
		c.Close()
	}
}

// redisStats are counters of the servers of a hot tier, summed.
type redisStats struct {
	clients   int   // connected, less the one asking
	redirects int64 // MOVED and ASK replies since the statistics were reset
	reads     int64 // reads of a client's socket so far
}

// readRedisStats reads the counters of every server of addrs.
func readRedisStats(ctx context.Context, addrs []string) redisStats {
	var st redisStats
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		info, _ := c.Info(ctx, "clients", "stats", "errorstats").Result()
		c.Close()
		for _, line := range strings.Split(info, "\r\n") {
			name, value, _ := strings.Cut(line, ":")
			n, _ := strconv.ParseInt(value, 10, 64)
			switch name {
			case "connected_clients":
				st.clients += int(n) - 1
			case "total_reads_processed":
				st.reads += n
			case "errorstat_MOVED", "errorstat_ASK":
				_, _ = fmt.Sscanf(value, "count=%d", &n)
				st.redirects += n
			}
		}
	}
	return st
}
