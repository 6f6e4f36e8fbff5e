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
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
	"github.com/warmcache/warmcache/loadtest/pin"
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
	// pin places the servers and the load generators on separate CPUs.
	pin pin.Placement
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

// run is one benchmark run: prepare the database and the servers, start
// the floors and the service, run the scenarios, measure the baselines
// and write the report.
func (h *harness) run(ctx context.Context) error {
	start := time.Now()
	if err := h.begin(start); err != nil {
		return err
	}
	r, err := h.prepare(ctx, start)
	if err != nil {
		return err
	}
	defer h.dropCaptureSlot()
	defer r.close()
	if err := h.pinAll(); err != nil {
		return err
	}
	defer h.unpin()
	if err := r.startFloors(ctx); err != nil {
		return err
	}
	if r.svc, err = h.startService(ctx, "service", h.opts.HotEnv); err != nil {
		return err
	}
	if err := r.scenarios(ctx); err != nil {
		return err
	}
	// Stop the service before the baselines, so that it is idle for them
	// anyway.
	if err := r.svc.stop(); err != nil {
		h.note("%v", err)
	}
	r.svc = nil
	if h.want("dapr") {
		if err := h.daprScenario(ctx); err != nil {
			return err
		}
	}
	if h.want("baselines") {
		r.baselines(ctx)
	}
	h.report.Env.LoadEnd = loadAverage()
	if err := h.writeReport(); err != nil {
		return err
	}
	h.logf("done in %s", time.Since(start).Round(time.Second))
	return nil
}

// pinAll moves the harness to the load generators' CPUs and the running
// shared servers to the servers' CPU, as h.pin says.
func (h *harness) pinAll() error {
	h.report.Env.Pinning, h.report.Env.Pinned = h.pin.String(), h.pin.On()
	h.logf("%s", h.pin)
	if err := h.pin.PinSelf(); err != nil {
		return fmt.Errorf("pin the load generator: %w", err)
	}
	if err := h.pin.PinServers(h.serverPIDs()...); err != nil {
		return fmt.Errorf("pin the shared servers: %w", err)
	}
	return nil
}

// serverPIDs are the shared servers' processes: Redis, PgBouncer, and
// PostgreSQL's postmaster with every backend it has forked.
func (h *harness) serverPIDs() []int {
	pids := []int{h.redisPID, h.pgbouncerPID}
	if h.postmasterPID > 0 {
		pids = append(append(pids, h.postmasterPID), bench.Children(h.postmasterPID)...)
	}
	return pids
}

// unpin gives the shared servers every CPU again.
func (h *harness) unpin() {
	if err := h.pin.Release(h.serverPIDs()...); err != nil {
		h.logf("%v", err)
	}
}

// begin checks the binary, makes the output directories and starts the
// report with the run's environment.
func (h *harness) begin(start time.Time) error {
	o := h.opts
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
			Workers: o.Workers, Duration: o.Duration, Warmup: o.Warmup, ViaPgBouncer: o.ViaPgBouncer, Capture: o.Capture,
			NearCacheEnv: o.NearEnv, ZipfS: o.ZipfS, MGetBatch: o.MGetBatch, Command: o.Command,
			PGAddr: o.PGHost, PgBouncerAddr: o.PGBouncer, GRPCConns: o.GRPCConns,
		},
		Saturation: map[string]bench.Run{},
		Fixed:      map[string]bench.Run{},
	}
	h.report.Env.LoadStart = loadAverage()
	h.pin = pin.New(o.Pin)
	h.logf("%d CPUs; load average now %s", runtime.NumCPU(), h.report.Env.LoadStart)
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
	fold := after.Since(before)
	run.Fold = &fold
	h.report.Saturation[scenario] = run
	h.logf("%s: %.2f keys per Redis read batch (%.0f batches, %.0f lanes spilled)", scenario, run.Fold.RedisKeys/max(run.Fold.RedisBatches, 1), run.Fold.RedisBatches, run.Fold.LaneSpills)
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
	w := h.meter(server.Pid()).start()
	run := attack()
	used, wall := w.stop()
	if run.CPU != nil { // an external load generator's CPU, measured by the attack
		for g, d := range run.CPU.Used {
			used[g] += d
		}
	}
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
	if o.Capture {
		// As the local stack deploys it: replication does not pass
		// PgBouncer. Every service of the run shares the slot, as the
		// instances of one deployment do.
		env = append(env, "WARMCACHE_REPLICATION_DSN="+dsn(o.PGHost, o.Database), "WARMCACHE_REPLICATION_SLOT="+captureSlot)
	}
	env = append(env, extra...)
	h.logf("starting %s on %s (pprof %s) %s", name, addr, pprofAddr, strings.Join(extra, " "))
	p, err := h.serve(ctx, name, env)
	if err != nil {
		return nil, err
	}
	return &service{process: p, base: "http://" + addr, pprofBase: "http://" + pprofAddr, grpcAddr: grpcAddr, targets: newTargetSet("http://"+addr, o.Token)}, nil
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
	status, header, err := s.targets.fetch(ctx, client, keys[0])
	if err != nil {
		return fmt.Errorf("pre-warm check: %w", err)
	}
	if src := header.Get("X-Cache"); status != http.StatusOK || (src != bench.SourceHot && src != bench.SourceL1) {
		h.note("after pre-warming, GET of key %d answered %d %s with X-Cache %q", keys[0], status, http.StatusText(status), src)
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
	buf.Write(handWritten(h.opts.OutDir))
	path := filepath.Join(h.opts.OutDir, "RESULTS.md")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return err
	}
	h.logf("wrote %s and %s/*.png", path, dir)
	return nil
}

// handWritten returns the hand-written parts of the report in dir, each
// after an empty line: the reading of the results (what bounds each
// target and what would move it), then the results of the change capture
// benchmark (e2e/capture), which runs on a cluster of its own. A part that
// is missing is left out.
func handWritten(dir string) []byte {
	var buf bytes.Buffer
	for _, part := range []string{"analysis.md", "capture.md"} {
		if text, err := os.ReadFile(filepath.Join(dir, part)); err == nil {
			buf.WriteString("\n")
			buf.Write(text)
		}
	}
	return buf.Bytes()
}

// loadAverage returns the 1-minute load average, or "" where
// /proc/loadavg does not exist.
func loadAverage() string {
	if f := bench.LoadAverages(); f != nil {
		return f[0]
	}
	return ""
}
