// Command scale draws warmcache's cost curves on the local stack (make
// bench-scale, not in CI): misses, hits and writes as the table grows
// (on PostgreSQL and, with -greenplum, on the Greenplum kit) and as the
// values grow; keys per second and CPU per key by the batch size of
// _mget; requests per second and CPU per request of one, two and four
// instances sharing one Redis and one warehouse; the same fleet on the
// stack's Redis and on a Redis Cluster of its own, with the CPU of every
// process (FLEET.md); and the near cache's Go heap per entry. For each
// table it creates a database of its own (dropped at the end unless
// -keep), bulk-loads it with the project's own `warmcache load` (whose
// rate it reports), starts `warmcache serve`
// pinned to the servers' CPU (through PgBouncer on PostgreSQL), and
// measures each path at saturation with the CPU of the service per
// request. It writes loadtest/scale/SCALE.md and one PNG per curve.
//
//	make load-tools
//	bin/scale -bin bin/warmcache -rows 100000,1000000
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/loadtest/bench"
	"github.com/warmcache/warmcache/loadtest/pin"
)

type options struct {
	bin, out, redisPrefix string
	rows                  []int
	sizes                 []int
	sizeRows              int
	workers               int
	duration              time.Duration
	stack                 localstack.Config
	greenplum             string // DSN of the Greenplum coordinator; empty: no Greenplum curve
	gpRows                []int
	batches               []int
	instances             []int
	nearCounts            []int
	nearSizes             []int
	keep                  bool
	place                 pin.Placement
	gpClusters            []gpCluster // the segment curve's clusters; none: no segment curve
	segmentRows           int
	gpBatch               int
	segmentRounds         int
	segmentLanes          []string // serve's --gp-segment-lanes, each measured in turn
	idleWindow            time.Duration
	fleetRows             int // rows of the fleet curve's table
	fleetRounds           int // of the fleet curve's points
	// fleetPerInstance gives each instance of the fleet curve workers of
	// its own (the sidecar setting), where by default the workers are
	// dealt to the instances in turn.
	fleetPerInstance bool
	clusterMasters   int             // of the fleet curve's Redis Cluster
	clusterReplicas  int             // per master
	curves           map[string]bool // the curves to draw
}

// warehouse is where a point's table lives: the local PostgreSQL, served
// through PgBouncer, or the Greenplum kit, served directly.
type warehouse struct {
	name    string // "postgres" or "greenplum"
	admin   string // DSN of its maintenance database
	dsn     func(db string) string
	serve   func(db string) string // the DSN serve uses
	pooler  string
	storage string // the namespace's storage options
	prefix  string // of the databases' names
	dataDir string // on Greenplum, where its processes' data directories lie: their CPU is measured
	lanes   string // on Greenplum, serve's --gp-segment-lanes; empty: its default
}

func postgresWarehouse(o options) warehouse {
	return warehouse{name: "postgres", admin: dsn(o.stack.PostgresAddr(), "postgres"),
		dsn:     func(db string) string { return dsn(o.stack.PostgresAddr(), db) },
		serve:   func(db string) string { return dsn(o.stack.PgBouncerAddr(), db) },
		pooler:  "pgbouncer",
		storage: "    storage:\n      partitions: 8\n",
		prefix:  "warmcache_scale_"}
}

// greenplumWarehouse returns the Greenplum kit of DSN admin; each point's
// database is reached by the same DSN with its own name.
func greenplumWarehouse(admin string) (warehouse, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return warehouse{}, err
	}
	at := func(db string) string {
		v := *u
		v.Path = "/" + db
		return v.String()
	}
	return warehouse{name: "greenplum", admin: admin, dsn: at, serve: at, pooler: "none", prefix: "warmcache_scale_gp_"}, nil
}

