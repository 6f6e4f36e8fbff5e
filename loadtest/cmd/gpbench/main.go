// Command gpbench measures warmcache on a real Greenplum cluster and prints
// the results as Markdown. Every number is a ratio against a baseline
// measured in the same run on the same cluster: service misses against
// pgbench -M simple of the same lookup, Redis hits against a constant-body
// HTTP floor, PUT, If-Match PUT and DELETE against pgbench -M simple of a
// plain upsert of the same row (pinned, with each process's CPU per
// write), bulk loads per storage variant, and the advise table of the
// widgets data. -lanes runs some of them.
//
//	go build -o bin/warmcache ./cmd/warmcache
//	make load-tools
//	bin/gpbench -dsn "$(../shared/greenplum/up.sh | tail -n1)"
//
// It creates (and at the end drops) its own database on the cluster.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/loadtest/bench"
	"github.com/warmcache/warmcache/loadtest/peer"
	"github.com/warmcache/warmcache/loadtest/pin"
	"github.com/warmcache/warmcache/loadtest/wrk"
)

type options struct {
	bin, dsn, redis, pgbench, database string
	rows, loadRows, adviseSample       int
	workers, writeWorkers              int
	duration                           time.Duration
	lanes                              []string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "peer" {
		// The peer in a process of its own, for the pinned hits.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := peer.Serve(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpbench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpbench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "gpbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	admin, err := pgx.Connect(ctx, o.dsn)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	r := &gpRun{o: o, dir: dir, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * o.workers}}}
	if err := admin.QueryRow(ctx, "SELECT version()").Scan(&r.version); err != nil {
		return err
	}
	r.dropDatabase(ctx, admin)
	defer r.dropDatabase(ctx, admin)
	if err := r.createDatabase(ctx, admin); err != nil {
		return err
	}
	if err := r.seed(ctx); err != nil {
		return err
	}
	srv, err := startService(r.env, o.bin, r.nsFile)
	if err != nil {
		return err
	}
	defer srv.stop()
	r.kv = srv.base + "/v1/kv/widgets/"
	r.svcPID = srv.Pid()
	r.peerPrefix = "gpbench-peer-" + randomHex() + ":"
	peerURL, closePeer, err := startPeer(ctx, peer.Config{Redis: o.redis, Postgres: r.dsn, Prefix: r.peerPrefix, Conns: o.workers})
	if err != nil {
		return err
	}
	defer closePeer()
	r.peer = peerURL + "/v1/kv/widgets/"
	if err := r.measure(ctx); err != nil {
		return err
	}
	_, err = io.WriteString(stdout, r.b.String())
	return err
}

// parseOptions parses gpbench's flags.
func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("gpbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "bin/warmcache", "warmcache binary")
	fs.StringVar(&o.dsn, "dsn", os.Getenv("WARMCACHE_TEST_GREENPLUM_DSN"), "DSN of the Greenplum coordinator (any database); default $WARMCACHE_TEST_GREENPLUM_DSN")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis host:port")
	fs.StringVar(&o.pgbench, "pgbench", "/usr/lib/postgresql/15/bin/pgbench", "pgbench binary")
	fs.StringVar(&o.database, "database", "warmcache_gpbench", "database to create on the cluster (dropped at the end)")
	fs.IntVar(&o.rows, "rows", 100_000, "widget rows")
	fs.IntVar(&o.loadRows, "load-rows", 100_000, "rows per bulk load")
	fs.IntVar(&o.adviseSample, "advise-sample", 20_000, "rows warmcache advise samples; 0 leaves advise out")
	fs.IntVar(&o.workers, "workers", 32, "concurrent clients of the service, of the peer and of pgbench")
	fs.IntVar(&o.writeWorkers, "write-workers", 8, "concurrent clients of the write lane (the service's and pgbench's)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each measurement")
	lanes := fs.String("lanes", "misses,hits,writes,loads", "the lanes to run, comma-separated")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	o.lanes = strings.Split(*lanes, ",")
	if o.dsn == "" {
		return options{}, errors.New("no -dsn and no WARMCACHE_TEST_GREENPLUM_DSN")
	}
	return o, nil
}

// gpRun is one run on the cluster: its database, the service's
// environment and address, and the report being written.
type gpRun struct {
	o       options
	dir     string       // temporary files: scripts, namespaces, NDJSON
	version string       // the cluster's version()
	dsn     string       // the run's own database
	nsFile  string       // the namespaces file of the service and the CLI
	env     []string     // the environment of bin/warmcache
	client  *http.Client // the client of every HTTP measurement
	kv      string       // the service's URL of the widgets namespace
	peer    string       // the peer's URL of the widgets namespace
	svcPID  int          // the service's process
	// peerPrefix is the peer's Redis prefix, shared by the pinned peer so
	// that it finds the entries the hits filled.
	peerPrefix string
	b          strings.Builder // the report
	targets    []targetRow     // the targets, held in the report's first table
}

// targetRow is one target of the Greenplum lane and its verdict.
type targetRow struct {
	path, target string
	ratio, min   float64
}

// writeTargets writes the targets' table.
func (r *gpRun) writeTargets() {
	fmt.Fprintf(&r.b, "| path | target | measured | verdict |\n|---|---|---:|---|\n")
	for _, t := range r.targets {
		verdict := "pass"
		if !(t.ratio >= t.min) {
			verdict = "miss"
		}
		fmt.Fprintf(&r.b, "| %s | %s | %.2f × | %s |\n", t.path, t.target, t.ratio, verdict)
	}
	fmt.Fprintf(&r.b, "\n")
}

func target(path, what string, ratio, min float64) targetRow {
	return targetRow{path: path, target: what, ratio: ratio, min: min}
}

// dropDatabase drops the run's database, ending its sessions first.
func (r *gpRun) dropDatabase(ctx context.Context, admin *pgx.Conn) {
	_, _ = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", r.o.database)
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{r.o.database}.Sanitize())
}

