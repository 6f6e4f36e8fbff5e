package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/loadtest/bench"
)

// The dapr scenario: warmcache as daprd's pluggable state store, through a
// real daprd (the daprd kit beside the project, shared/dapr), against
// Dapr's own state.redis and state.postgresql (v2) in the same daprd, on
// the same Redis and PostgreSQL server, with the same keys, clients and
// value sizes, in alternating rounds. Each round runs daprGets GETs, then
// daprSaves saves, of each store over daprd's HTTP API from daprClients
// clients, and measures every process's CPU from /proc. warmcache's own
// REST hits of the same keys give its CPU per hit to hold a Dapr GET to.
const (
	daprClients = 16
	daprKeys    = 1000
	daprGets    = 20_000
	daprSaves   = 5_000
	daprRounds  = 3
	// daprAppID is daprd's app ID: state.redis's keys are "wcbench||...".
	daprAppID = "wcbench"
)

// daprStores are the stores of the scenario: the component names of
// deploy/dapr's YAMLs.
var daprStores = []string{"statestore", "redisstate", "pgstate"}

// daprValue is a JSON value of about 130 bytes, as the stores' values are
// in the measurements.
func daprValue(i int) string {
	return fmt.Sprintf(`{"order":%d,"customer":"customer-%06d","items":[{"sku":"sku-%04d","qty":%d}],"status":"paid","note":"dapr bench value"}`,
		i, i, i%997, 1+i%5)
}

// daprPhase is one measured phase: the GETs or the saves of one store in
// one round.
type daprPhase struct {
	store, op string
	round     int
	n         int
	errors    int64
	wall      time.Duration
	p50, p99  time.Duration
	cpu       map[string]time.Duration
}

func (p daprPhase) perSecond() float64 { return float64(p.n) / p.wall.Seconds() }

// cpuPerOp is group's CPU per operation.
func (p daprPhase) cpuPerOp(group string) time.Duration {
	return p.cpu[group] / time.Duration(max(p.n, 1))
}

