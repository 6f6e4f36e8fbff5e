package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// httpSpec returns the attack of scenario over targets at saturation; each
// call starts a new ring over them.
func (r *benchRun) httpSpec(scenario string, targets []vegetaTarget, keysPerRequest int) func() attackSpec {
	paths, base, header := ringPaths(targets)
	return func() attackSpec {
		return attackSpec{scenario: scenario, client: r.client, targeter: ring(targets), workers: r.opts.Workers, duration: r.opts.Duration, keysPerRequest: keysPerRequest,
			paths: paths, base: base, header: header}
	}
}

// saturate runs an unmeasured warm-up, then the measured attack at
// saturation, with the CPU of every process measured over it, and records
// it under name.
func (r *benchRun) saturate(ctx context.Context, name string, server *process, label string, spec func() attackSpec) bench.Run {
	if r.opts.Warmup > 0 {
		w := spec()
		w.duration = r.opts.Warmup
		_ = r.saturation(ctx, w)
	}
	run := r.measured(server, label, func() bench.Run { return r.saturation(ctx, spec()) })
	r.report.Saturation[name] = run
	r.logRun(run)
	return run
}

// saturation runs s at saturation: with wrk where the run uses it and s is
// made of plain GETs, with vegeta otherwise (and when wrk fails, with a
// note).
func (r *benchRun) saturation(ctx context.Context, s attackSpec) bench.Run {
	if r.opts.Loader != "wrk" || s.paths == nil {
		return attack(ctx, s)
	}
	// Enough paths for 40,000 requests a second; an attack that asks for
	// each key once and runs faster starts over, and its X-Cache counts
	// show the hits.
	paths := s.paths(int(s.duration.Seconds()*40_000) + 1000)
	if len(paths) == 0 {
		r.note("%s: no keys left to ask for", s.scenario)
		return bench.Run{Scenario: s.scenario, Duration: s.duration}
	}
	run, err := r.wrkAttack(ctx, s.scenario, s.base, paths, s.header, s.workers, s.duration)
	if err != nil {
		r.note("%s: wrk failed, measured with vegeta instead: %v", s.scenario, err)
		return attack(ctx, s)
	}
	return run
}

// atRate runs an unmeasured warm-up, then the measured attack at a fixed
// rate, and records it under name.
func (r *benchRun) atRate(ctx context.Context, name string, rate float64, spec func() attackSpec) {
	if r.opts.Warmup > 0 {
		w := spec()
		w.rate, w.duration = rate, r.opts.Warmup
		_ = attack(ctx, w)
	}
	s := spec()
	s.rate = rate
	run := attack(ctx, s)
	r.report.Fixed[name] = run
	r.logRun(run)
}

// saturateGRPC is saturate for a gRPC attack on t.
func (r *benchRun) saturateGRPC(ctx context.Context, name string, server *process, label string, t *grpcTarget) {
	s := r.grpcSpec(name, t)
	if r.opts.Warmup > 0 {
		w := s
		w.duration = r.opts.Warmup
		_ = grpcAttack(ctx, w)
	}
	run := r.measured(server, label, func() bench.Run { return grpcAttack(ctx, s) })
	r.report.Saturation[name] = run
	r.logRun(run)
}

func (r *benchRun) grpcSpec(name string, t *grpcTarget) grpcSpec {
	return grpcSpec{scenario: name, target: t, namespace: "widgets", keys: r.hotKeys, workers: r.opts.Workers, duration: r.opts.Duration}
}

// httpLoad returns the load of a profile: spec's attack for the given
// duration, answering the requests it sent.
func httpLoad(ctx context.Context, spec func() attackSpec) func(time.Duration) uint64 {
	return func(d time.Duration) uint64 {
		s := spec()
		s.duration = d
		return attack(ctx, s).Requests
	}
}

// stampedeScenario sends the stampede while the cache is cold and
// PostgreSQL's counters of the table are quiet. A failure is noted, not
// returned.
func (r *benchRun) stampedeScenario(ctx context.Context) {
	key := int64(r.perm.At(r.perm.Len()-1)) + 1 // the last key of the miss sequence: never asked for before
	r.logf("stampede: %d concurrent GETs of cold key %d", r.opts.StampedeN, key)
	st, err := r.stampede(ctx, r.svc.targets, r.svc.base+"/metrics", r.opts.StampedeN, key)
	if err != nil {
		r.note("stampede failed: %v", err)
		return
	}
	r.report.Stampede = st
	r.logf("stampede: %d/%d ok, %g SQL queries (service), %d idx_scan (PostgreSQL), %s", st.OK, st.Requests, st.SQLQueries, st.IndexScans, st.Wall.Round(time.Millisecond))
}

func (r *benchRun) floorTargets() []vegetaTarget {
	return newTargetSet(r.floorURL, "").gets(r.hotKeys)
}