// createDatabase creates the run's database and sets the DSN that reaches
// it.
func (r *gpRun) createDatabase(ctx context.Context, admin *pgx.Conn) error {
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{r.o.database}.Sanitize()); err != nil {
		return err
	}
	u, err := url.Parse(r.o.dsn)
	if err != nil {
		return err
	}
	u.Path = "/" + r.o.database
	r.dsn = u.String()
	return nil
}

// seed writes the namespaces file, migrates the database with
// bin/warmcache and fills the widgets table.
func (r *gpRun) seed(ctx context.Context) error {
	o := r.o
	r.nsFile = filepath.Join(r.dir, "namespaces.yaml")
	if err := os.WriteFile(r.nsFile, bench.Namespaces("", loadNamespaces), 0o644); err != nil {
		return err
	}
	r.env = append(os.Environ(), "WARMCACHE_POSTGRES_DSN="+r.dsn, "WARMCACHE_REDIS_ADDRS="+o.redis,
		"WARMCACHE_REDIS_PREFIX=gpbench-"+randomHex()+":", "WARMCACHE_NEAR_CACHE_BYTES=0",
		fmt.Sprintf("WARMCACHE_PG_MAX_CONNS=%d", o.workers))
	if err := localstack.Migrate(ctx, o.bin, r.env, "--namespaces", r.nsFile); err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, r.dsn)
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `INSERT INTO widgets SELECT g, jsonb_build_object('widget', jsonb_build_object('id', g::text, 'debug', 'on',
	'color', (ARRAY['red','green','blue','teal'])[g % 4 + 1], 'size', g % 17, 'note', repeat('x', 40 + g % 200))), g
FROM generate_series(1, $1::int) g`, o.rows); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if _, err := db.Exec(ctx, "ANALYZE widgets"); err != nil {
		return err
	}
	_, err = db.Exec(ctx, fmt.Sprintf("SELECT setval('warmcache_version_seq', %d)", o.rows))
	return err
}

