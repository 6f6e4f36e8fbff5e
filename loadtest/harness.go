package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// harness runs the scenarios of one benchmark run and fills report.
type harness struct {
	opts   options
	out    io.Writer
	report bench.Report
	nsFile string
	// The shared servers' processes, for CPU measurements; zero when not
	// found.
	redisPID, postmasterPID, pgbouncerPID int
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.out, "==> "+format+"\n", args...)
}

func (h *harness) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.report.Notes = append(h.report.Notes, msg)
	fmt.Fprintf(h.out, "!!! %s\n", msg)
}

func (h *harness) want(scenario string) bool { return h.opts.Scenarios[scenario] }

// service is one running bin/warmcache serve.
type service struct {
	*process
	base, pprofBase string
	grpcAddr        string
	targets         targetSet
}

func (h *harness) run(ctx context.Context) error {
	o := h.opts
	start := time.Now()
	if err := os.MkdirAll(filepath.Join(o.OutDir, "results"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(o.ArtifactDir, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(o.Bin); err != nil {
		return fmt.Errorf("%s: %w (build it: make build)", o.Bin, err)
	}
	h.report = bench.Report{
		Env: bench.Environment{
			Start: start, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Rows: o.Rows, FloorBytes: o.FloorBytes,
			Workers: o.Workers, Duration: o.Duration, Warmup: o.Warmup, ViaPgBouncer: o.ViaPgBouncer,
			NearCacheEnv: o.NearEnv, ZipfS: o.ZipfS, MGetBatch: o.MGetBatch, Command: o.Command,
			PGAddr: o.PGHost, PgBouncerAddr: o.PGBouncer, GRPCConns: o.GRPCConns,
		},
		Saturation: map[string]bench.Run{},
		Fixed:      map[string]bench.Run{},
	}
	h.report.Env.LoadStart = loadAverage()
	h.logf("load generator, service, floor, PostgreSQL, PgBouncer and Redis all share %d CPUs; load average now %s", runtime.NumCPU(), h.report.Env.LoadStart)

	sample, err := h.prepareDatabase(ctx)
	if err != nil {
		return err
	}
	h.report.Env.ValueBytes = len(sample)
	h.findServers()

	rdb := redis.NewClient(&redis.Options{Addr: o.RedisAddr})
	defer rdb.Close()
	if info, err := rdb.InfoMap(ctx, "server").Result(); err == nil {
		h.report.Env.Redis = info["Server"]["redis_version"]
	}
	if n, err := flushPrefix(ctx, rdb, o.RedisPrefix); err != nil {
		return err
	} else if n > 0 {
		h.logf("flushed %d Redis keys under %q", n, o.RedisPrefix)
	}

	hotKeys, err := bench.ZipfKeys(o.HotSamples, uint64(o.Rows), o.ZipfS, 42)
	if err != nil {
		return err
	}
	distinct := bench.Distinct(hotKeys)
	h.report.Env.HotKeys = len(distinct)
	// A new order of the cold keys every run, so that a run does not find
	// the rows the previous one read still in PostgreSQL's buffers.
	perm, err := bench.NewPermutation(uint64(o.Rows), uint64(start.UnixNano()))
	if err != nil {
		return err
	}
	var coldNext atomic.Uint64

	// The floors, in one process of their own like the service: the plain
	// floor, the floor behind the service's middleware, the gRPC floor.
	var floorAddr, mwAddr, grpcFloorAddr string
	for _, a := range []*string{&floorAddr, &mwAddr, &grpcFloorAddr} {
		if *a, err = freeAddr(); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	floor, err := h.startProcess("floor", self, []string{"floor", "-addr", floorAddr, "-mw-addr", mwAddr, "-grpc-addr", grpcFloorAddr,
		"-bytes", fmt.Sprint(o.FloorBytes)}, cleanEnv())
	if err != nil {
		return err
	}
	defer floor.stop()
	if err := floor.waitReady(ctx, "http://"+floorAddr+"/healthz"); err != nil {
		return err
	}
	if err := floor.waitReady(ctx, "http://"+mwAddr+"/healthz"); err != nil {
		return err
	}
	floorTargets := newTargetSet("http://"+floorAddr, "").gets(hotKeys)
	mwTargets := newTargetSet("http://"+mwAddr, o.Token).floorGets(hotKeys)

	svc, err := h.startService(ctx, "service", o.HotEnv)
	if err != nil {
		return err
	}
	defer func() {
		if svc != nil {
			_ = svc.stop()
		}
	}()

	// The stampede goes first: the cache is cold and PostgreSQL's counters
	// of the table are quiet.
	if h.want(bench.Stampede) {
		key := int64(perm.At(perm.Len()-1)) + 1 // the last key of the miss sequence: never asked for before
		h.logf("stampede: %d concurrent GETs of cold key %d", o.StampedeN, key)
		st, err := h.stampede(ctx, svc.targets, svc.base+"/metrics", o.StampedeN, key)
		if err != nil {
			h.note("stampede failed: %v", err)
		} else {
			h.report.Stampede = st
			h.logf("stampede: %d/%d ok, %g SQL queries (service), %d idx_scan (PostgreSQL), %s", st.OK, st.Requests, st.SQLQueries, st.IndexScans, st.Wall.Round(time.Millisecond))
		}
	}

	client := newAttackClient(4 * o.Workers)
	defer client.CloseIdleConnections()
	// sat runs an unmeasured warm-up, then the measured attack at
	// saturation, with the CPU of every process measured over it.
	sat := func(name string, server *process, label string, tr func() attackSpec) bench.Run {
		if o.Warmup > 0 {
			w := tr()
			w.duration = o.Warmup
			_ = attack(ctx, w)
		}
		run := h.measured(server, label, func() bench.Run { return attack(ctx, tr()) })
		h.report.Saturation[name] = run
		h.logRun(run)
		return run
	}
	fixed := func(name string, rate float64, tr func() attackSpec) {
		if o.Warmup > 0 {
			w := tr()
			w.rate, w.duration = rate, o.Warmup
			_ = attack(ctx, w)
		}
		spec := tr()
		spec.rate = rate
		run := attack(ctx, spec)
		h.report.Fixed[name] = run
		h.logRun(run)
	}
	spec := func(name string, t func() []vegetaTarget, keys int) func() attackSpec {
		return func() attackSpec {
			return attackSpec{scenario: name, client: client, targeter: ring(t()), workers: o.Workers, duration: o.Duration, keysPerRequest: keys}
		}
	}
	grpcSat := func(name string, server *process, label string, t *grpcTarget) {
		s := grpcSpec{scenario: name, target: t, namespace: "widgets", keys: hotKeys, workers: o.Workers, duration: o.Duration}
		if o.Warmup > 0 {
			w := s
			w.duration = o.Warmup
			_ = grpcAttack(ctx, w)
		}
		run := h.measured(server, label, func() bench.Run { return grpcAttack(ctx, s) })
		h.report.Saturation[name] = run
		h.logRun(run)
	}

	if h.want(bench.Floor) {
		sat(bench.Floor, floor, "floor", spec(bench.Floor, func() []vegetaTarget { return floorTargets }, 1))
		sat(bench.FloorMW, floor, "floor", spec(bench.FloorMW, func() []vegetaTarget { return mwTargets }, 1))
	}
	if h.want(bench.GRPC) {
		gt, err := dialGRPC(grpcFloorAddr, o.GRPCConns, "")
		if err != nil {
			return err
		}
		grpcSat(bench.GRPCFloor, floor, "floor", gt)
		gt.close()
	}

	var hotRun bench.Run
	needWarm := h.want(bench.Hot) || h.want(bench.MGet) || h.want(bench.Mixed) || h.want(bench.GRPC)
	if needWarm {
		if err := h.prewarm(ctx, svc, distinct); err != nil {
			return err
		}
	}
	hotTargets := svc.targets.gets(hotKeys)
	if h.want(bench.Hot) {
		hotSpec := spec(bench.Hot, func() []vegetaTarget { return hotTargets }, 1)
		h.folded(ctx, svc, bench.Hot, func() { sat(bench.Hot, svc.process, "warmcache", hotSpec) })
		hotRun = h.report.Saturation[bench.Hot]
		if o.Profile {
			h.profile(ctx, svc, bench.Hot, func(d time.Duration) uint64 {
				s := hotSpec()
				s.duration = d
				return attack(ctx, s).Requests
			})
		}
	}
	halfHot := hotRun.Throughput / 2
	if halfHot >= 1 {
		if h.want(bench.Floor) {
			fixed(bench.Floor, halfHot, spec(bench.Floor, func() []vegetaTarget { return floorTargets }, 1))
		}
		fixed(bench.Hot, halfHot, spec(bench.Hot, func() []vegetaTarget { return hotTargets }, 1))
	} else if h.want(bench.Hot) {
		h.note("hot saturation throughput was zero: no fixed-rate runs")
	}
	if h.want(bench.GRPC) {
		gt, err := dialGRPC(svc.grpcAddr, o.GRPCConns, o.Token)
		if err != nil {
			return err
		}
		h.folded(ctx, svc, bench.GRPC, func() { grpcSat(bench.GRPC, svc.process, "warmcache", gt) })
		if o.Profile {
			h.profile(ctx, svc, bench.GRPC, func(d time.Duration) uint64 {
				return grpcAttack(ctx, grpcSpec{scenario: bench.GRPC, target: gt, namespace: "widgets", keys: hotKeys, workers: o.Workers, duration: d}).Requests
			})
		}
		gt.close()
	}
	// The near cache's hits run right after the Redis hits, close in time
	// to the floors they are held against, on a second service process
	// (the first one idles meanwhile).
	if h.want(bench.L1) {
		near, err := h.startService(ctx, "service-l1", o.NearEnv)
		if err != nil {
			return err
		}
		if err := h.prewarm(ctx, near, distinct); err != nil {
			_ = near.stop()
			return err
		}
		l1Targets := near.targets.gets(hotKeys)
		l1Spec := spec(bench.L1, func() []vegetaTarget { return l1Targets }, 1)
		sat(bench.L1, near.process, "warmcache", l1Spec)
		if halfHot >= 1 {
			fixed(bench.L1, halfHot, l1Spec)
		}
		if o.Profile {
			h.profile(ctx, near, bench.L1, func(d time.Duration) uint64 {
				s := l1Spec()
				s.duration = d
				return attack(ctx, s).Requests
			})
		}
		if err := near.stop(); err != nil {
			h.note("%v", err)
		}
	}

	if h.want(bench.MGet) {
		mgetTargets := svc.targets.mget(hotKeys, o.MGetBatch)
		sat(bench.MGet, svc.process, "warmcache", spec(bench.MGet, func() []vegetaTarget { return mgetTargets }, o.MGetBatch))
	}
	if h.want(bench.Mixed) {
		mixedTargets := svc.targets.mixed(hotKeys, sample)
		sat(bench.Mixed, svc.process, "warmcache", spec(bench.Mixed, func() []vegetaTarget { return mixedTargets }, 1))
	}

	var missRun bench.Run
	if h.want(bench.Miss) {
		n, err := flushPrefix(ctx, rdb, o.RedisPrefix)
		if err != nil {
			return err
		}
		h.logf("miss: flushed %d Redis keys; each request asks for a key never asked for before", n)
		missSpec := func() attackSpec {
			return attackSpec{scenario: bench.Miss, client: client, targeter: svc.targets.coldKeys(perm, &coldNext), workers: o.Workers, duration: o.Duration, keysPerRequest: 1}
		}
		before, beforeErr := scrapeFold(ctx, svc.base+"/metrics")
		missRun = sat(bench.Miss, svc.process, "warmcache", missSpec)
		if after, err := scrapeFold(ctx, svc.base+"/metrics"); err == nil && beforeErr == nil {
			missRun.Fold = &bench.Fold{SQLQueries: after.SQLQueries - before.SQLQueries, SQLKeys: after.SQLKeys - before.SQLKeys,
				RedisBatches: after.RedisBatches - before.RedisBatches, RedisKeys: after.RedisKeys - before.RedisKeys}
			h.report.Saturation[bench.Miss] = missRun
			h.logf("miss: %.2f keys per warehouse query, %.2f keys per Redis read batch", missRun.Fold.SQLKeys/max(missRun.Fold.SQLQueries, 1), missRun.Fold.RedisKeys/max(missRun.Fold.RedisBatches, 1))
		}
		if missRun.Throughput >= 2 {
			fixed(bench.Miss, missRun.Throughput/2, missSpec)
		}
		if o.Profile {
			h.profile(ctx, svc, bench.Miss, func(d time.Duration) uint64 {
				s := missSpec()
				s.duration = d
				return attack(ctx, s).Requests
			})
		}
		h.logf("miss: %d distinct keys asked for in all", coldNext.Load())
	}

	// Stop the service before the baselines, so that it is idle for them
	// anyway.
	if err := svc.stop(); err != nil {
		h.note("%v", err)
	}
	svc = nil

	if h.want("baselines") {
		h.logf("baseline: pgbench -M prepared directly, %d clients, %s", o.Workers, o.Duration)
		if b, err := h.pgbench(ctx, o.PGHost, "prepared", o.Workers, 0); err != nil {
			h.note("pgbench at saturation failed: %v", err)
		} else {
			h.report.PgbenchSat = b
			h.logf("  %s lookups/s", bench.FormatRate(b.Throughput))
		}
		// PgBouncer in transaction pooling refuses -M prepared (named
		// statements); -M extended is the service's own protocol there
		// (unnamed statements), -M simple the cheapest.
		for _, mode := range []string{"extended", "simple"} {
			h.logf("baseline: pgbench -M %s through PgBouncer, %d clients, %s", mode, o.Workers, o.Duration)
			if b, err := h.pgbench(ctx, o.PGBouncer, mode, o.Workers, 0); err != nil {
				h.note("pgbench -M %s through PgBouncer failed: %v", mode, err)
			} else {
				h.report.Pooler = append(h.report.Pooler, b)
				h.logf("  %s lookups/s", bench.FormatRate(b.Throughput))
			}
		}
		if missRun.Throughput >= 2 {
			rate := missRun.Throughput / 2
			h.logf("baseline: pgbench -M prepared at %s/s", bench.FormatRate(rate))
			if b, err := h.pgbench(ctx, o.PGHost, "prepared", o.Workers, rate); err != nil {
				h.note("pgbench at a fixed rate failed: %v", err)
			} else {
				h.report.PgbenchRate = b
				h.logf("  p50 %s p90 %s p99 %s", bench.FormatDuration(b.Latency.P50), bench.FormatDuration(b.Latency.P90), bench.FormatDuration(b.Latency.P99))
			}
		}
		h.logf("baseline: redis-benchmark GET, %d clients, %d-byte value", o.Workers, len(sample))
		if b, err := h.redisBenchmark(ctx, rdb, o.Workers, len(sample)); err != nil {
			h.note("redis-benchmark failed: %v", err)
		} else {
			h.report.RedisGet = b
			h.logf("  %s GET/s", bench.FormatRate(b.Throughput))
		}
	}

	h.report.Env.LoadEnd = loadAverage()
	if err := h.writeReport(); err != nil {
		return err
	}
	h.logf("done in %s", time.Since(start).Round(time.Second))
	return nil
}

// folded runs the saturation attack of scenario on s and records how the
// service folded its reads meanwhile (warmcache_batch_keys): on hits, the
// keys per Redis pipeline.
func (h *harness) folded(ctx context.Context, s *service, scenario string, attack func()) {
	before, beforeErr := scrapeFold(ctx, s.base+"/metrics")
	attack()
	after, err := scrapeFold(ctx, s.base+"/metrics")
	run, ok := h.report.Saturation[scenario]
	if err != nil || beforeErr != nil || !ok {
		return
	}
	run.Fold = &bench.Fold{SQLQueries: after.SQLQueries - before.SQLQueries, SQLKeys: after.SQLKeys - before.SQLKeys,
		RedisBatches: after.RedisBatches - before.RedisBatches, RedisKeys: after.RedisKeys - before.RedisKeys}
	h.report.Saturation[scenario] = run
	h.logf("%s: %.2f keys per Redis read batch (%.0f batches)", scenario, run.Fold.RedisKeys/max(run.Fold.RedisBatches, 1), run.Fold.RedisBatches)
}

// findServers finds the processes of Redis, PostgreSQL (the postmaster)
// and PgBouncer by their listening ports, for the CPU measurements. A
// server that cannot be found is left out of them, with a note.
func (h *harness) findServers() {
	for _, s := range []struct {
		name, addr string
		pid        *int
	}{{"Redis", h.opts.RedisAddr, &h.redisPID}, {"PostgreSQL", h.opts.PGHost, &h.postmasterPID}, {"PgBouncer", h.opts.PGBouncer, &h.pgbouncerPID}} {
		pid, err := listenerPID(s.addr)
		if err != nil {
			h.note("the CPU of %s is not measured: %v", s.name, err)
			continue
		}
		*s.pid = pid
		h.logf("%s on %s is process %d", s.name, s.addr, pid)
	}
}

// meter returns a CPU meter over the server under test (pid zero: none),
// the shared servers and the harness itself as the load generator.
func (h *harness) meter(server int) *cpuMeter {
	m := &cpuMeter{interval: 100 * time.Millisecond}
	if server > 0 {
		m.groups = append(m.groups, pidGroup(bench.ProcServer, server))
	}
	if h.redisPID > 0 {
		m.groups = append(m.groups, pidGroup(bench.ProcRedis, h.redisPID))
	}
	if h.postmasterPID > 0 {
		m.groups = append(m.groups, backendsGroup(bench.ProcPostgres, h.postmasterPID, h.opts.Database))
	}
	if h.pgbouncerPID > 0 {
		m.groups = append(m.groups, pidGroup(bench.ProcPgBouncer, h.pgbouncerPID))
	}
	m.groups = append(m.groups, pidGroup(bench.ProcLoad, os.Getpid()))
	return m
}

// measured runs an attack with the CPU of every process measured over it.
func (h *harness) measured(server *process, label string, attack func() bench.Run) bench.Run {
	w := h.meter(server.cmd.Process.Pid).start()
	run := attack()
	used, wall := w.stop()
	run.CPU = &bench.CPU{Used: used, Wall: wall, Requests: run.Requests, Server: label}
	return run
}

// startService starts bin/warmcache serve on free loopback ports with the
// harness's Redis prefix and extra env, and waits for /readyz.
func (h *harness) startService(ctx context.Context, name string, extra []string) (*service, error) {
	o := h.opts
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	pprofAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	pg := dsn(o.PGHost, o.Database)
	pooler := "none"
	if o.ViaPgBouncer {
		pg, pooler = dsn(o.PGBouncer, o.Database), "pgbouncer"
	}
	env := append(cleanEnv(),
		"WARMCACHE_HTTP_ADDR="+addr,
		"WARMCACHE_POSTGRES_DSN="+pg,
		"WARMCACHE_PG_POOLER="+pooler,
		"WARMCACHE_REDIS_ADDRS="+o.RedisAddr,
		"WARMCACHE_REDIS_PREFIX="+o.RedisPrefix,
		"WARMCACHE_NAMESPACES_FILE="+h.nsFile,
		"WARMCACHE_PPROF_ADDR="+pprofAddr,
		"WARMCACHE_GRPC_ADDR="+grpcAddr,
		"WARMCACHE_LOG_LEVEL=warn",
	)
	env = append(env, extra...)
	h.logf("starting %s on %s (pprof %s) %s", name, addr, pprofAddr, strings.Join(extra, " "))
	p, err := h.startProcess(name, o.Bin, []string{"serve"}, env)
	if err != nil {
		return nil, err
	}
	s := &service{process: p, base: "http://" + addr, pprofBase: "http://" + pprofAddr, grpcAddr: grpcAddr, targets: newTargetSet("http://"+addr, o.Token)}
	if err := p.waitReady(ctx, s.base+"/readyz"); err != nil {
		_ = p.stop()
		return nil, err
	}
	return s, nil
}

// prewarm asks for keys through _mget so that every one of them is in
// Redis, then checks that one GET is a hit.
func (h *harness) prewarm(ctx context.Context, s *service, keys []int64) error {
	h.logf("pre-warming %d hot keys through %s", len(keys), s.name)
	// Batches small enough for the service's per-tier deadlines on a
	// cold, busy machine; a batch that still fails (503) is tried again a
	// few times, a second apart.
	const batch, tries = 100, 5
	client := &http.Client{Timeout: 30 * time.Second}
	mget := func(body []byte) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/kv/widgets/_mget", bytes.NewReader(body))
		req.Header = s.targets.header.Clone()
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("pre-warm: %w", err)
		}
		var answer struct {
			Missing []json.RawMessage `json:"missing"`
		}
		err = json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			return fmt.Errorf("pre-warm: _mget answered %s (%v)", resp.Status, err)
		}
		if len(answer.Missing) > 0 {
			return fmt.Errorf("pre-warm: %d keys missing from the table", len(answer.Missing))
		}
		return nil
	}
	for i := 0; i < len(keys); i += batch {
		body := mgetBody(keys[i:min(i+batch, len(keys))])
		var err error
		for try := range tries {
			if err = mget(body); err == nil {
				break
			}
			if try < tries-1 {
				h.logf("  %v; trying again", err)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
			}
		}
		if err != nil {
			return err
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.targets.keyURL(keys[0]), nil)
	req.Header = s.targets.header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("pre-warm check: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if src := resp.Header.Get("X-Cache"); resp.StatusCode != http.StatusOK || (src != bench.SourceHot && src != bench.SourceL1) {
		h.note("after pre-warming, GET of key %d answered %s with X-Cache %q", keys[0], resp.Status, src)
	}
	return nil
}

// profile takes a CPU profile and an allocation profile of the service
// during an extra, unmeasured attack on one path (load runs it for the
// given duration and returns the requests answered), and summarises both
// with go tool pprof -top.
func (h *harness) profile(ctx context.Context, s *service, path string, load func(time.Duration) uint64) {
	cpuPath := filepath.Join(h.opts.ArtifactDir, path+".cpu.pprof")
	allocPath := filepath.Join(h.opts.ArtifactDir, path+".allocs.pprof")
	secs := max(1, int(h.opts.Duration.Round(time.Second)/time.Second))
	cpuURL := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.pprofBase, secs)
	allocURL := fmt.Sprintf("%s/debug/pprof/allocs?seconds=%d", s.pprofBase, secs)
	h.logf("profiling %s during an extra %s attack: %s and %s", s.name, path, cpuURL, allocURL)
	got := make(chan error, 2)
	go func() { got <- fetchToFile(ctx, cpuURL, cpuPath) }()
	go func() { got <- fetchToFile(ctx, allocURL, allocPath) }()
	// Cover the whole profile window, and count the requests of the
	// window alone (the rate is steady) for allocations per request.
	const margin = 250 * time.Millisecond
	window := time.Duration(secs) * time.Second
	requests := uint64(float64(load(window+margin)) * float64(window) / float64(window+margin))
	if err := errors.Join(<-got, <-got); err != nil {
		h.note("%s profiles not taken: %v (is WARMCACHE_PPROF_ADDR supported by %s?)", path, err, h.opts.Bin)
		return
	}
	pprofTop := func(args ...string) string {
		out, err := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof"}, args...)...).CombinedOutput()
		if err != nil {
			h.note("go tool pprof %s failed: %v\n%s", strings.Join(args, " "), err, out)
			return ""
		}
		return stripVolatile(string(out))
	}
	top := []string{"-top", "-nodecount=25", cpuPath}
	cum := []string{"-top", "-cum", "-nodecount=80", cpuPath}
	allocs := []string{"-top", "-nodecount=20", "-sample_index=alloc_space", allocPath}
	objects := []string{"-top", "-nodecount=20", "-sample_index=alloc_objects", allocPath}
	pr := bench.Profile{
		Path: path,
		Command: fmt.Sprintf("# while a %s attack runs (the service started with WARMCACHE_PPROF_ADDR=127.0.0.1:PORT):\ncurl -o %s '%s'\ncurl -o %s '%s'\ngo tool pprof %s\ngo tool pprof %s",
			path, cpuPath, strings.Replace(cpuURL, s.pprofBase, "http://127.0.0.1:PORT", 1),
			allocPath, strings.Replace(allocURL, s.pprofBase, "http://127.0.0.1:PORT", 1),
			strings.Join(top, " "), strings.Join(allocs, " ")),
		Top:          pprofTop(top...),
		TopCum:       pprofTop(cum...),
		Allocs:       pprofTop(allocs...),
		AllocObjects: pprofTop(objects...),
		Requests:     requests,
	}
	h.report.Profiles = append(h.report.Profiles, pr)
}

// stripVolatile drops the header lines of pprof output that name the
// local file and the time of the run.
func stripVolatile(top string) string {
	var keep []string
	for _, line := range strings.Split(top, "\n") {
		if strings.HasPrefix(line, "File: ") || strings.HasPrefix(line, "Build ID: ") || strings.HasPrefix(line, "Time: ") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

func fetchToFile(ctx context.Context, url, path string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

func (h *harness) logRun(r bench.Run) {
	mode := "saturation"
	if r.Rate > 0 {
		mode = fmt.Sprintf("at %s/s", bench.FormatRate(r.Rate))
	}
	h.logf("%-6s %-14s %8s req/s  p50 %s  p90 %s  p99 %s  success %s  X-Cache %v",
		r.Scenario, mode, bench.FormatRate(r.Throughput), bench.FormatDuration(r.Latency.P50), bench.FormatDuration(r.Latency.P90),
		bench.FormatDuration(r.Latency.P99), bench.FormatPercent(r.Success), r.Sources)
	if len(r.Errors) > 0 {
		h.logf("       errors: %s", strings.Join(r.Errors, "; "))
	}
}

func (h *harness) writeReport() error {
	dir := filepath.Join(h.opts.OutDir, "results")
	if err := h.report.WriteThroughputChart(filepath.Join(dir, "throughput.png")); err != nil {
		h.note("throughput chart: %v", err)
	}
	if err := h.report.WriteCPUChart(filepath.Join(dir, "cpu.png")); err != nil {
		h.note("CPU chart: %v", err)
	}
	if err := h.report.WriteLatencyChart(filepath.Join(dir, "latency-hot.png"), false); err != nil {
		h.note("hot-path latency chart: %v", err)
	}
	if err := h.report.WriteLatencyChart(filepath.Join(dir, "latency-miss.png"), true); err != nil {
		h.note("miss-path latency chart: %v", err)
	}
	if h.opts.Before != "" {
		f, err := os.Open(h.opts.Before)
		if err != nil {
			return fmt.Errorf("-before: %w", err)
		}
		before, err := bench.ReadJSON(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("-before %s: %w", h.opts.Before, err)
		}
		h.report.Before, h.report.BeforeLabel = before, h.opts.BeforeLabel
	}
	var js bytes.Buffer
	if err := h.report.WriteJSON(&js); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js.Bytes(), 0o644); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := h.report.WriteMarkdown(&buf, "results"); err != nil {
		return err
	}
	// The hand-written reading of the results (what bounds each target and
	// what would move it) follows the measured part, and then the results
	// of the freshness benchmark (internal/freshtest), which runs on a
	// cluster of its own.
	for _, part := range []string{"analysis.md", "freshness.md"} {
		if text, err := os.ReadFile(filepath.Join(h.opts.OutDir, part)); err == nil {
			buf.WriteString("\n")
			buf.Write(text)
		}
	}
	path := filepath.Join(h.opts.OutDir, "RESULTS.md")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return err
	}
	h.logf("wrote %s and %s/*.png", path, dir)
	return nil
}

// loadAverage returns the 1-minute load average, or "" where
// /proc/loadavg does not exist.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