// point is one measured configuration.
type point struct {
	warehouse        string
	rows, valueBytes int
	loadRate         float64 // rows per second of warmcache load; 0 when the table was there and its rate unknown
	loadMBps         float64
	loadReused       bool               // the table was loaded by an earlier run, at loadRate
	rate             map[string]float64 // requests per second by path
	cpu              map[string]float64 // the service's CPU µs per request by path
	// On a cluster with a data directory: the segments, the CPU µs per
	// request by path and process group, and the doctor's lines.
	segments int
	cluster  map[string]map[string]float64
	dispatch []string
	// idle is the cluster's CPU per second by role while the service
	// served nothing (its polls and sweeps, the cluster's own work), from
	// a window before the attacks; attackPath takes it off each request's
	// CPU for the net column.
	idle map[string]time.Duration
	// lanes is serve's --gp-segment-lanes at the point, on Greenplum.
	lanes string
	// missFold is the keys per folded warehouse read of the misses.
	missFold float64
	// rounds are the cluster's net µs per request of each round, by path.
	rounds map[string][]float64
}

var paths = []string{"miss", "hit", "put"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	o, err := parseOptions(args, getenv)
	if err != nil {
		return err
	}
	// warmcache serve on the first CPU, this program's clients on the
	// others; the warehouses and Redis are shared servers, left unpinned.
	o.place = pin.New(true)
	if err := o.place.PinSelf(); err != nil {
		return err
	}
	start := time.Now()
	dbs := &databases{}
	if !o.keep {
		defer dbs.drop(context.WithoutCancel(ctx))
	}
	c, err := measureCurves(ctx, o, dbs, stdout)
	if err != nil {
		return err
	}
	if err := drawCharts(o, c); err != nil {
		return err
	}
	if len(o.rows) == 0 {
		fmt.Fprintf(stdout, "the run took %s\n", time.Since(start).Round(time.Second))
		return nil // SCALE.md is the row curve's report
	}
	return report(filepath.Join(o.out, "SCALE.md"), o, c, time.Since(start))
}

