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

	// The floor, in its own process like the service.
	floorAddr, err := freeAddr()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	floor, err := h.startProcess("floor", self, []string{"floor", "-addr", floorAddr, "-bytes", fmt.Sprint(o.FloorBytes)}, cleanEnv())
	if err != nil {
		return err
	}
	defer floor.stop()
	if err := floor.waitReady(ctx, "http://"+floorAddr+"/healthz"); err != nil {
		return err
	}
	floorTargets := newTargetSet("http://"+floorAddr, "").gets(hotKeys)

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
	sat := func(name string, tr func() attackSpec) bench.Run {
		if o.Warmup > 0 {
			w := tr()
			w.duration = o.Warmup
			_ = attack(ctx, w)
		}
		run := attack(ctx, tr())
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

	if h.want(bench.Floor) {
		sat(bench.Floor, spec(bench.Floor, func() []vegetaTarget { return floorTargets }, 1))
	}

	var hotRun bench.Run
	needWarm := h.want(bench.Hot) || h.want(bench.MGet) || h.want(bench.Mixed)
	if needWarm {
		if err := h.prewarm(ctx, svc, distinct); err != nil {
			return err
		}
	}
	hotTargets := svc.targets.gets(hotKeys)
	if h.want(bench.Hot) {
		hotRun = sat(bench.Hot, spec(bench.Hot, func() []vegetaTarget { return hotTargets }, 1))
		if o.Profile {
			h.profile(ctx, svc, spec(bench.Hot, func() []vegetaTarget { return hotTargets }, 1)())
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
	if h.want(bench.MGet) {
		mgetTargets := svc.targets.mget(hotKeys, o.MGetBatch)
		sat(bench.MGet, spec(bench.MGet, func() []vegetaTarget { return mgetTargets }, o.MGetBatch))
	}
	if h.want(bench.Mixed) {
		mixedTargets := svc.targets.mixed(hotKeys, sample)
		sat(bench.Mixed, spec(bench.Mixed, func() []vegetaTarget { return mixedTargets }, 1))
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
		missRun = sat(bench.Miss, missSpec)
		if missRun.Throughput >= 2 {
			fixed(bench.Miss, missRun.Throughput/2, missSpec)
		}
		h.logf("miss: %d distinct keys asked for in all", coldNext.Load())
	}

	// Stop the service before the baselines, so that it is idle for them
	// anyway, and before the l1 instance starts.
	if err := svc.stop(); err != nil {
		h.note("%v", err)
	}
	svc = nil

	if h.want("baselines") {
		h.logf("baseline: pgbench -M prepared, %d clients, %s", o.Workers, o.Duration)
		if b, err := h.pgbench(ctx, o.Workers, 0); err != nil {
			h.note("pgbench at saturation failed: %v", err)
		} else {
			h.report.PgbenchSat = b
			h.logf("  %s lookups/s", bench.FormatRate(b.Throughput))
		}
		if missRun.Throughput >= 2 {
			rate := missRun.Throughput / 2
			h.logf("baseline: pgbench -M prepared at %s/s", bench.FormatRate(rate))
			if b, err := h.pgbench(ctx, o.Workers, rate); err != nil {
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
		sat(bench.L1, spec(bench.L1, func() []vegetaTarget { return l1Targets }, 1))
		if halfHot >= 1 {
			fixed(bench.L1, halfHot, spec(bench.L1, func() []vegetaTarget { return l1Targets }, 1))
		}
		if err := near.stop(); err != nil {
			h.note("%v", err)
		}
	}

	h.report.Env.LoadEnd = loadAverage()
	if err := h.writeReport(); err != nil {
		return err
	}
	h.logf("done in %s", time.Since(start).Round(time.Second))
	return nil
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
	s := &service{process: p, base: "http://" + addr, pprofBase: "http://" + pprofAddr, targets: newTargetSet("http://"+addr, o.Token)}
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
	const batch = 500
	client := &http.Client{Timeout: 30 * time.Second}
	for i := 0; i < len(keys); i += batch {
		body := mgetBody(keys[i:min(i+batch, len(keys))])
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

// profile takes a CPU profile of the service during an extra, unmeasured
// attack of spec and summarises it with go tool pprof -top.
func (h *harness) profile(ctx context.Context, s *service, spec attackSpec) {
	path := filepath.Join(h.opts.ArtifactDir, "hot.cpu.pprof")
	secs := max(1, int(spec.duration.Round(time.Second)/time.Second))
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.pprofBase, secs)
	h.logf("profiling %s during an extra hot attack: %s", s.name, url)
	got := make(chan error, 1)
	go func() {
		got <- fetchToFile(ctx, url, path)
	}()
	spec.duration += 500 * time.Millisecond // cover the whole profile window
	_ = attack(ctx, spec)
	if err := <-got; err != nil {
		h.note("CPU profile not taken: %v (is WARMCACHE_PPROF_ADDR supported by %s?)", err, h.opts.Bin)
		return
	}
	args := []string{"tool", "pprof", "-top", "-nodecount=25", path}
	cumArgs := []string{"tool", "pprof", "-top", "-cum", "-nodecount=80", path}
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		h.note("go tool pprof failed: %v\n%s", err, out)
		return
	}
	cum, err := exec.CommandContext(ctx, "go", cumArgs...).CombinedOutput()
	if err != nil {
		h.note("go tool pprof -cum failed: %v\n%s", err, cum)
	}
	h.report.Profile = &bench.Profile{
		Command: fmt.Sprintf("# while a hot attack runs (the service started with WARMCACHE_PPROF_ADDR=127.0.0.1:PORT):\ncurl -o %s '%s'\ngo %s\ngo %s",
			path, strings.Replace(url, s.pprofBase, "http://127.0.0.1:PORT", 1), strings.Join(args, " "), strings.Join(cumArgs, " ")),
		Top:    stripVolatile(string(out)),
		TopCum: string(cum),
	}
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
	if err := h.report.WriteLatencyChart(filepath.Join(dir, "latency-hot.png"), false); err != nil {
		h.note("hot-path latency chart: %v", err)
	}
	if err := h.report.WriteLatencyChart(filepath.Join(dir, "latency-miss.png"), true); err != nil {
		h.note("miss-path latency chart: %v", err)
	}
	var buf bytes.Buffer
	if err := h.report.WriteMarkdown(&buf, "results"); err != nil {
		return err
	}
	// The hand-written reading of the results (what bounds each target and
	// what would move it) follows the measured part.
	if analysis, err := os.ReadFile(filepath.Join(h.opts.OutDir, "analysis.md")); err == nil {
		buf.WriteString("\n")
		buf.Write(analysis)
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