// floorScenarios measures the floors at saturation: plain, behind the
// service's middleware, and over gRPC.
func (r *benchRun) floorScenarios(ctx context.Context) error {
	if r.want(bench.Floor) {
		mwTargets := newTargetSet(r.mwURL, r.opts.Token).floorGets(r.hotKeys)
		r.saturate(ctx, bench.Floor, r.floor, "floor", r.httpSpec(bench.Floor, r.floorTargets(), 1))
		r.saturate(ctx, bench.FloorMW, r.floor, "floor", r.httpSpec(bench.FloorMW, mwTargets, 1))
	}
	if r.want(bench.GRPC) {
		gt, err := dialGRPC(r.grpcFloor, r.opts.GRPCConns, "")
		if err != nil {
			return err
		}
		r.saturateGRPC(ctx, bench.GRPCFloor, r.floor, "floor", gt)
		gt.close()
	}
	return nil
}

// hotScenario measures Redis hits at saturation, then the floor and the
// hits at half the hits' throughput, which sets the fixed rate of later
// scenarios.
func (r *benchRun) hotScenario(ctx context.Context) {
	hotSpec := r.httpSpec(bench.Hot, r.svc.targets.gets(r.hotKeys), 1)
	if r.want(bench.Hot) {
		r.folded(ctx, r.svc, bench.Hot, func() { r.saturate(ctx, bench.Hot, r.svc.process, "warmcache", hotSpec) })
		if r.opts.Profile {
			r.profile(ctx, r.svc, bench.Hot, httpLoad(ctx, hotSpec))
		}
	}
	r.halfHot = r.report.Saturation[bench.Hot].Throughput / 2
	if r.halfHot >= 1 {
		if r.want(bench.Floor) {
			r.atRate(ctx, bench.Floor, r.halfHot, r.httpSpec(bench.Floor, r.floorTargets(), 1))
		}
		r.atRate(ctx, bench.Hot, r.halfHot, hotSpec)
	} else if r.want(bench.Hot) {
		r.note("hot saturation throughput was zero: no fixed-rate runs")
	}
}

// grpcScenario measures gRPC hits at saturation.
func (r *benchRun) grpcScenario(ctx context.Context) error {
	gt, err := dialGRPC(r.svc.grpcAddr, r.opts.GRPCConns, r.opts.Token)
	if err != nil {
		return err
	}
	defer gt.close()
	r.folded(ctx, r.svc, bench.GRPC, func() { r.saturateGRPC(ctx, bench.GRPC, r.svc.process, "warmcache", gt) })
	if r.opts.Profile {
		r.profile(ctx, r.svc, bench.GRPC, func(d time.Duration) uint64 {
			s := r.grpcSpec(bench.GRPC, gt)
			s.duration = d
			return grpcAttack(ctx, s).Requests
		})
	}
	return nil
}

// l1Scenario measures the near cache's hits on a second service process
// (the first one idles meanwhile).
func (r *benchRun) l1Scenario(ctx context.Context) error {
	near, err := r.startService(ctx, "service-l1", r.opts.NearEnv)
	if err != nil {
		return err
	}
	if err := r.prewarm(ctx, near, r.distinct); err != nil {
		_ = near.stop()
		return err
	}
	l1Spec := r.httpSpec(bench.L1, near.targets.gets(r.hotKeys), 1)
	r.saturate(ctx, bench.L1, near.process, "warmcache", l1Spec)
	if r.halfHot >= 1 {
		r.atRate(ctx, bench.L1, r.halfHot, l1Spec)
	}
	if r.opts.Profile {
		r.profile(ctx, near, bench.L1, httpLoad(ctx, l1Spec))
	}
	if err := near.stop(); err != nil {
		r.note("%v", err)
	}
	return nil
}

// batchScenarios measures _mget batches and the mixed reads and writes at
// saturation.
func (r *benchRun) batchScenarios(ctx context.Context) {
	if r.want(bench.MGet) {
		targets := r.svc.targets.mget(r.hotKeys, r.opts.MGetBatch)
		r.saturate(ctx, bench.MGet, r.svc.process, "warmcache", r.httpSpec(bench.MGet, targets, r.opts.MGetBatch))
	}
	if r.want(bench.Mixed) {
		targets := r.svc.targets.mixed(r.hotKeys, r.sample)
		r.saturate(ctx, bench.Mixed, r.svc.process, "warmcache", r.httpSpec(bench.Mixed, targets, 1))
	}
}

// missScenario flushes Redis and measures reads of keys never asked for
// before, at saturation and at half that rate.
func (r *benchRun) missScenario(ctx context.Context) error {
	o := r.opts
	n, err := flushPrefix(ctx, r.rdb, o.RedisPrefix)
	if err != nil {
		return err
	}
	r.logf("miss: flushed %d Redis keys; each request asks for a key never asked for before", n)
	missSpec := func() attackSpec {
		return attackSpec{scenario: bench.Miss, client: r.client, targeter: r.svc.targets.coldKeys(r.perm, &r.coldNext), workers: o.Workers, duration: o.Duration, keysPerRequest: 1,
			paths: r.svc.targets.coldPaths(r.perm, &r.coldNext), base: r.svc.base, header: r.svc.targets.headerMap()}
	}
	metrics := r.svc.base + "/metrics"
	before, beforeErr := scrapeFold(ctx, metrics)
	r.missRun = r.saturate(ctx, bench.Miss, r.svc.process, "warmcache", missSpec)
	if after, err := scrapeFold(ctx, metrics); err == nil && beforeErr == nil {
		fold := after.Since(before)
		r.missRun.Fold = &fold
		r.report.Saturation[bench.Miss] = r.missRun
		r.logf("miss: %.2f keys per warehouse query, %.2f keys per Redis read batch", fold.SQLKeys/max(fold.SQLQueries, 1), fold.RedisKeys/max(fold.RedisBatches, 1))
	}
	if r.missRun.Throughput >= 2 {
		r.atRate(ctx, bench.Miss, r.missRun.Throughput/2, missSpec)
	}
	if o.Profile {
		r.profile(ctx, r.svc, bench.Miss, httpLoad(ctx, missSpec))
	}
	r.logf("miss: %d distinct keys asked for in all", r.coldNext.Load())
	return nil
}