// measure writes the report: misses, hits, writes, bulk loads, the
// advisor and an end-to-end load, each against its baseline.
func (r *gpRun) measure(ctx context.Context) error {
	o := r.o
	intro := fmt.Sprintf("One run of `bin/gpbench` on %s UTC: %s; %d widget rows, %d clients, %s per measurement. Load average %s at the start. "+
		"The service, the peer, the load generator and the cluster share the machine's CPUs (the cluster is a coordinator and three segments of processes of their own): the misses are not pinned; the hits and the writes say how they are.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04"), strings.SplitN(r.version, " compiled", 2)[0], o.rows, o.workers, o.duration, loadAvg())
	defer func() {
		body := r.b.String()
		r.b.Reset()
		r.b.WriteString(intro)
		r.writeTargets()
		r.b.WriteString(body)
	}()
	for _, lane := range []struct {
		name string
		run  func() error
	}{
		{"misses", r.misses},
		{"hits", r.hits},
		{"writes", func() error { return r.writes(ctx) }},
		{"loads", func() error { return r.bulkLoads(ctx) }},
	} {
		if !slices.Contains(o.lanes, lane.name) {
			continue
		}
		if err := lane.run(); err != nil {
			return fmt.Errorf("%s: %w", lane.name, err)
		}
	}
	fmt.Fprintf(&r.b, "Load average %s at the end.\n", loadAvg())
	return nil
}

// misses measures the service's misses against pgbench -M simple of the
// same lookup.
func (r *gpRun) misses() error {
	o := r.o
	keys := mathrand.Perm(o.rows)
	var next atomic.Int64
	cold := func(base string) func() *http.Request {
		return func() *http.Request {
			i := next.Add(1) - 1
			if int(i) >= len(keys) {
				return nil
			}
			req, _ := http.NewRequest("GET", base+strconv.Itoa(keys[i]+1), nil)
			return req
		}
	}
	miss := attack(r.client, o.workers, o.duration, cold(r.kv))
	// The peer's cold keys continue the same order: no key is read twice.
	peerMiss := attack(r.client, o.workers, o.duration, cold(r.peer))
	lookup := "\\set k random(1, " + strconv.Itoa(o.rows) + ")\nSELECT value::text, version FROM widgets WHERE key = :k;\n"
	simple, err := pgbench(o, r.dsn, r.dir, "simple", o.workers, lookup)
	if err != nil {
		return err
	}
	prepared, err := pgbench(o, r.dsn, r.dir, "prepared", o.workers, lookup)
	if err != nil {
		return err
	}
	fmt.Fprintf(&r.b, "| path | req/s | p50 | p99 | ratio | baseline |\n|---|---:|---:|---:|---:|---|\n")
	fmt.Fprintf(&r.b, "| service miss (`GET`, cold key, %s) | %s | %s | %s | %.2f | `pgbench -M simple` lookups/s |\n",
		tags(miss), num(miss.Rate()), ms(miss.Quantile(0.5)), ms(miss.Quantile(0.99)), miss.Rate()/simple.tps)
	fmt.Fprintf(&r.b, "| `pgbench -M simple`, the same lookup | %s | | | 1.00 | |\n", num(simple.tps))
	fmt.Fprintf(&r.b, "| `pgbench -M prepared`, the same lookup | %s | | | %.2f | `pgbench -M simple` |\n", num(prepared.tps), prepared.tps/simple.tps)
	fmt.Fprintf(&r.b, "| peer miss (the hand-written cache-aside, cold key, %s) | %s | %s | %s | %.2f | `pgbench -M simple` lookups/s |\n",
		tags(peerMiss), num(peerMiss.Rate()), ms(peerMiss.Quantile(0.5)), ms(peerMiss.Quantile(0.99)), peerMiss.Rate()/simple.tps)
	r.targets = append(r.targets,
		target("misses", "≥ 1.0 × `pgbench -M simple` of the same lookup", miss.Rate()/simple.tps, 1.0),
		target("misses", "≥ 1.5 × the peer's misses", miss.Rate()/peerMiss.Rate(), 1.5))
	return nil
}