// parseOptions parses the flags; the servers default to those of the
// local stack that getenv names.
func parseOptions(args []string, getenv func(string) string) (options, error) {
	stack, err := localstack.FromEnv(getenv)
	if err != nil {
		return options{}, err
	}
	o := options{stack: stack}
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "bin/warmcache", "warmcache binary")
	fs.StringVar(&o.out, "out", "loadtest/scale", "directory of SCALE.md and the PNGs")
	fs.StringVar(&o.redisPrefix, "redis-prefix", "wcscale:", "Redis key prefix of the service (flushed per point)")
	rows := fs.String("rows", "100000,1000000", "table sizes of the row curve (values of about 440 bytes)")
	sizes := fs.String("sizes", "100,4096,65536,1048576", "value sizes of the size curve, in bytes")
	fs.IntVar(&o.sizeRows, "size-rows", 2000, "rows of each table of the size curve")
	fs.IntVar(&o.workers, "workers", 16, "concurrent workers of each attack")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "length of each attack")
	fs.StringVar(&o.greenplum, "greenplum", getenv("WARMCACHE_TEST_GREENPLUM_DSN"), "DSN of a Greenplum coordinator for the Greenplum row curve; empty leaves it out")
	gpRows := fs.String("gp-rows", "100000,1000000,5000000", "table sizes of the Greenplum row curve")
	batches := fs.String("batches", "1,8,64,512", "keys per _mget request of the batch curve (on the first table of the row curve)")
	instances := fs.String("instances", "1,2,4", "instances sharing one Redis and one warehouse (on the first table of the row curve)")
	nearCounts := fs.String("near-entries", "1000,10000,100000", "entry counts of the near cache's memory curve")
	nearSizes := fs.String("near-sizes", "100,440,4096", "value sizes of the near cache's memory curve, in bytes")
	fs.BoolVar(&o.keep, "keep", false, "keep the databases for a later run (by default each is dropped at the end)")
	clusters := fs.String("gp-clusters", "", "Greenplum clusters of the segment curve, each port:datadir (the kit's GP_PORT and GP_DATA), comma-separated; empty leaves the curve out")
	fs.IntVar(&o.segmentRows, "segment-rows", 1000000, "rows of the segment curve's table")
	fs.IntVar(&o.gpBatch, "gp-batch", 64, "keys per _mget request of the segment curve")
	fs.IntVar(&o.segmentRounds, "segment-rounds", 1, "rounds of the segment curve, the clusters and lane modes taking turns; each path keeps the round that cost the cluster the fewest µs")
	lanes := fs.String("segment-lanes", "auto", "serve's --gp-segment-lanes on the segment curve, comma-separated: each is measured in turn (auto,off compares the two)")
	fs.DurationVar(&o.idleWindow, "idle-window", 3*time.Second, "how long the segment curve measures each cluster's CPU with the service serving nothing, before the attacks")
	fs.IntVar(&o.fleetRows, "fleet-rows", 100000, "rows of the fleet curve's table")
	fs.BoolVar(&o.fleetPerInstance, "fleet-per-instance", false, "give each instance of the fleet curve -workers clients of its own, as a fleet of sidecars that grows with its applications is loaded, where by default -workers clients are shared by the instances")
	fs.IntVar(&o.fleetRounds, "fleet-rounds", 2, "rounds of the fleet curve; each point keeps the round that cost the fewest µs over every process")
	fs.IntVar(&o.clusterMasters, "cluster-masters", 3, "masters of the fleet curve's Redis Cluster")
	fs.IntVar(&o.clusterReplicas, "cluster-replicas", 0, "replicas of each master of the fleet curve's Redis Cluster")
	only := fs.String("curves", "rows,sizes,gp-rows,batches,instances,near,segments,fleet", "the curves to draw; SCALE.md is written only when the row curve is among them, SEGMENTS.md with the segment curve, FLEET.md with the fleet curve")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if o.gpClusters, err = parseClusters(*clusters); err != nil {
		return options{}, err
	}
	for _, l := range []struct {
		dst *[]int
		s   string
	}{{&o.rows, *rows}, {&o.sizes, *sizes}, {&o.gpRows, *gpRows}, {&o.batches, *batches}, {&o.instances, *instances}, {&o.nearCounts, *nearCounts}, {&o.nearSizes, *nearSizes}} {
		if *l.dst, err = ints(l.s); err != nil {
			return options{}, err
		}
	}
	o.fleetRounds = max(o.fleetRounds, 1)
	o.segmentRounds = max(o.segmentRounds, 1)
	for _, l := range strings.Split(*lanes, ",") {
		if l = strings.TrimSpace(l); l != "" {
			o.segmentLanes = append(o.segmentLanes, l)
		}
	}
	if len(o.segmentLanes) == 0 {
		o.segmentLanes = []string{"auto"}
	}
	o.only(*only)
	return o, nil
}

// only keeps the curves named in the comma-separated list names, and
// empties the lists of the others that measureCurves reads.
func (o *options) only(names string) {
	o.curves = map[string]bool{}
	for _, name := range strings.Split(names, ",") {
		o.curves[strings.TrimSpace(name)] = true
	}
	if !o.curves["rows"] {
		o.rows = nil
	}
	if !o.curves["sizes"] {
		o.sizes = nil
	}
	if !o.curves["gp-rows"] {
		o.greenplum = ""
	}
	if !o.curves["near"] {
		o.nearCounts = nil
	}
}

// databases are the databases of the points measured, to drop at the end.
type databases []struct {
	w  warehouse
	db string
}

// add records db of w, once.
func (d *databases) add(w warehouse, db string) {
	for _, e := range *d {
		if e.db == db && e.w.name == w.name {
			return
		}
	}
	*d = append(*d, struct {
		w  warehouse
		db string
	}{w, db})
}

// drop drops every database recorded.
func (d *databases) drop(ctx context.Context) {
	for _, e := range *d {
		dropDatabase(ctx, e.w, e.db)
	}
}

