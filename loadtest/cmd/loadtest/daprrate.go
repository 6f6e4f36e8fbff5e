package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// daprNearStore is the component of the dapr scenario that reads through
// warmcache's near cache: warmcache's component on a namespace of its own
// (a table of its own) whose near_ttl is -dapr-near-ttl.
const daprNearStore = "nearstore"

// daprRateRounds is how many times the fixed-rate attacks go round the
// stores.
const daprRateRounds = 2

// daprNamespaces writes deploy/dapr's namespaces to dir with a second
// namespace, daprNearStore's, on a table of its own, whose near_ttl is
// nearTTL, and returns the file's path.
func daprNamespaces(dir string, nearTTL time.Duration) (string, error) {
	raw, err := os.ReadFile("deploy/dapr/namespaces.yaml")
	if err != nil {
		return "", err
	}
	near := fmt.Sprintf(`  - name: %s
    table: dapr_state_near
    key: {column: key, type: text}
    value: {layout: bytes, column: value}
    version_column: version
    ttl: 5m
    negative_ttl: 30s
    ttl_jitter: 0.1
    near_ttl: %s
    writable: true
    managed: true
`, daprNearStore, nearTTL)
	path := filepath.Join(dir, "namespaces.yaml")
	return path, os.WriteFile(path, append(raw, near...), 0o644)
}

// daprRated is one fixed-rate attack of GETs of one store.
type daprRated struct {
	setting, store string
	rate           int
	lat            bench.Latency
	success        float64
}

// daprAtRates sends GETs of the stored keys to each store over daprd's
// HTTP API at each rate of -dapr-rates, open loop (vegeta's pacer, latency
// from each request's schedule), for -duration after a second's warm-up
// at the same rate, daprRateRounds times round the stores.
func (h *harness) daprAtRates(ctx context.Context, client *http.Client, st *daprStack, keys []string, setting string) ([]daprRated, error) {
	var out []daprRated
	stores := append(slices.Clone(daprStores), daprNearStore)
	metrics := st.wcBase + "/metrics"
	if before, err := scrapeFold(ctx, metrics); err == nil {
		defer func() {
			if after, err := scrapeFold(ctx, metrics); err == nil {
				h.logf("dapr %s: warmcache opened %.0f Redis read lanes beyond --hot-lanes during the fixed-rate attacks", setting, after.Since(before).LaneSpills)
			}
		}()
	}
	for _, rate := range h.opts.DaprRates {
		for round := 1; round <= daprRateRounds; round++ {
			for _, store := range stores {
				targets := make([]vegeta.Target, len(keys))
				for i, k := range keys {
					targets[i] = vegeta.Target{Method: http.MethodGet, URL: st.base + "/v1.0/state/" + store + "/" + k}
				}
				spec := attackSpec{scenario: "dapr-" + store, client: client, targeter: ring(targets), rate: float64(rate),
					workers: daprClients, duration: time.Second}
				attack(ctx, spec) // warm-up
				spec.duration = h.opts.Duration
				r := attack(ctx, spec)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				out = append(out, daprRated{setting: setting, store: store, rate: rate, lat: r.Latency, success: r.Success})
				h.logf("dapr %s at %d/s round %d %-10s p50 %v  p90 %v  p99 %v  success %.1f%%", setting, rate, round, store,
					r.Latency.P50, r.Latency.P90, r.Latency.P99, 100*r.Success)
			}
		}
	}
	return out, nil
}

// daprOneHop puts a latency proxy (toxiproxy, in this process) adding
// -dapr-hop each way in front of Redis, PostgreSQL and PgBouncer, starts
// warmcache and daprd again with every store reaching the servers through
// it, measures what the proxy adds to a round trip, and runs the
// fixed-rate attacks. It returns their rows and the measured delay.
func (h *harness) daprOneHop(ctx context.Context, daprdBin, dir, namespaces, database string, loop daprServers,
	client *http.Client, keys []string) ([]daprRated, string, error) {
	o := h.opts
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	hopMS := o.DaprHop.Milliseconds()
	proxy := func(name, upstream string) (string, func(), error) {
		p := toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
		if err := p.Start(); err != nil {
			return "", nil, err
		}
		for _, stream := range []string{"upstream", "downstream"} {
			toxic := fmt.Sprintf(`{"name":"hop_%s","type":"latency","stream":"%s","attributes":{"latency":%d}}`, stream, stream, hopMS)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
				p.Stop()
				return "", nil, err
			}
		}
		return p.Listen, p.Stop, nil
	}
	var hop daprServers
	for _, s := range []struct {
		name     string
		upstream string
		addr     *string
	}{{"redis", loop.redis, &hop.redis}, {"postgres", loop.postgres, &hop.postgres}, {"pgbouncer", loop.pgbouncer, &hop.pgbouncer}} {
		addr, stop, err := proxy(s.name, s.upstream)
		if err != nil {
			return nil, "", fmt.Errorf("dapr: latency proxy for %s: %w", s.name, err)
		}
		defer stop()
		*s.addr = addr
	}
	measured, err := measureHop(ctx, loop, hop)
	if err != nil {
		return nil, "", err
	}
	h.logf("dapr: one hop away: %s", measured)
	st, err := h.startDapr(ctx, daprdBin, dir, namespaces, database, hop)
	if err != nil {
		return nil, "", err
	}
	defer st.stop()
	for _, store := range append(slices.Clone(daprStores), daprNearStore) {
		// One pass of reads on the new connections.
		daprRun(ctx, client, daprKeys, daprGet(ctx, st.base, store, keys))
	}
	rows, err := h.daprAtRates(ctx, client, st, keys, "one hop")
	return rows, measured, err
}