// hitAttack reads keys 1 to 1,000 under base once, so that they are
// cached, then attacks them at random.
func (r *gpRun) hitAttack(base string) bench.Closed {
	for i := 1; i <= 1000; i++ {
		if res, err := r.client.Get(base + strconv.Itoa(i)); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	return attack(r.client, r.o.workers, r.o.duration, func() *http.Request {
		req, _ := http.NewRequest("GET", base+strconv.Itoa(1+mathrand.IntN(1000)), nil)
		return req
	})
}

// hits measures the service's Redis hits against a constant-body floor.
func (r *gpRun) hits() error {
	o := r.o
	hit, peerHit := r.hitAttack(r.kv), r.hitAttack(r.peer)
	floorURL, closeFloor, err := startFloor(460)
	if err != nil {
		return err
	}
	floor := attack(r.client, o.workers, o.duration, func() *http.Request {
		req, _ := http.NewRequest("GET", floorURL, nil)
		return req
	})
	closeFloor()
	fmt.Fprintf(&r.b, "| service hit (`GET`, 1,000 hot keys, %s) | %s | %s | %s | %.2f | floor req/s |\n",
		tags(hit), num(hit.Rate()), ms(hit.Quantile(0.5)), ms(hit.Quantile(0.99)), hit.Rate()/floor.Rate())
	fmt.Fprintf(&r.b, "| floor (constant 460-byte body, same client) | %s | %s | %s | 1.00 | |\n", num(floor.Rate()), ms(floor.Quantile(0.5)), ms(floor.Quantile(0.99)))
	fmt.Fprintf(&r.b, "| peer hit (the hand-written cache-aside, the same 1,000 keys, %s) | %s | %s | %s | %.2f | floor req/s |\n\n",
		tags(peerHit), num(peerHit.Rate()), ms(peerHit.Quantile(0.5)), ms(peerHit.Quantile(0.99)), peerHit.Rate()/floor.Rate())
	pinned, why, err := r.pinnedHits()
	switch {
	case err != nil:
		return err
	case pinned == nil:
		fmt.Fprintf(&r.b, "The hits were not measured pinned: %s; the target holds the unpinned ones.\n\n", why)
		r.targets = append(r.targets, target("hits (unpinned)", "≥ 1.3 × the peer's hits", hit.Rate()/peerHit.Rate(), 1.3))
	default:
		fmt.Fprintf(&r.b, "Pinned (%s), wrk with %d connections, %s each:\n\n", pinned.placement, o.workers, o.duration)
		fmt.Fprintf(&r.b, "| path | req/s | p50 | p99 | X-Cache |\n|---|---:|---:|---:|---|\n")
		for _, row := range []struct {
			name string
			run  bench.Run
		}{{"service hit", pinned.service}, {"peer hit", pinned.peer}} {
			fmt.Fprintf(&r.b, "| %s | %s | %s | %s | %v |\n", row.name, num(row.run.Throughput), ms(row.run.Latency.P50), ms(row.run.Latency.P99), row.run.Sources)
		}
		fmt.Fprintf(&r.b, "\n")
		r.targets = append(r.targets, target("hits", "≥ 1.3 × the peer's hits, pinned", pinned.service.Throughput/pinned.peer.Throughput, 1.3))
	}
	return nil
}

// pinnedHitRuns are the hits measured with the servers and wrk on separate
// CPUs.
type pinnedHitRuns struct {
	service, peer bench.Run
	placement     string
}

// pinnedHits measures the service's hits and the peer's as make bench does:
// the service, the peer (a process of its own) and Redis on CPU 0, wrk on
// the others. Hits never reach the cluster. It returns nil and why when the
// machine cannot pin (one CPU, no taskset or no wrk).
func (r *gpRun) pinnedHits() (*pinnedHitRuns, string, error) {
	o := r.o
	place := pin.New(true)
	if !place.On() {
		return nil, place.String(), nil
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, "wrk is not installed", nil
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: o.redis})
	info, err := rdb.InfoMap(ctx, "server").Result()
	_ = rdb.Close()
	if err != nil {
		return nil, "", fmt.Errorf("redis INFO: %w", err)
	}
	redisPID, err := strconv.Atoi(info["Server"]["process_id"])
	if err != nil {
		return nil, "", fmt.Errorf("redis process_id: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	name, args := place.Server(self, []string{"peer", "-redis", o.redis, "-postgres", r.dsn,
		"-prefix", r.peerPrefix, "-conns", strconv.Itoa(o.workers)})
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "peer: serving on ")
	if err != nil || !ok {
		return nil, "", fmt.Errorf("the pinned peer did not start: %q, %v", line, err)
	}
	if err := place.PinServers(r.svcPID, redisPID); err != nil {
		return nil, "", err
	}
	defer func() { _ = place.Release(r.svcPID, redisPID) }()
	paths := make([]string, 20_000)
	for i := range paths {
		paths[i] = "/v1/kv/widgets/" + strconv.Itoa(1+mathrand.IntN(1000))
	}
	res := &pinnedHitRuns{placement: "the service, the peer and Redis, and wrk: " + place.String()}
	for _, t := range []struct {
		base string
		run  *bench.Run
	}{{strings.TrimSuffix(r.kv, "/v1/kv/widgets/"), &res.service}, {base, &res.peer}} {
		// Both found their 1,000 keys in Redis, filled by the unpinned
		// hits; a second of warm-up opens wrk's connections.
		spec := wrk.Spec{Scenario: "gp-hits", Base: t.base, Paths: paths, Conns: o.workers, Duration: time.Second, Dir: r.dir, Prefix: place.LoaderPrefix()}
		if _, err := wrk.Run(ctx, spec); err != nil {
			return nil, "", err
		}
		spec.Duration = o.duration
		if *t.run, err = wrk.Run(ctx, spec); err != nil {
			return nil, "", err
		}
	}
	return res, "", nil
}