// measureCurves measures every curve, recording the databases it makes
// in dbs.
func measureCurves(ctx context.Context, o options, dbs *databases, log io.Writer) (curves, error) {
	var c curves
	measurePoint := func(w warehouse, rows, size int, extra func(p *point, base string, pid int) error) (point, error) {
		p, db, err := measure(ctx, o, w, rows, size, log, extra)
		if db != "" {
			dbs.add(w, db)
		}
		return p, err
	}
	if o.curves["segments"] && len(o.gpClusters) > 0 {
		if err := segmentReport(ctx, o, measurePoint, log); err != nil {
			return c, err
		}
	}
	if o.curves["fleet"] && len(o.instances) > 0 {
		if err := fleetReport(ctx, o, dbs, log); err != nil {
			return c, err
		}
	}
	pg := postgresWarehouse(o)
	for i, n := range o.rows {
		var extra func(p *point, base string, pid int) error
		if i == 0 && o.curves["batches"] {
			// The batch curve on the first table, while it is served.
			extra = func(p *point, base string, pid int) error {
				var err error
				c.batches, err = batchCurve(ctx, o, base, pid, n)
				return err
			}
		}
		p, err := measurePoint(pg, n, 0, extra)
		if err != nil {
			return c, err
		}
		c.byRows = append(c.byRows, p)
	}
	if len(o.rows) > 0 && o.curves["instances"] {
		db := fmt.Sprintf("%s%d_0", pg.prefix, o.rows[0])
		var err error
		if c.instances, err = instanceCurve(ctx, o, pg, db, o.rows[0], log); err != nil {
			return c, err
		}
	}
	for _, size := range o.sizes {
		p, err := measurePoint(pg, o.sizeRows, size, nil)
		if err != nil {
			return c, err
		}
		c.bySize = append(c.bySize, p)
	}
	if o.greenplum != "" {
		gp, err := greenplumWarehouse(o.greenplum)
		if err != nil {
			return c, err
		}
		for _, n := range o.gpRows {
			p, err := measurePoint(gp, n, 0, nil)
			if err != nil {
				return c, err
			}
			c.gpRows = append(c.gpRows, p)
		}
	}
	var err error
	c.near, err = nearCurve(o)
	return c, err
}

// drawCharts writes the PNGs of every curve to o.out.
func drawCharts(o options, c curves) error {
	rowsX := func(p point) float64 { return float64(p.rows) }
	sizeX := func(p point) float64 { return float64(p.valueBytes) }
	for _, ch := range []struct {
		file, title string
		points      []point
		x           func(point) float64
	}{
		{"rows", "table size (rows)", c.byRows, rowsX},
		{"sizes", "value size (bytes)", c.bySize, sizeX},
		{"gp-rows", "table size (rows), Greenplum", c.gpRows, rowsX},
	} {
		if err := chart(filepath.Join(o.out, ch.file+".png"), "requests/s by "+ch.title, "requests/s", ch.points, ch.x, func(p point) map[string]float64 { return p.rate }); err != nil {
			return err
		}
		if err := chart(filepath.Join(o.out, ch.file+"-cpu.png"), "service CPU µs per request by "+ch.title, "µs per request", ch.points, ch.x, func(p point) map[string]float64 { return p.cpu }); err != nil {
			return err
		}
	}
	return c.draw(o.out)
}

// ints parses a comma-separated list of positive numbers; empty is none.
func ints(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// value returns the JSON document of key: the widget document of about
// 440 bytes when size is 0, else an object padded to size bytes.
func value(key, size int) string {
	if size == 0 {
		return fmt.Sprintf(`{"widget":{"debug":"on","id":"%d","window":{"title":"Sample Konfabulator Widget","name":"main_window","width":500,"height":500},"image":{"src":"Images/Sun.png","name":"sun1","hOffset":250,"vOffset":250,"alignment":"center"},"text":{"data":"Click Here","size":36,"style":"bold","name":"text1","hOffset":250,"vOffset":100,"alignment":"center","onMouseUp":"sun1.opacity = (sun1.opacity / 100) * 90;"}}}`, key)
	}
	head := fmt.Sprintf(`{"id":%d,"pad":"`, key)
	return head + strings.Repeat("x", max(size-len(head)-2, 0)) + `"}`
}

func dsn(hostport, db string) string {
	return "postgres://postgres@" + hostport + "/" + db + "?sslmode=disable"
}

// measure prepares the table of rows values of valueBytes (0: widgets) on
// w, serves it and attacks each path; extra, when not nil, measures more
// while it is served. It returns the point and the database's name.
func measure(ctx context.Context, o options, w warehouse, rows, valueBytes int, log io.Writer, extra func(p *point, base string, pid int) error) (point, string, error) {
	p := point{warehouse: w.name, rows: rows, valueBytes: valueBytes, rate: map[string]float64{}, cpu: map[string]float64{}}
	db := fmt.Sprintf("%s%d_%d", w.prefix, rows, valueBytes)
	fmt.Fprintf(log, "==> %s on %s\n", db, w.name)
	p, err := measureOn(ctx, o, w, db, p, log, extra)
	return p, db, err
}

// dropDatabase drops db on w, ending its sessions first.
func dropDatabase(ctx context.Context, w warehouse, db string) {
	admin, err := pgx.Connect(ctx, w.admin)
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	_, _ = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", db)
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize())
}