// measureHop measures the median round trip of a Redis PING and of a
// PostgreSQL `SELECT 1`, each 200 times in turn, direct and through the
// proxy, and words what the proxy added.
func measureHop(ctx context.Context, loop, hop daprServers) (string, error) {
	median := func(do func() error) (time.Duration, error) {
		d := make([]time.Duration, 200)
		for i := range d {
			t := time.Now()
			if err := do(); err != nil {
				return 0, err
			}
			d[i] = time.Since(t)
		}
		slices.Sort(d)
		return d[len(d)/2], nil
	}
	var words []string
	for _, what := range []string{"Redis PING", "PostgreSQL SELECT 1"} {
		var rt [2]time.Duration
		for i, addr := range []daprServers{loop, hop} {
			var do func() error
			var done func()
			if what == "Redis PING" {
				rdb := redis.NewClient(&redis.Options{Addr: addr.redis})
				do, done = func() error { return rdb.Ping(ctx).Err() }, func() { rdb.Close() }
			} else {
				conn, err := pgx.Connect(ctx, dsn(addr.postgres, "postgres"))
				if err != nil {
					return "", err
				}
				do, done = func() error { _, err := conn.Exec(ctx, "SELECT 1"); return err }, func() { conn.Close(context.WithoutCancel(ctx)) }
			}
			if err := do(); err != nil { // the connection's setup stays out
				done()
				return "", err
			}
			d, err := median(do)
			done()
			if err != nil {
				return "", err
			}
			rt[i] = d
		}
		words = append(words, fmt.Sprintf("%s %.2f ms through the proxy against %.2f ms direct (+%.2f ms a round trip)",
			what, ms(rt[1]), ms(rt[0]), ms(rt[1]-rt[0])))
	}
	return strings.Join(words, "; "), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// daprRateMarkdown renders the fixed-rate attacks: per setting, rate and
// store, the range over the rounds of p50, p90 and p99; nearTTL is the
// near-cached component's near_ttl.
func daprRateMarkdown(rows []daprRated, hop, nearTTL time.Duration, measured string) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n### Dapr GETs at a fixed rate\n\n")
	p("GETs of the same %d keys over daprd's HTTP API, sent open loop at each rate for the attack's duration after a "+
		"second's warm-up, %d rounds alternating the stores; latency from each request's schedule. `%s` is warmcache's "+
		"component on a namespace with near_ttl %v (its near cache on); `statestore` has none. ", daprKeys, daprRateRounds, daprNearStore, nearTTL)
	if hop > 0 {
		p("One hop away: a latency proxy (toxiproxy, in the harness) adds %v each way between Redis, PostgreSQL and "+
			"PgBouncer and every client of theirs, warmcache's and daprd's built-in stores' alike; measured: %s.", hop, measured)
	}
	p("\n\n| setting | rate | store | p50 ms | p90 ms | p99 ms | success |\n|---|---:|---|---|---|---|---:|\n")
	type key struct {
		setting, store string
		rate           int
	}
	var order []key
	group := map[key][]daprRated{}
	for _, r := range rows {
		k := key{r.setting, r.store, r.rate}
		if _, ok := group[k]; !ok {
			order = append(order, k)
		}
		group[k] = append(group[k], r)
	}
	for _, k := range order {
		rs := group[k]
		span := func(f func(bench.Latency) time.Duration) string {
			lo, hi := f(rs[0].lat), f(rs[0].lat)
			for _, r := range rs[1:] {
				lo, hi = min(lo, f(r.lat)), max(hi, f(r.lat))
			}
			return fmt.Sprintf("%.2f–%.2f", ms(lo), ms(hi))
		}
		worst := rs[0].success
		for _, r := range rs[1:] {
			worst = min(worst, r.success)
		}
		p("| %s | %d/s | %s | %s | %s | %s | %.1f%% |\n", k.setting, k.rate, k.store,
			span(func(l bench.Latency) time.Duration { return l.P50 }),
			span(func(l bench.Latency) time.Duration { return l.P90 }),
			span(func(l bench.Latency) time.Duration { return l.P99 }), 100*worst)
	}
	return b.String()
}