// bulkLoads measures bulk loads per storage variant: the warehouse's part
// (pgstore's Load: COPY, merge, ANALYZE) into an empty table, then the
// same rows again with every value changed; then the advisor on the
// widgets data, and warmcache load end to end once.
func (r *gpRun) bulkLoads(ctx context.Context) error {
	namespaces, _, err := config.LoadNamespacesFile(r.nsFile)
	if err != nil {
		return err
	}
	store, err := pgstore.Open(ctx, pgstore.Options{DSN: r.dsn, MaxConns: 2}, namespaces, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer store.Close()
	if err := r.loadVariants(ctx, store, namespaces); err != nil {
		return err
	}
	// The advisor on the widgets data, before the load below rewrites it.
	if err := r.advise(); err != nil {
		return err
	}
	return r.loadEndToEnd()
}

// loadVariants times pgstore's Load into each storage variant, twice.
func (r *gpRun) loadVariants(ctx context.Context, store *pgstore.Store, namespaces []*warmcache.Namespace) error {
	n := r.o.loadRows
	fmt.Fprintf(&r.b, "| bulk load of %s rows | into an empty table | rows/s | again, every value changed | rows/s |\n|---|---:|---:|---:|---:|\n", num(float64(n)))
	for _, v := range loadVariants {
		var ns *warmcache.Namespace
		for _, candidate := range namespaces {
			if candidate.Name == v.name {
				ns = candidate
			}
		}
		first, err := timeLoad(ctx, store, ns, n, v.columns, "a")
		if err != nil {
			return fmt.Errorf("load %s: %w", v.name, err)
		}
		second, err := timeLoad(ctx, store, ns, n, v.columns, "b")
		if err != nil {
			return fmt.Errorf("reload %s: %w", v.name, err)
		}
		fmt.Fprintf(&r.b, "| %s | %.2f s | %s | %.2f s | %s |\n", v.label, first.Seconds(), num(float64(n)/first.Seconds()),
			second.Seconds(), num(float64(n)/second.Seconds()))
	}
	fmt.Fprintln(&r.b)
	return nil
}

// advise runs warmcache advise on the widgets data, unless the sample is
// zero, and quotes its output.
func (r *gpRun) advise() error {
	if r.o.adviseSample <= 0 {
		return nil
	}
	sample := strconv.Itoa(r.o.adviseSample)
	out, err := command(r.env, r.o.bin, "advise", "--namespaces", r.nsFile, "--sample", sample, "--lookups", "1000", "widgets")
	if err != nil {
		return fmt.Errorf("advise: %v\n%s", err, out)
	}
	fmt.Fprintf(&r.b, "```\n$ warmcache advise --sample %s --lookups 1000 widgets\n%s```\n\n", sample, out)
	return nil
}

// loadEndToEnd times warmcache load of changed widgets, from process
// start to the refresh of each changed key in Redis.
func (r *gpRun) loadEndToEnd() error {
	n := r.o.loadRows
	file := filepath.Join(r.dir, "widgets.ndjson")
	if err := writeNDJSON(file, n, false, "c"); err != nil {
		return err
	}
	start := time.Now()
	if out, err := command(r.env, r.o.bin, "load", "--namespaces", r.nsFile, "--progress", "off", "widgets", file); err != nil {
		return fmt.Errorf("warmcache load: %v\n%s", err, out)
	}
	d := time.Since(start)
	fmt.Fprintf(&r.b, "\n`warmcache load widgets` of %s changed rows, end to end (process start, the load, and the refresh of each changed key in Redis): %.2f s, %s rows/s.\n\n",
		num(float64(n)), d.Seconds(), num(float64(n)/d.Seconds()))
	return nil
}

// loadVariants are the namespaces the bulk loads go to.
var loadVariants = []struct {
	name, label string
	columns     bool
}{
	{"load_heap_packed", "heap, packed jsonb", false},
	{"load_ao_row_packed", "AO row zstd:3, packed jsonb", false},
	{"load_ao_column_packed", "AO column zstd:3, packed jsonb", false},
	{"load_heap_columns", "heap, columns", true},
	{"load_ao_column_columns", "AO column zstd:3, columns", true},
}

const loadNamespaces = `  - {name: load_heap_packed, table: load_heap_packed, key: {column: key, type: bigint}, value: {layout: packed, column: value}, version_column: version, writable: true, managed: true}
  - {name: load_ao_row_packed, table: load_ao_row_packed, key: {column: key, type: bigint}, value: {layout: packed, column: value}, version_column: version, writable: true, managed: true,
     storage: {appendoptimized: true, orientation: row, compression: zstd}}
  - {name: load_ao_column_packed, table: load_ao_column_packed, key: {column: key, type: bigint}, value: {layout: packed, column: value}, version_column: version, writable: true, managed: true,
     storage: {appendoptimized: true, orientation: column, compression: zstd}}
  - name: load_heap_columns
    table: load_heap_columns
    key: {column: id, type: bigint}
    value: {layout: columns, columns: [{name: name, type: text}, {name: qty, type: integer}, {name: price, type: numeric}]}
    version_column: version
    writable: true
    managed: true
  - name: load_ao_column_columns
    table: load_ao_column_columns
    key: {column: id, type: bigint}
    value: {layout: columns, columns: [{name: name, type: text}, {name: qty, type: integer}, {name: price, type: numeric}]}
    version_column: version
    writable: true
    managed: true
    storage: {appendoptimized: true, orientation: column, compression: zstd}
`

// value is the document of row i of a load, tagged by tag.
func value(i int, columns bool, tag string) string {
	if columns {
		return fmt.Sprintf(`{"name":"item %d %s","qty":%d,"price":%d.25}`, i, tag, i%100, i%1000)
	}
	return fmt.Sprintf(`{"name":"item %d %s","qty":%d,"price":%d.25,"tags":["a","b"]}`, i, tag, i%100, i%1000)
}

// timeLoad loads n rows into ns through the store and returns how long
// it took.
func timeLoad(ctx context.Context, store *pgstore.Store, ns *warmcache.Namespace, n int, columns bool, tag string) (time.Duration, error) {
	rows := &loadRows{n: n, columns: columns, tag: tag}
	start := time.Now()
	counts, err := store.Load(ctx, ns, rows)
	if err != nil {
		return 0, err
	}
	if got := len(counts.Changed); got != n {
		return 0, fmt.Errorf("%d rows changed, want %d", got, n)
	}
	return time.Since(start), nil
}

// loadRows is warmcache.LoadRows of n generated rows.
type loadRows struct {
	n, i    int
	columns bool
	tag     string
}

func (r *loadRows) Next() bool { r.i++; return r.i <= r.n }
func (r *loadRows) Row() warmcache.LoadRow {
	return warmcache.LoadRow{Line: int64(r.i), Key: warmcache.Key{Text: strconv.Itoa(r.i), Int: int64(r.i)}, Value: []byte(value(r.i, r.columns, r.tag))}
}
func (r *loadRows) Err() error { return nil }

func writeNDJSON(path string, n int, columns bool, tag string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(w, `{"key":%d,"value":%s}`+"\n", i, value(i, columns, tag))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tags returns the X-Cache values r saw, as shares of its answers, and
// its errors.
func tags(r bench.Closed) string {
	var parts []string
	for k, v := range r.Tags {
		if k == "" {
			k = "none"
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*float64(v)/float64(max(len(r.Latencies), 1))))
	}
	slices.Sort(parts)
	if r.Errors > 0 {
		parts = append(parts, fmt.Sprintf("%d errors", r.Errors))
	}
	return strings.Join(parts, ", ")
}

// attack runs workers clients, each sending next's request when the last
// one is answered, for d or until next returns nil.
func attack(client *http.Client, workers int, d time.Duration, next func() *http.Request) bench.Closed {
	return bench.ClosedLoop(context.Background(), client, workers, d, next)
}

// pgbenchResult is what pgbench reported.
type pgbenchResult struct {
	tps     float64
	latency time.Duration
}

var (
	tpsRe = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	latRe = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
)

func pgbench(o options, dsn, dir, mode string, clients int, script string) (pgbenchResult, error) {
	return pgbenchOn(nil, o, dsn, dir, mode, clients, script)
}

// pgbenchOn runs pgbench behind prefix (taskset and its CPUs, or nothing).
func pgbenchOn(prefix []string, o options, dsn, dir, mode string, clients int, script string) (pgbenchResult, error) {
	file := filepath.Join(dir, fmt.Sprintf("script-%d.sql", time.Now().UnixNano()))
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return pgbenchResult{}, err
	}
	args := slices.Clone(prefix)
	args = append(args, o.pgbench, "-n", "-M", mode, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(max(1, int(o.duration.Seconds()))), "-f", file, dsn)
	out, err := command(nil, args[0], args[1:]...)
	if err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	m, l := tpsRe.FindStringSubmatch(out), latRe.FindStringSubmatch(out)
	if m == nil || l == nil {
		return pgbenchResult{}, fmt.Errorf("pgbench output not understood:\n%s", out)
	}
	tps, _ := strconv.ParseFloat(m[1], 64)
	lat, _ := strconv.ParseFloat(l[1], 64)
	return pgbenchResult{tps: tps, latency: time.Duration(lat * float64(time.Millisecond))}, nil
}