// measureOn measures point p on db of w: it creates and migrates the
// database, loads its table unless an earlier run did, serves it, attacks
// each path, and runs extra (when not nil) while it is served.
func measureOn(ctx context.Context, o options, w warehouse, db string, p point, log io.Writer, extra func(p *point, base string, pid int) error) (point, error) {
	dir, env, err := prepareTable(ctx, o, w, db, &p, log)
	if err != nil {
		return p, err
	}
	defer os.RemoveAll(dir)
	if w.dataDir != "" {
		p.dispatch = doctorLines(ctx, o, env)
	}
	serve, err := startServe(ctx, o, env, w, db)
	if err != nil {
		return p, err
	}
	defer func() { _ = serve.Stop(syscall.SIGTERM, time.Minute) }()
	flush(ctx, o)
	defer flush(context.WithoutCancel(ctx), o) // large values must not stay in the shared Redis
	attackPaths(ctx, o, w, serve, &p)
	for _, path := range paths {
		fmt.Fprintf(log, "    %-5s %8.0f req/s  %7.1f µs of the service's CPU per request\n", path, p.rate[path], p.cpu[path])
	}
	if extra != nil {
		flush(ctx, o)
		return p, extra(&p, serve.HTTP(), serve.Pid())
	}
	return p, nil
}

// prepareTable creates db on w unless it exists, migrates it and loads
// the widgets table of p's rows unless an earlier run did (loadTable). It
// returns the temporary directory of the namespaces file, which the
// caller removes, and the environment of warmcache's commands on db.
func prepareTable(ctx context.Context, o options, w warehouse, db string, p *point, log io.Writer) (string, []string, error) {
	if err := createDatabase(ctx, w, db); err != nil {
		return "", nil, err
	}
	dir, env, err := pointEnv(o, w, db)
	if err != nil {
		return "", nil, err
	}
	if err = localstack.Migrate(ctx, o.bin, env); err == nil {
		err = loadTable(ctx, o, w, db, env, dir, p, log)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, env, nil
}

// createDatabase creates db on w unless it exists.
func createDatabase(ctx context.Context, w warehouse, db string) error {
	admin, err := pgx.Connect(ctx, w.admin)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	var exists bool
	_ = admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists)
	if exists {
		return nil
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+db)
	return err
}

// loadTable loads the p.rows values of p.valueBytes into the widgets
// table of db with warmcache load, through a file in dir, and records its
// rate in p (and on the table); a table an earlier run loaded is kept,
// with the rate recorded then.
func loadTable(ctx context.Context, o options, w warehouse, db string, env []string, dir string, p *point, log io.Writer) error {
	present, err := loadedBefore(ctx, w, db, p)
	if err != nil || present {
		return err
	}
	file := filepath.Join(dir, "rows.ndjson")
	bytes, err := writeRows(file, p.rows, p.valueBytes)
	if err != nil {
		return err
	}
	began := time.Now()
	if out, err := command(ctx, env, o.bin, "load", "widgets", file).CombinedOutput(); err != nil {
		return fmt.Errorf("load: %w\n%s", err, out)
	}
	took := time.Since(began).Seconds()
	p.loadRate, p.loadMBps = float64(p.rows)/took, float64(bytes)/took/1e6
	fmt.Fprintf(log, "    loaded %d rows in %.1fs: %.0f rows/s, %.1f MB/s\n", p.rows, took, p.loadRate, p.loadMBps)
	if conn, err := pgx.Connect(ctx, w.dsn(db)); err == nil {
		_, _ = conn.Exec(ctx, fmt.Sprintf("COMMENT ON TABLE widgets IS 'warmcache load: %.0f rows/s, %.2f MB/s'", p.loadRate, p.loadMBps))
		conn.Close(ctx)
	}
	return nil
}

