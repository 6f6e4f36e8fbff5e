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
	database := o.Database + "_dapr"
	if err := h.createNamedDatabase(ctx, database); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "wcbench-dapr-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	namespaces, err := filepath.Abs("deploy/dapr/namespaces.yaml")
	if err != nil {
		return err
	}
	migrate := exec.CommandContext(ctx, o.Bin, "migrate", "up", "--namespaces", namespaces)
	migrate.Env = append(cleanEnv(), "WARMCACHE_POSTGRES_DSN="+dsn(o.PGHost, database))
	if out, err := migrate.CombinedOutput(); err != nil {
		return fmt.Errorf("dapr: migrate: %v\n%s", err, out)
	}

	// warmcache, serving the component on a socket folder of its own.
	sockets := filepath.Join(dir, "sockets")
	httpAddr, _ := freeAddr()
	pprofAddr, _ := freeAddr()
	pg, pooler := dsn(o.PGHost, database), "none"
	if o.ViaPgBouncer {
		pg, pooler = dsn(o.PGBouncer, database), "pgbouncer"
	}
	env := append(cleanEnv(), "WARMCACHE_HTTP_ADDR="+httpAddr, "WARMCACHE_GRPC_ADDR=", "WARMCACHE_POSTGRES_DSN="+pg,
		"WARMCACHE_PG_POOLER="+pooler, "WARMCACHE_REDIS_ADDRS="+o.RedisAddr, "WARMCACHE_REDIS_PREFIX=wcbench-dapr:",
		"WARMCACHE_NAMESPACES_FILE="+namespaces, "WARMCACHE_DAPR_COMPONENTS=statestore", "WARMCACHE_FRESHNESS=poll",
		"WARMCACHE_PPROF_ADDR="+pprofAddr, "WARMCACHE_LOG_LEVEL=warn", "DAPR_COMPONENTS_SOCKETS_FOLDER="+sockets)
	wc, err := h.startProcess("dapr-warmcache", o.Bin, []string{"serve"}, env)
	if err != nil {
		return err
	}
	defer func() { _ = wc.stop() }()
	if err := wc.waitReady(ctx, "http://"+httpAddr+"/readyz"); err != nil {
		return err
	}

	// daprd, with deploy/dapr's YAMLs pointed at the harness's servers.
	resources := filepath.Join(dir, "resources")
	if err := writeDaprResources(resources, dsn(o.PGHost, database), o.RedisAddr); err != nil {
		return err
	}
	daprHTTP, _ := freeAddr()
	daprGRPC, _ := freeAddr()
	internal, _ := freeAddr()
	port := func(a string) string { return a[strings.LastIndexByte(a, ':')+1:] }
	daprd, err := h.startProcess("daprd", daprdBin, []string{"--app-id", daprAppID, "--resources-path", resources,
		"--dapr-http-port", port(daprHTTP), "--dapr-grpc-port", port(daprGRPC), "--dapr-internal-grpc-port", port(internal),
		"--dapr-listen-addresses", "127.0.0.1", "--dapr-internal-grpc-listen-address", "127.0.0.1",
		"--enable-metrics=false", "--log-level", "warn"}, append(cleanEnv(), "DAPR_COMPONENTS_SOCKETS_FOLDER="+sockets))
	if err != nil {
		return err
	}
	defer func() { _ = daprd.stop() }()
	base := "http://" + daprHTTP
	if err := waitStatus(ctx, daprd, base+"/v1.0/healthz", http.StatusNoContent); err != nil {
		return err
	}
	defer flushDaprRedis(context.WithoutCancel(ctx), h, o.RedisAddr)

	client := newAttackClient(4 * daprClients)
	keys := make([]string, daprKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-%d", i)
	}
	for _, store := range daprStores {
		if err := daprPrefill(ctx, client, base, store, keys); err != nil {
			return err
		}
		// One pass of reads, so that warmcache answers from Redis.
		daprRun(ctx, client, daprKeys, func(i int) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1.0/state/"+store+"/"+keys[i%daprKeys], nil)
		})
	}
	h.logf("dapr: daprd %s on %s; %d keys of %d bytes in %s", daprdBin, base, daprKeys, len(daprValue(0)), strings.Join(daprStores, ", "))

	groups := func() *cpuMeter {
		m := &cpuMeter{interval: 100 * time.Millisecond, groups: []cpuGroup{
			pidGroup("warmcache", wc.cmd.Process.Pid), pidGroup("daprd", daprd.cmd.Process.Pid)}}
		if h.redisPID > 0 {
			m.groups = append(m.groups, pidGroup(bench.ProcRedis, h.redisPID))
		}
		if h.postmasterPID > 0 {
			m.groups = append(m.groups, backendsGroup(bench.ProcPostgres, h.postmasterPID, database))
		}
		if h.pgbouncerPID > 0 {
			m.groups = append(m.groups, pidGroup(bench.ProcPgBouncer, h.pgbouncerPID))
		}
		return m
	}
	var phases []daprPhase
	measure := func(store, op string, round, n int, req func(i int) (*http.Request, error)) {
		w := groups().start()
		p := daprRun(ctx, client, n, req)
		p.cpu, _ = w.stop()
		p.store, p.op, p.round = store, op, round
		phases = append(phases, p)
		h.logf("dapr round %d %-10s %-4s %7.0f/s  p50 %v  p99 %v  errors %d  warmcache %v/op  daprd %v/op", round, store, op,
			p.perSecond(), p.p50, p.p99, p.errors, p.cpuPerOp("warmcache"), p.cpuPerOp("daprd"))
	}
	var saved atomic.Int64
	for round := 1; round <= daprRounds; round++ {
		for _, store := range daprStores {
			measure(store, "get", round, daprGets, func(i int) (*http.Request, error) {
				return http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1.0/state/"+store+"/"+keys[i%daprKeys], nil)
			})
			measure(store, "save", round, daprSaves, func(i int) (*http.Request, error) {
				body := `[{"key":"` + keys[i%daprKeys] + `","value":` + daprValue(int(saved.Add(1))) + `}]`
				r, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1.0/state/"+store, strings.NewReader(body))
				if err == nil {
					r.Header.Set("Content-Type", "application/json")
				}
				return r, err
			})
		}
	}
	// warmcache's own REST hits of the same keys, for its CPU per hit.
	rest := "http://" + httpAddr + "/v1/kv/statestore/"
	for round := 1; round <= daprRounds; round++ {
		measure("REST", "get", round, daprGets, func(i int) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodGet, rest+url.PathEscape(daprAppID+"||"+keys[i%daprKeys]), nil)
		})
	}
	h.report.Dapr = daprMarkdown(phases, o.ViaPgBouncer, h.pin.String())
	fmt.Fprint(h.out, h.report.Dapr)
	return nil
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
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f.src)), raw, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// waitStatus polls url until it answers status, p exits, or a minute
// passes.
func waitStatus(ctx context.Context, p *process, url string, status int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == status {
				return nil
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited (%v); see %s", p.name, err, p.log.Name())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s; see %s", p.name, url, p.log.Name())
		case <-time.After(100 * time.Millisecond):
		}
	}
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
	pick := func(store, op string) []daprPhase {
		var out []daprPhase
		for _, ph := range phases {
			if ph.store == store && ph.op == op {
				out = append(out, ph)
			}
		}
		return out
	}
	span := func(ps []daprPhase, f func(daprPhase) float64, format string) string {
		if len(ps) == 0 {
			return "n/a"
		}
		lo, hi := f(ps[0]), f(ps[0])
		for _, ph := range ps[1:] {
			lo, hi = min(lo, f(ph)), max(hi, f(ph))
		}
		return fmt.Sprintf(format+"–"+format, lo, hi)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	p("\n## Dapr: warmcache through a real daprd\n\n")
	p("daprd 1.17.0 in standalone mode (the daprd kit), with deploy/dapr's components: `statestore` "+
		"(warmcache's pluggable component), `redisstate` (state.redis) and `pgstate` (state.postgresql v2) on the same "+
		"Redis and PostgreSQL server. %d clients over daprd's HTTP API, %d keys of %d bytes, %d GETs then %d saves "+
		"per store and round, %d rounds alternating the stores. warmcache reaches PostgreSQL %s; state.postgresql directly. "+
		"Every warmcache GET is a Redis hit. The machine is shared and noisy; compare the ratios of one run. %s.\n\n",
		daprClients, daprKeys, len(daprValue(0)), daprGets, daprSaves, daprRounds,
		map[bool]string{true: "through PgBouncer, as deployed", false: "directly"}[viaPgBouncer], pinning)
	p("| store | GETs/s | GET p50 / p99 ms | saves/s | save p50 / p99 ms | errors |\n|---|---|---|---|---|---|\n")
	for _, store := range daprStores {
		g, s := pick(store, "get"), pick(store, "save")
		var errs int64
		for _, ph := range append(g, s...) {
			errs += ph.errors
		}
		p("| %s | %s | %s / %s | %s | %s / %s | %d |\n", store,
			span(g, daprPhase.perSecond, "%.0f"), span(g, func(x daprPhase) float64 { return ms(x.p50) }, "%.1f"),
			span(g, func(x daprPhase) float64 { return ms(x.p99) }, "%.1f"),
			span(s, daprPhase.perSecond, "%.0f"), span(s, func(x daprPhase) float64 { return ms(x.p50) }, "%.1f"),
			span(s, func(x daprPhase) float64 { return ms(x.p99) }, "%.1f"), errs)
	}
	// Ratios, round by round (each round runs the stores back to back).
	ratio := func(store, other, op string, f func(daprPhase) float64) string {
		a, o := pick(store, op), pick(other, op)
		var rs []float64
		for i := range min(len(a), len(o)) {
			rs = append(rs, f(a[i])/f(o[i]))
		}
		if len(rs) == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f–%.2f×", slices.Min(rs), slices.Max(rs))
	}
	p99 := func(x daprPhase) float64 { return float64(x.p99) }
	wcGet := func(x daprPhase) float64 { return float64(x.cpuPerOp("warmcache")) }
	p("\n| target | this run (per round) |\n|---|---|\n")
	p("| GETs/s ≥ 1.0× state.redis's | %s |\n", ratio("statestore", "redisstate", "get", daprPhase.perSecond))
	p("| GETs/s ≥ 1.2× state.postgresql's | %s |\n", ratio("statestore", "pgstate", "get", daprPhase.perSecond))
	p("| saves/s ≥ 0.9× state.postgresql's | %s |\n", ratio("statestore", "pgstate", "save", daprPhase.perSecond))
	p("| GET p99 ≤ state.redis's p99 | %s |\n", ratio("statestore", "redisstate", "get", p99))
	p("| warmcache CPU per Dapr GET ≤ 1.5× its CPU per REST hit | %s |\n", ratio("statestore", "REST", "get", wcGet))
	p("\nCPU per operation, µs (the range over the rounds), from /proc:\n\n")
	p("| store | op | warmcache | daprd | redis | postgres | pgbouncer |\n|---|---|---|---|---|---|---|\n")
	for _, store := range append(slices.Clone(daprStores), "REST") {
		for _, op := range []string{"get", "save"} {
			ps := pick(store, op)
			if len(ps) == 0 {
				continue
			}
			cell := func(g string) string {
				return span(ps, func(x daprPhase) float64 { return us(x.cpuPerOp(g)) }, "%.0f")
			}
			p("| %s | %s | %s | %s | %s | %s | %s |\n", store, op, cell("warmcache"), cell("daprd"), cell(bench.ProcRedis),
				cell(bench.ProcPostgres), cell(bench.ProcPgBouncer))
		}
	}
	return b.String()
}