func command(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// service is a warmcache serve of the run.
type service struct {
	*localstack.Served
	base string // its REST endpoint, http://host:port
}

// startService starts warmcache serve on free loopback ports with env and
// the namespaces file nsFile, and waits for its /readyz
// (localstack.Serve).
func startService(env []string, bin, nsFile string) (*service, error) {
	s, err := localstack.Serve(context.Background(), bin, localstack.ServeOptions{
		Args: []string{"--namespaces", nsFile, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-level", "warn"},
		Env:  env, Stderr: os.Stderr})
	if err != nil {
		return nil, err
	}
	return &service{Served: s, base: s.HTTP()}, nil
}

func (s *service) stop() { _ = s.Stop(os.Interrupt, time.Minute) }

func startFloor(size int) (string, func(), error) {
	body := []byte(`{"floor":"` + strings.Repeat("x", size-12) + `"}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/", func() { _ = srv.Close() }, nil
}

// loadAvg returns the 1-minute load average, or "unknown".
func loadAvg() string {
	if f := bench.LoadAverages(); f != nil {
		return f[0]
	}
	return "unknown"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

func num(f float64) string {
	s := strconv.FormatInt(int64(math.Round(f)), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startPeer serves the hand-written cache-aside (loadtest/peer) on a
// loopback port of this process.
func startPeer(ctx context.Context, c peer.Config) (string, func(), error) {
	h, closePeer, err := peer.Open(ctx, c)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closePeer()
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close(); closePeer() }, nil
}