// loadedBefore reports whether the widgets table of db holds its last
// row, loaded by an earlier run; then p takes the rate of that load.
func loadedBefore(ctx context.Context, w warehouse, db string, p *point) (bool, error) {
	conn, err := pgx.Connect(ctx, w.dsn(db))
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	var present bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM widgets WHERE key = $1)", p.rows).Scan(&present); err != nil || !present {
		return false, err
	}
	// A table loaded by an earlier run carries the rate of its load.
	var note *string
	_ = conn.QueryRow(ctx, "SELECT obj_description('widgets'::regclass, 'pg_class')").Scan(&note)
	if note != nil {
		_, _ = fmt.Sscanf(*note, "warmcache load: %f rows/s, %f MB/s", &p.loadRate, &p.loadMBps)
		p.loadReused = true
	}
	return true, nil
}

// writeRows writes rows values of valueBytes as NDJSON to file and
// returns its size.
func writeRows(file string, rows, valueBytes int) (int64, error) {
	f, err := os.Create(file)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	var bytes int64
	for k := 1; k <= rows; k++ {
		n, _ := fmt.Fprintf(bw, "{\"key\":%d,\"value\":%s}\n", k, value(k, valueBytes))
		bytes += int64(n)
	}
	return bytes, errors.Join(bw.Flush(), f.Close())
}

// attackPaths attacks each path of serve in turn and records its rate and
// the service's CPU per request in p: misses (each key at most once, in a
// scattered order), hits (the keys the misses read, now in Redis), and
// PUTs of random keys.
func attackPaths(ctx context.Context, o options, w warehouse, serve *localstack.Served, p *point) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.workers * 2}, Timeout: 30 * time.Second}
	kv, pid := serve.HTTP()+"/v1/kv/widgets/", serve.Pid()
	if w.dataDir != "" && o.idleWindow > 0 {
		p.idle = idleCPU(ctx, w.dataDir, o.idleWindow)
	}
	perm := rand.New(rand.NewPCG(uint64(p.rows), 1)).Perm(p.rows)
	var next atomic.Int64
	folds0 := batchKeys(ctx, client, []string{serve.HTTP()})
	p.attackPath(ctx, client, pid, o, w, "miss", 1, func() *http.Request {
		i := next.Add(1) - 1
		if i >= int64(len(perm)) {
			return nil
		}
		req, _ := http.NewRequest(http.MethodGet, kv+strconv.Itoa(perm[i]+1), nil)
		return req
	})
	folds1 := batchKeys(ctx, client, []string{serve.HTTP()})
	if n := folds1["sql_count"] - folds0["sql_count"]; n > 0 {
		p.missFold = (folds1["sql_sum"] - folds0["sql_sum"]) / n
	}
	read := int(min(next.Load(), int64(len(perm))))
	p.attackPath(ctx, client, pid, o, w, "hit", 1, func() *http.Request {
		req, _ := http.NewRequest(http.MethodGet, kv+strconv.Itoa(perm[rand.IntN(max(read, 1))]+1), nil)
		return req
	})
	body := map[int]string{}
	var mu sync.Mutex
	p.attackPath(ctx, client, pid, o, w, "put", 1, func() *http.Request {
		k := rand.IntN(p.rows) + 1
		mu.Lock()
		b, ok := body[k%64]
		if !ok {
			b = value(k%64, p.valueBytes)
			body[k%64] = b
		}
		mu.Unlock()
		req, _ := http.NewRequest(http.MethodPut, kv+strconv.Itoa(k), strings.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		return req
	})
}