// baselines measures pgbench directly and through PgBouncer, pgbench at
// half the miss throughput, and redis-benchmark. A failure is noted, not
// returned.
func (r *benchRun) baselines(ctx context.Context) {
	o := r.opts
	r.logf("baseline: pgbench -M prepared directly, %d clients, %s", o.Workers, o.Duration)
	if b, err := r.pgbench(ctx, o.PGHost, "prepared", o.Workers, 0); err != nil {
		r.note("pgbench at saturation failed: %v", err)
	} else {
		r.report.PgbenchSat = b
		r.logf("  %s lookups/s", bench.FormatRate(b.Throughput))
	}
	// PgBouncer in transaction pooling refuses -M prepared (named
	// statements); -M extended is the service's own protocol there
	// (unnamed statements), -M simple the cheapest.
	for _, mode := range []string{"extended", "simple"} {
		r.logf("baseline: pgbench -M %s through PgBouncer, %d clients, %s", mode, o.Workers, o.Duration)
		if b, err := r.pgbench(ctx, o.PGBouncer, mode, o.Workers, 0); err != nil {
			r.note("pgbench -M %s through PgBouncer failed: %v", mode, err)
		} else {
			r.report.Pooler = append(r.report.Pooler, b)
			r.logf("  %s lookups/s", bench.FormatRate(b.Throughput))
		}
	}
	if r.missRun.Throughput >= 2 {
		rate := r.missRun.Throughput / 2
		r.logf("baseline: pgbench -M prepared at %s/s", bench.FormatRate(rate))
		if b, err := r.pgbench(ctx, o.PGHost, "prepared", o.Workers, rate); err != nil {
			r.note("pgbench at a fixed rate failed: %v", err)
		} else {
			r.report.PgbenchRate = b
			r.logf("  p50 %s p90 %s p99 %s", bench.FormatDuration(b.Latency.P50), bench.FormatDuration(b.Latency.P90), bench.FormatDuration(b.Latency.P99))
		}
	}
	r.logf("baseline: redis-benchmark GET, %d clients, %d-byte value", o.Workers, len(r.sample))
	if b, err := r.redisBenchmark(ctx, r.rdb, o.Workers, len(r.sample)); err != nil {
		r.note("redis-benchmark failed: %v", err)
	} else {
		r.report.RedisGet = b
		r.logf("  %s GET/s", bench.FormatRate(b.Throughput))
	}
}

// peerHotScenario measures the peer's hits on the hot keys at saturation
// and at the rate of the service's fixed-rate hits, after one GET of each
// key has filled the peer's Redis entries.
func (r *benchRun) peerHotScenario(ctx context.Context) error {
	peer := newTargetSet(r.peerURL, "")
	for _, k := range r.distinct {
		res, err := r.client.Get(peer.keyURL(k))
		if err != nil {
			return fmt.Errorf("prewarm the peer: %w", err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("prewarm the peer: GET %s: %s", peer.keyURL(k), res.Status)
		}
	}
	r.logf("peer: %d hot keys in Redis under %q", len(r.distinct), r.opts.PeerPrefix)
	spec := r.httpSpec(bench.PeerHot, peer.gets(r.hotKeys), 1)
	r.saturate(ctx, bench.PeerHot, r.peer, "peer", spec)
	if r.halfHot >= 1 {
		r.atRate(ctx, bench.PeerHot, r.halfHot, spec)
	}
	return nil
}

// peerMissScenario measures the peer's reads of keys never asked for
// before (by the service or the peer), at saturation.
func (r *benchRun) peerMissScenario(ctx context.Context) error {
	o := r.opts
	n, err := flushPrefix(ctx, r.rdb, o.PeerPrefix)
	if err != nil {
		return err
	}
	r.logf("peer miss: flushed %d Redis keys; each request asks for a key never asked for before", n)
	peer := newTargetSet(r.peerURL, "")
	spec := func() attackSpec {
		return attackSpec{scenario: bench.PeerMiss, client: r.client, targeter: peer.coldKeys(r.perm, &r.coldNext), workers: o.Workers, duration: o.Duration, keysPerRequest: 1,
			paths: peer.coldPaths(r.perm, &r.coldNext), base: r.peerURL}
	}
	r.saturate(ctx, bench.PeerMiss, r.peer, "peer", spec)
	return nil
}