// daprdKit returns the daprd binary named by WARMCACHE_TEST_DAPRD, or else
// that of the kit beside the project (shared/dapr/daprd.sh in a directory
// above the working directory), or why there is none.
func daprdKit() (string, error) {
	if path := os.Getenv(localstack.EnvTestDaprd); path != "" {
		return path, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 4 {
		dir = filepath.Dir(dir)
		script := filepath.Join(dir, "shared", "dapr", "daprd.sh")
		if _, err := os.Stat(script); err != nil {
			continue
		}
		out, err := exec.Command(script).Output()
		if err != nil {
			return "", fmt.Errorf("%s: %w", script, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	return "", errors.New("no daprd kit (shared/dapr/daprd.sh) in a directory above the project")
}

// daprScenario runs the dapr scenario and records its report section.
func (h *harness) daprScenario(ctx context.Context) error {
	daprdBin, err := daprdKit()
	if err != nil {
		h.note("dapr: not run: %v", err)
		return nil
	}
	o := h.opts
	dir, err := os.MkdirTemp("", "wcbench-dapr-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	database, namespaces, err := h.prepareDaprDatabase(ctx, dir)
	if err != nil {
		return err
	}
	loop := daprServers{redis: o.RedisAddr, postgres: o.PGHost, pgbouncer: o.PGBouncer}
	st, err := h.startDapr(ctx, daprdBin, filepath.Join(dir, "loopback"), namespaces, database, loop)
	if err != nil {
		return err
	}
	defer st.stop()
	defer flushDaprRedis(context.WithoutCancel(ctx), h, o.RedisAddr)
	d := &daprBench{h: h, client: newAttackClient(4 * daprClients), st: st, database: database, keys: make([]string, daprKeys)}
	for i := range d.keys {
		d.keys[i] = fmt.Sprintf("order-%d", i)
	}
	if err := d.warm(ctx); err != nil {
		return err
	}
	h.logf("dapr: daprd %s on %s; %d keys of %d bytes in %s", daprdBin, st.base, daprKeys, len(daprValue(0)), strings.Join(daprStores, ", "))
	d.rounds(ctx)
	rated, err := h.daprAtRates(ctx, d.client, st, d.keys, "loopback")
	if err != nil {
		return err
	}
	st.stop()
	var measured string
	if o.DaprHop > 0 {
		hop, m, err := h.daprOneHop(ctx, daprdBin, filepath.Join(dir, "hop"), namespaces, database, loop, d.client, d.keys)
		if err != nil {
			return err
		}
		rated, measured = append(rated, hop...), m
	}
	h.report.Dapr = daprMarkdown(d.phases, o.ViaPgBouncer, h.pin.String()) + daprRateMarkdown(rated, o.DaprHop, o.DaprNearTTL, measured)
	fmt.Fprint(h.out, h.report.Dapr)
	return nil
}

// prepareDaprDatabase creates the scenario's database, writes its
// namespaces to dir (daprNamespaces) and migrates the database for them;
// it returns the database and the namespaces file.
func (h *harness) prepareDaprDatabase(ctx context.Context, dir string) (database, namespaces string, err error) {
	o := h.opts
	database = o.Database + "_dapr"
	if err := h.createNamedDatabase(ctx, database); err != nil {
		return "", "", err
	}
	if namespaces, err = daprNamespaces(dir, o.DaprNearTTL); err != nil {
		return "", "", err
	}
	env := append(cleanEnv(), "WARMCACHE_POSTGRES_DSN="+dsn(o.PGHost, database))
	if err := localstack.Migrate(ctx, o.Bin, env, "--namespaces", namespaces); err != nil {
		return "", "", fmt.Errorf("dapr: %w", err)
	}
	return database, namespaces, nil
}

// daprServers are the addresses the stores of the dapr scenario reach
// Redis, PostgreSQL and PgBouncer at: the servers', or a latency proxy's
// in front of each.
type daprServers struct{ redis, postgres, pgbouncer string }

// daprStack is one warmcache serving the components and one daprd.
type daprStack struct {
	wc, daprd *process
	base      string // daprd's HTTP API
	wcBase    string // warmcache's HTTP listener
	rest      string // warmcache's REST base of the statestore namespace
}

// stop stops daprd and warmcache; a second call does nothing (a
// process's stop reports its exit once).
func (s *daprStack) stop() {
	if s.daprd != nil {
		_ = s.daprd.stop()
		s.daprd = nil
	}
	if s.wc != nil {
		_ = s.wc.stop()
		s.wc = nil
	}
}

// startDapr starts warmcache, serving its components on a socket folder
// under dir, and daprd with deploy/dapr's components and warmcache's, every
// store reaching the servers at srv.
func (h *harness) startDapr(ctx context.Context, daprdBin, dir, namespaces, database string, srv daprServers) (*daprStack, error) {
	sockets := filepath.Join(dir, "sockets")
	st := &daprStack{}
	var err error
	if st.wc, st.wcBase, err = h.serveDaprComponent(ctx, database, namespaces, sockets, srv); err != nil {
		return nil, err
	}
	st.rest = st.wcBase + "/v1/kv/statestore/"
	if st.daprd, st.base, err = h.startDaprd(ctx, daprdBin, database, filepath.Join(dir, "resources"), sockets, srv); err != nil {
		st.stop()
		return nil, err
	}
	return st, nil
}

// serveDaprComponent serves database with warmcache for namespaces (as
// migrated), its pluggable components statestore and daprNearStore
// listening in the folder sockets, with a 64 MiB near cache (used by
// daprNearStore's namespace alone), reaching the servers at srv; it
// returns the process and the base URL of its HTTP listener.
func (h *harness) serveDaprComponent(ctx context.Context, database, namespaces, sockets string, srv daprServers) (*process, string, error) {
	httpAddr, _ := freeAddr()
	pprofAddr, _ := freeAddr()
	pg, pooler := dsn(srv.postgres, database), "none"
	if h.opts.ViaPgBouncer {
		pg, pooler = dsn(srv.pgbouncer, database), "pgbouncer"
	}
	env := append(cleanEnv(), "WARMCACHE_HTTP_ADDR="+httpAddr, "WARMCACHE_GRPC_ADDR=", "WARMCACHE_POSTGRES_DSN="+pg,
		"WARMCACHE_PG_POOLER="+pooler, "WARMCACHE_REDIS_ADDRS="+srv.redis, "WARMCACHE_REDIS_PREFIX=wcbench-dapr:",
		"WARMCACHE_NAMESPACES_FILE="+namespaces, "WARMCACHE_DAPR_COMPONENTS=statestore,"+daprNearStore,
		"WARMCACHE_NEAR_CACHE_BYTES=67108864", "WARMCACHE_FRESHNESS=poll",
		"WARMCACHE_PPROF_ADDR="+pprofAddr, "WARMCACHE_LOG_LEVEL=warn", "DAPR_COMPONENTS_SOCKETS_FOLDER="+sockets)
	wc, err := h.serve(ctx, "dapr-warmcache", env)
	if err != nil {
		return nil, "", err
	}
	return wc, "http://" + httpAddr, nil
}

// startDaprd starts daprd with deploy/dapr's YAMLs, written to resources
// and pointed at database on the servers at srv, and the pluggable
// components of the folder sockets; it returns the process and the base
// URL of its HTTP API, once daprd is healthy.
func (h *harness) startDaprd(ctx context.Context, bin, database, resources, sockets string, srv daprServers) (*process, string, error) {
	if err := writeDaprResources(resources, dsn(srv.postgres, database), srv.redis); err != nil {
		return nil, "", err
	}
	// The ports are free when picked, and another process may take one
	// before daprd listens: a daprd that exits early starts again on new
	// ports, three times at most.
	var err error
	for try := 1; ; try++ {
		var daprd *process
		var base string
		if daprd, base, err = h.startDaprdOnce(ctx, bin, resources, sockets); err == nil || try == 3 || ctx.Err() != nil {
			return daprd, base, err
		}
		h.logf("dapr: daprd did not start (%v); again on other ports", err)
	}
}

// startDaprdOnce starts daprd on three ports free when picked.
func (h *harness) startDaprdOnce(ctx context.Context, bin, resources, sockets string) (*process, string, error) {
	daprHTTP, _ := freeAddr()
	daprGRPC, _ := freeAddr()
	internal, _ := freeAddr()
	port := func(a string) string { return a[strings.LastIndexByte(a, ':')+1:] }
	daprd, err := h.startProcess("daprd", bin, []string{"--app-id", daprAppID, "--resources-path", resources,
		"--dapr-http-port", port(daprHTTP), "--dapr-grpc-port", port(daprGRPC), "--dapr-internal-grpc-port", port(internal),
		"--dapr-listen-addresses", "127.0.0.1", "--dapr-internal-grpc-listen-address", "127.0.0.1",
		"--enable-metrics=false", "--log-level", "warn"}, append(cleanEnv(), "DAPR_COMPONENTS_SOCKETS_FOLDER="+sockets))
	if err != nil {
		return nil, "", err
	}
	base := "http://" + daprHTTP
	if err := daprd.waitStatus(ctx, base+"/v1.0/healthz", http.StatusNoContent, time.Minute); err != nil {
		_ = daprd.stop()
		return nil, "", err
	}
	return daprd, base, nil
}

// daprBench is one run of the dapr scenario's measurements against the
// daprd and warmcache of st.
type daprBench struct {
	h        *harness
	client   *http.Client
	st       *daprStack
	database string
	keys     []string // the daprKeys keys
	phases   []daprPhase
	saved    atomic.Int64 // the saves so far, which number the values
}

// key is the key of request i.
func (d *daprBench) key(i int) string { return d.keys[i%len(d.keys)] }

// warm saves every key in each store, the near-cached one too, then
// reads each once, so that warmcache answers from Redis.
func (d *daprBench) warm(ctx context.Context) error {
	for _, store := range append(slices.Clone(daprStores), daprNearStore) {
		if err := daprPrefill(ctx, d.client, d.st.base, store, d.keys); err != nil {
			return err
		}
		daprRun(ctx, d.client, daprKeys, daprGet(ctx, d.st.base, store, d.keys))
	}
	return nil
}

// daprGet builds the GET of request i of store through daprd at base, of
// the key i of keys (round the keys).
func daprGet(ctx context.Context, base, store string, keys []string) func(i int) (*http.Request, error) {
	return func(i int) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1.0/state/"+store+"/"+keys[i%len(keys)], nil)
	}
}

// save builds the save of request i of store through daprd, each with a
// value of its own.
func (d *daprBench) save(ctx context.Context, store string) func(i int) (*http.Request, error) {
	return func(i int) (*http.Request, error) {
		body := `[{"key":"` + d.key(i) + `","value":` + daprValue(int(d.saved.Add(1))) + `}]`
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, d.st.base+"/v1.0/state/"+store, strings.NewReader(body))
		if err == nil {
			r.Header.Set("Content-Type", "application/json")
		}
		return r, err
	}
}

// rounds runs daprRounds rounds of GETs then saves of each store, then as
// many rounds of warmcache's own REST hits of the same keys at rest, for
// its CPU per hit.
func (d *daprBench) rounds(ctx context.Context) {
	for round := 1; round <= daprRounds; round++ {
		for _, store := range daprStores {
			d.measure(ctx, store, "get", round, daprGets, daprGet(ctx, d.st.base, store, d.keys))
			d.measure(ctx, store, "save", round, daprSaves, d.save(ctx, store))
		}
	}
	for round := 1; round <= daprRounds; round++ {
		d.measure(ctx, "REST", "get", round, daprGets, func(i int) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodGet, d.st.rest+url.PathEscape(daprAppID+"||"+d.key(i)), nil)
		})
	}
}

// measure runs one phase of n requests with the CPU of every process
// measured over it, and records it.
func (d *daprBench) measure(ctx context.Context, store, op string, round, n int, req func(i int) (*http.Request, error)) {
	w := d.meter().start()
	p := daprRun(ctx, d.client, n, req)
	p.cpu, _ = w.stop()
	p.store, p.op, p.round = store, op, round
	d.phases = append(d.phases, p)
	d.h.logf("dapr round %d %-10s %-4s %7.0f/s  p50 %v  p99 %v  errors %d  warmcache %v/op  daprd %v/op", round, store, op,
		p.perSecond(), p.p50, p.p99, p.errors, p.cpuPerOp("warmcache"), p.cpuPerOp("daprd"))
}

// meter is the CPU meter of the scenario's processes: warmcache, daprd,
// and the harness's Redis, PostgreSQL (the database's backends) and
// PgBouncer where it found them.
func (d *daprBench) meter() *cpuMeter {
	h := d.h
	m := &cpuMeter{interval: 100 * time.Millisecond, groups: []cpuGroup{
		pidGroup("warmcache", d.st.wc.Pid()), pidGroup("daprd", d.st.daprd.Pid())}}
	if h.redisPID > 0 {
		m.groups = append(m.groups, pidGroup(bench.ProcRedis, h.redisPID))
	}
	if h.postmasterPID > 0 {
		m.groups = append(m.groups, backendsGroup(bench.ProcPostgres, h.postmasterPID, d.database))
	}
	if h.pgbouncerPID > 0 {
		m.groups = append(m.groups, pidGroup(bench.ProcPgBouncer, h.pgbouncerPID))
	}
	return m
}

// daprRun sends n requests from daprClients clients and measures them.
func daprRun(ctx context.Context, client *http.Client, n int, req func(i int) (*http.Request, error)) daprPhase {
	var next, unbuilt atomic.Int64
	res := bench.ClosedLoop(ctx, client, daprClients, 0, func() *http.Request {
		for {
			i := int(next.Add(1)) - 1
			if i >= n {
				return nil
			}
			if r, err := req(i); err == nil {
				return r
			}
			unbuilt.Add(1)
		}
	})
	return daprPhase{n: n, errors: int64(res.Errors) + unbuilt.Load(), wall: res.Took, p50: res.Quantile(0.5), p99: res.Quantile(0.99)}
}

// daprPrefill saves keys in store, 100 a request.
func daprPrefill(ctx context.Context, client *http.Client, base, store string, keys []string) error {
	for i := 0; i < len(keys); i += 100 {
		var b strings.Builder
		b.WriteString("[")
		for j := i; j < min(i+100, len(keys)); j++ {
			if j > i {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"key":%q,"value":%s}`, keys[j], daprValue(j))
		}
		b.WriteString("]")
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1.0/state/"+store, strings.NewReader(b.String()))
		if err != nil {
			return err
		}
		r.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(r)
		if err != nil {
			return fmt.Errorf("dapr: prefill %s: %w", store, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("dapr: prefill %s: %d %s", store, resp.StatusCode, body)
		}
	}
	return nil
}

// writeDaprResources writes deploy/dapr's component YAMLs to dir, with the
// built-in stores' servers replaced by the harness's.
func writeDaprResources(dir, pgDSN, redisAddr string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct{ src, old, new string }{
		{"deploy/dapr/components/statestore.yaml", "", ""},
		{"deploy/dapr/components/statestore.yaml", "statestore", daprNearStore},
		{"deploy/dapr/builtin/postgresql.yaml", `"host=127.0.0.1 port=55432 user=postgres dbname=warmcache sslmode=disable"`, `"` + pgDSN + `"`},
		{"deploy/dapr/builtin/redis.yaml", `"127.0.0.1:6379"`, `"` + redisAddr + `"`},
	} {
		raw, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		if f.old != "" {
			if !bytes.Contains(raw, []byte(f.old)) {
				return fmt.Errorf("dapr: %s no longer holds %s", f.src, f.old)
			}
			raw = bytes.ReplaceAll(raw, []byte(f.old), []byte(f.new))
		}
		name := filepath.Base(f.src)
		if f.new == daprNearStore {
			name = daprNearStore + ".yaml"
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// flushDaprRedis deletes state.redis's keys of the scenario.
func flushDaprRedis(ctx context.Context, h *harness, addr string) {
	for _, prefix := range []string{daprAppID + "||", "wcbench-dapr:"} {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		_, err := flushPrefix(ctx, rdb, prefix)
		rdb.Close()
		if err != nil {
			h.logf("dapr: flush %s: %v", prefix, err)
		}
	}
}

// createNamedDatabase creates database unless it exists.
func (h *harness) createNamedDatabase(ctx context.Context, database string) error {
	conn, err := pgx.Connect(ctx, dsn(h.opts.PGHost, "postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", database).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{database}.Sanitize())
	}
	return err
}

// daprMarkdown renders the scenario's section of the report: per store,
// the range over the rounds of each measure, the targets' ratios, and the
// CPU per operation of every process.
func daprMarkdown(phases []daprPhase, viaPgBouncer bool, pinning string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	ps := daprPhases(phases)
	p("\n## Dapr: warmcache through a real daprd\n\n")
	p("daprd 1.17.0 in standalone mode (the daprd kit), with deploy/dapr's components: `statestore` "+
		"(warmcache's pluggable component), `redisstate` (state.redis) and `pgstate` (state.postgresql v2) on the same "+
		"Redis and PostgreSQL server. %d clients over daprd's HTTP API, %d keys of %d bytes, %d GETs then %d saves "+
		"per store and round, %d rounds alternating the stores. warmcache reaches PostgreSQL %s; state.postgresql directly. "+
		"Every warmcache GET is a Redis hit. The machine is shared and noisy; compare the ratios of one run. %s.\n\n",
		daprClients, daprKeys, len(daprValue(0)), daprGets, daprSaves, daprRounds,
		map[bool]string{true: "through PgBouncer, as deployed", false: "directly"}[viaPgBouncer], pinning)
	ps.writeStores(p)
	ps.writeTargets(p)
	ps.writeCPU(p)
	return b.String()
}

// daprPhases are the phases of a run of the scenario.
type daprPhases []daprPhase

// pick returns the phases of op on store, in the order of the rounds.
func (ps daprPhases) pick(store, op string) daprPhases {
	var out daprPhases
	for _, ph := range ps {
		if ph.store == store && ph.op == op {
			out = append(out, ph)
		}
	}
	return out
}

// span returns the range of f over ps, each end in format.
func (ps daprPhases) span(f func(daprPhase) float64, format string) string {
	if len(ps) == 0 {
		return "n/a"
	}
	lo, hi := f(ps[0]), f(ps[0])
	for _, ph := range ps[1:] {
		lo, hi = min(lo, f(ph)), max(hi, f(ph))
	}
	return fmt.Sprintf(format+"–"+format, lo, hi)
}

// ratio returns the range over the rounds of f of store against f of
// other, for op (each round runs the stores back to back).
func (ps daprPhases) ratio(store, other, op string, f func(daprPhase) float64) string {
	a, o := ps.pick(store, op), ps.pick(other, op)
	var rs []float64
	for i := range min(len(a), len(o)) {
		rs = append(rs, f(a[i])/f(o[i]))
	}
	if len(rs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f–%.2f×", slices.Min(rs), slices.Max(rs))
}

// writeStores writes the table of rates, latencies and errors per store.
func (ps daprPhases) writeStores(p func(string, ...any)) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50 := func(x daprPhase) float64 { return ms(x.p50) }
	p99 := func(x daprPhase) float64 { return ms(x.p99) }
	p("| store | GETs/s | GET p50 / p99 ms | saves/s | save p50 / p99 ms | errors |\n|---|---|---|---|---|---|\n")
	for _, store := range daprStores {
		g, s := ps.pick(store, "get"), ps.pick(store, "save")
		var errs int64
		for _, ph := range append(g, s...) {
			errs += ph.errors
		}
		p("| %s | %s | %s / %s | %s | %s / %s | %d |\n", store,
			g.span(daprPhase.perSecond, "%.0f"), g.span(p50, "%.1f"), g.span(p99, "%.1f"),
			s.span(daprPhase.perSecond, "%.0f"), s.span(p50, "%.1f"), s.span(p99, "%.1f"), errs)
	}
}

// writeTargets writes the targets' ratios, round by round.
func (ps daprPhases) writeTargets(p func(string, ...any)) {
	p99 := func(x daprPhase) float64 { return float64(x.p99) }
	wcGet := func(x daprPhase) float64 { return float64(x.cpuPerOp("warmcache")) }
	p("\n| target | this run (per round) |\n|---|---|\n")
	p("| GETs/s ≥ 1.0× state.redis's | %s |\n", ps.ratio("statestore", "redisstate", "get", daprPhase.perSecond))
	p("| GETs/s ≥ 1.2× state.postgresql's | %s |\n", ps.ratio("statestore", "pgstate", "get", daprPhase.perSecond))
	p("| saves/s ≥ 1.0× state.postgresql's | %s |\n", ps.ratio("statestore", "pgstate", "save", daprPhase.perSecond))
	p("| GET p99 ≤ state.redis's p99 | %s |\n", ps.ratio("statestore", "redisstate", "get", p99))
	p("| warmcache CPU per Dapr GET ≤ 1.5× its CPU per REST hit | %s |\n", ps.ratio("statestore", "REST", "get", wcGet))
}

// writeCPU writes every process's CPU per operation of each store and op.
func (ps daprPhases) writeCPU(p func(string, ...any)) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	p("\nCPU per operation, µs (the range over the rounds), from /proc:\n\n")
	p("| store | op | warmcache | daprd | redis | postgres | pgbouncer |\n|---|---|---|---|---|---|---|\n")
	for _, store := range append(slices.Clone(daprStores), "REST") {
		for _, op := range []string{"get", "save"} {
			sel := ps.pick(store, op)
			if len(sel) == 0 {
				continue
			}
			cell := func(g string) string {
				return sel.span(func(x daprPhase) float64 { return us(x.cpuPerOp(g)) }, "%.0f")
			}
			p("| %s | %s | %s | %s | %s | %s | %s |\n", store, op, cell("warmcache"), cell("daprd"), cell(bench.ProcRedis),
				cell(bench.ProcPostgres), cell(bench.ProcPgBouncer))
		}
	}
}