// pointEnv makes a temporary directory holding the widgets namespace of w
// and returns it with the environment of warmcache's commands on db.
func pointEnv(o options, w warehouse, db string) (string, []string, error) {
	dir, err := os.MkdirTemp("", "wcscale")
	if err != nil {
		return "", nil, err
	}
	ns := filepath.Join(dir, "namespaces.yaml")
	if err := os.WriteFile(ns, bench.Namespaces(w.storage, ""), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, append(os.Environ(), "WARMCACHE_POSTGRES_DSN="+w.dsn(db), "WARMCACHE_NAMESPACES_FILE="+ns,
		"WARMCACHE_REDIS_ADDRS="+o.stack.RedisAddr(), "WARMCACHE_REDIS_PREFIX="+o.redisPrefix, "WARMCACHE_MAX_BODY_BYTES=4194304"), nil
}

// startServe starts warmcache serve on db of w with env (pointEnv), on a
// free loopback port and the servers' CPUs, and waits until it is ready
// (localstack.Serve). The variables of more come last and win.
func startServe(ctx context.Context, o options, env []string, w warehouse, db string, more ...string) (*localstack.Served, error) {
	env = append(slices.Clone(env), "WARMCACHE_HTTP_ADDR=127.0.0.1:0", "WARMCACHE_POSTGRES_DSN="+w.serve(db), "WARMCACHE_PG_POOLER="+w.pooler,
		"WARMCACHE_LOG_LEVEL=warn", "WARMCACHE_NEAR_CACHE_BYTES=0", "WARMCACHE_GRPC_ADDR=127.0.0.1:0", "WARMCACHE_PPROF_ADDR=")
	if w.lanes != "" {
		env = append(env, "WARMCACHE_GP_SEGMENT_LANES="+w.lanes)
	}
	env = append(env, more...)
	return localstack.Serve(ctx, o.bin, localstack.ServeOptions{Env: env, Wrap: o.place.Server})
}

// flush unlinks the service's Redis keys.
func flush(ctx context.Context, o options) {
	host, port, _ := net.SplitHostPort(o.stack.RedisAddr())
	out, err := exec.CommandContext(ctx, "redis-cli", "-h", host, "-p", port, "--scan", "--pattern", o.redisPrefix+"*").Output()
	keys := strings.Fields(string(out))
	for err == nil && len(keys) > 0 {
		n := min(len(keys), 1000)
		del := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", port, "UNLINK"}, keys[:n]...)...)
		err = del.Run()
		keys = keys[n:]
	}
}

func command(ctx context.Context, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	return cmd
}

// chart draws one line per path, y of each point against x, on
// logarithmic axes.
func chart(path, title, yLabel string, points []point, x func(point) float64, y func(point) map[string]float64) error {
	if len(points) == 0 {
		return nil
	}
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
	pl.X.Tick.Marker, pl.Y.Tick.Marker = plot.LogTicks{}, plot.LogTicks{}
	pl.Y.Label.Text = yLabel
	var lines []any
	for _, name := range paths {
		xys := make(plotter.XYs, 0, len(points))
		for _, p := range points {
			if r := y(p)[name]; r > 0 {
				xys = append(xys, plotter.XY{X: x(p), Y: r})
			}
		}
		lines = append(lines, name, xys)
	}
	if err := plotutil.AddLinePoints(pl, lines...); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return pl.Save(vg.Points(640), vg.Points(360), path)
}

// report writes the tables of every curve.
func report(path string, o options, c curves, took time.Duration) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Cost curves\n\n")
	p("One run of `make bench-scale` (loadtest/scale) on %s, %d workers per attack, %s each, no near cache; the run took %s. ",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.workers, o.duration, took.Round(time.Second))
	p("warmcache serve and this program's clients: %s; the warehouses and Redis are shared servers, unpinned. The machine was shared with other work, so read the slopes within one run, not the rates. ", o.place)
	p("`miss` asks for each key at most once after the prefix is flushed; `hit` asks again for the keys `miss` read; `put` writes random keys. CPU is the service processes' own, per successful request (per key for `_mget`).\n\n")
	table := func(title, png string, points []point, label func(point) string) {
		if len(points) == 0 {
			return
		}
		p("## %s\n\n![%s](%s) ![CPU per request](%s)\n\n| point | bulk load (`warmcache load`) | miss/s | hit/s | put/s | CPU µs per miss | per hit | per put |\n|---|---|---:|---:|---:|---:|---:|---:|\n", title, title, png, strings.Replace(png, ".png", "-cpu.png", 1))
		for _, pt := range points {
			load := "(table reused)"
			switch {
			case pt.loadRate > 0 && pt.loadReused:
				load = fmt.Sprintf("%.0f rows/s, %.1f MB/s (loaded before the run by the same `warmcache load`)", pt.loadRate, pt.loadMBps)
			case pt.loadRate > 0:
				load = fmt.Sprintf("%.0f rows/s, %.1f MB/s", pt.loadRate, pt.loadMBps)
			}
			p("| %s | %s | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f |\n", label(pt), load, pt.rate["miss"], pt.rate["hit"], pt.rate["put"], pt.cpu["miss"], pt.cpu["hit"], pt.cpu["put"])
		}
		p("\n")
	}
	rows := func(pt point) string { return fmt.Sprintf("%d rows", pt.rows) }
	table("PostgreSQL, by table size (values of about 440 bytes, through PgBouncer)", "rows.png", c.byRows, rows)
	table(fmt.Sprintf("PostgreSQL, by value size (%d rows each)", o.sizeRows), "sizes.png", c.bySize, func(pt point) string { return fmt.Sprintf("%d B", pt.valueBytes) })
	table("Greenplum, by table size (values of about 440 bytes, the coordinator directly)", "gp-rows.png", c.gpRows, rows)
	if len(c.batches) > 0 {
		p("## Batch size of `_mget` (PostgreSQL, %d rows)\n\n![keys/s](batches.png) ![CPU per key](batches-cpu.png)\n\n", c.byRows[0].rows)
		p("| keys per request | cold keys/s | CPU µs per cold key | hot keys/s | CPU µs per hot key |\n|---:|---:|---:|---:|---:|\n")
		for _, bp := range c.batches {
			p("| %d | %.0f | %.1f | %.0f | %.1f |\n", bp.keys, bp.missKeys, bp.missCPUPerKey, bp.hitKeys, bp.hitCPUKey)
		}
		p("\n")
	}
	if len(c.instances) > 0 {
		p("## Instances sharing one Redis and one warehouse (PostgreSQL, %d rows)\n\n![requests/s](instances.png) ![CPU per request](instances-cpu.png)\n\n", c.byRows[0].rows)
		p("Every instance on the servers' CPU, the clients spread evenly over them.\n\n| instances | miss/s | CPU µs per miss | hit/s | CPU µs per hit |\n|---:|---:|---:|---:|---:|\n")
		for _, ip := range c.instances {
			p("| %d | %.0f | %.1f | %.0f | %.1f |\n", ip.n, ip.miss, ip.missCPU, ip.hit, ip.hitCPU)
		}
		p("\n")
	}
	if len(c.near) > 0 {
		p("## Near-cache memory per entry\n\n![heap per entry](near.png)\n\n")
		p("The live Go heap after a collection, with the cache holding distinct values, less the heap before it was made, per entry; and the weight the cache counts against its byte bound.\n\n")
		p("| value | entries | heap bytes per entry | overhead beyond the value | counted weight per entry |\n|---:|---:|---:|---:|---:|\n")
		for _, np := range c.near {
			p("| %d B | %d | %.0f | %.0f | %.0f |\n", np.valueBytes, np.entries, np.heapPerEntry, np.heapPerEntry-float64(np.valueBytes), np.weightPerEntry)
		}
		p("\n")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
