// Command scale draws warmcache's cost curves on the local stack (make
// bench-scale, not in CI): misses, hits and writes as the table grows and
// as the values grow. For each point it creates a database of its own
// (kept for later runs), bulk-loads it with the project's own `warmcache
// load` (whose rate it reports), starts `warmcache serve` through PgBouncer,
// and measures each path at saturation with the CPU of the service per
// request. It writes loadtest/scale/SCALE.md and one PNG per curve.
//
//	go run ./loadtest/scale -bin bin/warmcache -rows 100000,1000000
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
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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
)

type options struct {
	bin, out, redisPrefix string
	rows                  []int
	sizes                 []int
	sizeRows              int
	workers               int
	duration              time.Duration
	stack                 localstack.Config
}

// point is one measured configuration.
type point struct {
	rows, valueBytes int
	loadRate         float64 // rows per second of warmcache load; 0 when the table was there
	loadMBps         float64
	rate             map[string]float64 // requests per second by path
	cpu              map[string]float64 // the service's CPU µs per request by path
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
	stack, err := localstack.FromEnv(getenv)
	if err != nil {
		return err
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.rows, err = ints(*rows); err != nil {
		return err
	}
	if o.sizes, err = ints(*sizes); err != nil {
		return err
	}
	start := time.Now()
	var byRows, bySize []point
	for _, n := range o.rows {
		p, err := measure(ctx, o, n, 0, stdout)
		if err != nil {
			return err
		}
		byRows = append(byRows, p)
	}
	for _, size := range o.sizes {
		p, err := measure(ctx, o, o.sizeRows, size, stdout)
		if err != nil {
			return err
		}
		bySize = append(bySize, p)
	}
	if err := chart(filepath.Join(o.out, "rows.png"), "requests/s by table size (rows)", byRows, func(p point) float64 { return float64(p.rows) }); err != nil {
		return err
	}
	if err := chart(filepath.Join(o.out, "sizes.png"), "requests/s by value size (bytes)", bySize, func(p point) float64 { return float64(p.valueBytes) }); err != nil {
		return err
	}
	return report(filepath.Join(o.out, "SCALE.md"), o, byRows, bySize, time.Since(start))
}

func ints(s string) ([]int, error) {
	var out []int
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

// measure prepares the table of rows values of valueBytes (0: widgets),
// serves it and attacks each path.
func measure(ctx context.Context, o options, rows, valueBytes int, log io.Writer) (point, error) {
	p := point{rows: rows, valueBytes: valueBytes, rate: map[string]float64{}, cpu: map[string]float64{}}
	db := fmt.Sprintf("warmcache_scale_%d_%d", rows, valueBytes)
	fmt.Fprintf(log, "==> %s\n", db)
	admin, err := pgx.Connect(ctx, dsn(o.stack.PostgresAddr(), "postgres"))
	if err != nil {
		return p, err
	}
	var exists bool
	_ = admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists)
	if !exists {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			admin.Close(ctx)
			return p, err
		}
	}
	admin.Close(ctx)
	dir, err := os.MkdirTemp("", "wcscale")
	if err != nil {
		return p, err
	}
	defer os.RemoveAll(dir)
	ns := filepath.Join(dir, "namespaces.yaml")
	if err := os.WriteFile(ns, []byte(`namespaces:
  - name: widgets
    table: widgets
    key: {column: key, type: bigint}
    value: {layout: packed, column: value}
    version_column: version
    ttl: 10m
    negative_ttl: 30s
    writable: true
    managed: true
    storage:
      partitions: 8
`), 0o644); err != nil {
		return p, err
	}
	env := append(os.Environ(), "WARMCACHE_POSTGRES_DSN="+dsn(o.stack.PostgresAddr(), db), "WARMCACHE_NAMESPACES_FILE="+ns,
		"WARMCACHE_REDIS_ADDRS="+o.stack.RedisAddr(), "WARMCACHE_REDIS_PREFIX="+o.redisPrefix, "WARMCACHE_MAX_BODY_BYTES=4194304")
	if out, err := command(ctx, env, o.bin, "migrate", "up").CombinedOutput(); err != nil {
		return p, fmt.Errorf("migrate: %w\n%s", err, out)
	}
	conn, err := pgx.Connect(ctx, dsn(o.stack.PostgresAddr(), db))
	if err != nil {
		return p, err
	}
	var present bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM widgets WHERE key = $1)", rows).Scan(&present)
	conn.Close(ctx)
	if err != nil {
		return p, err
	}
	if !present {
		file := filepath.Join(dir, "rows.ndjson")
		f, err := os.Create(file)
		if err != nil {
			return p, err
		}
		w := bufio.NewWriterSize(f, 1<<20)
		var bytes int64
		for k := 1; k <= rows; k++ {
			n, _ := fmt.Fprintf(w, "{\"key\":%d,\"value\":%s}\n", k, value(k, valueBytes))
			bytes += int64(n)
		}
		if err := errors.Join(w.Flush(), f.Close()); err != nil {
			return p, err
		}
		began := time.Now()
		if out, err := command(ctx, env, o.bin, "load", "widgets", file).CombinedOutput(); err != nil {
			return p, fmt.Errorf("load: %w\n%s", err, out)
		}
		took := time.Since(began).Seconds()
		p.loadRate, p.loadMBps = float64(rows)/took, float64(bytes)/took/1e6
		fmt.Fprintf(log, "    loaded %d rows in %.1fs: %.0f rows/s, %.1f MB/s\n", rows, took, p.loadRate, p.loadMBps)
	}
	addr, err := freeAddr()
	if err != nil {
		return p, err
	}
	serveEnv := append(env, "WARMCACHE_HTTP_ADDR="+addr, "WARMCACHE_POSTGRES_DSN="+dsn(o.stack.PgBouncerAddr(), db), "WARMCACHE_PG_POOLER=pgbouncer",
		"WARMCACHE_LOG_LEVEL=warn", "WARMCACHE_NEAR_CACHE_BYTES=0", "WARMCACHE_GRPC_ADDR=127.0.0.1:0", "WARMCACHE_PPROF_ADDR=")
	serve := command(ctx, serveEnv, o.bin, "serve")
	serve.Stdout, serve.Stderr = io.Discard, io.Discard
	if err := serve.Start(); err != nil {
		return p, err
	}
	defer func() { _ = serve.Process.Signal(syscall.SIGTERM); _ = serve.Wait() }()
	base := "http://" + addr
	if err := waitReady(ctx, base+"/readyz"); err != nil {
		return p, err
	}
	flush(ctx, o)
	defer flush(context.WithoutCancel(ctx), o) // large values must not stay in the shared Redis
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.workers * 2}, Timeout: 30 * time.Second}
	// Misses: each key at most once, in a scattered order.
	perm := rand.New(rand.NewPCG(uint64(rows), 1)).Perm(rows)
	var next atomic.Int64
	p.rate["miss"], p.cpu["miss"] = attack(ctx, client, serve.Process.Pid, o, func() *http.Request {
		i := next.Add(1) - 1
		if i >= int64(len(perm)) {
			return nil
		}
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/kv/widgets/"+strconv.Itoa(perm[i]+1), nil)
		return req
	})
	// Hits: the keys the misses read, now in Redis.
	read := int(min(next.Load(), int64(len(perm))))
	p.rate["hit"], p.cpu["hit"] = attack(ctx, client, serve.Process.Pid, o, func() *http.Request {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/kv/widgets/"+strconv.Itoa(perm[rand.IntN(max(read, 1))]+1), nil)
		return req
	})
	body := map[int]string{}
	var mu sync.Mutex
	p.rate["put"], p.cpu["put"] = attack(ctx, client, serve.Process.Pid, o, func() *http.Request {
		k := rand.IntN(rows) + 1
		mu.Lock()
		b, ok := body[k%64]
		if !ok {
			b = value(k%64, valueBytes)
			body[k%64] = b
		}
		mu.Unlock()
		req, _ := http.NewRequest(http.MethodPut, base+"/v1/kv/widgets/"+strconv.Itoa(k), strings.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		return req
	})
	for _, path := range paths {
		fmt.Fprintf(log, "    %-5s %8.0f req/s  %7.1f µs of the service's CPU per request\n", path, p.rate[path], p.cpu[path])
	}
	return p, nil
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

// attack sends the requests of next (nil: none left) with o.workers
// workers for o.duration and returns the successful requests per second
// and the CPU µs of process pid per request.
func attack(ctx context.Context, client *http.Client, pid int, o options, next func() *http.Request) (float64, float64) {
	var ok atomic.Int64
	cpu0 := processCPU(pid)
	began := time.Now()
	deadline := began.Add(o.duration)
	var wg sync.WaitGroup
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				req := next()
				if req == nil {
					return
				}
				resp, err := client.Do(req.WithContext(ctx))
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode < 300 {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(began).Seconds()
	n := float64(ok.Load())
	return n / took, (processCPU(pid) - cpu0).Seconds() * 1e6 / max(n, 1)
}

// processCPU returns the user and system CPU time of process pid.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitReady(ctx context.Context, url string) error {
	for range 300 {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s never answered 200", url)
}

// chart draws one line per path, requests per second against x, on
// logarithmic axes.
func chart(path, title string, points []point, x func(point) float64) error {
	if len(points) == 0 {
		return nil
	}
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
	pl.X.Tick.Marker, pl.Y.Tick.Marker = plot.LogTicks{}, plot.LogTicks{}
	pl.Y.Label.Text = "requests/s"
	var lines []any
	for _, name := range paths {
		xys := make(plotter.XYs, 0, len(points))
		for _, p := range points {
			if r := p.rate[name]; r > 0 {
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

// report writes the tables of both curves.
func report(path string, o options, byRows, bySize []point, took time.Duration) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Cost curves\n\n")
	p("One run of `make bench-scale` (loadtest/scale) on %s, %d workers per attack, %s each, the service through PgBouncer, no near cache; the run took %s. ",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.workers, o.duration, took.Round(time.Second))
	p("Not pinned: the machine was shared with other work, so read the slopes, not the rates. ")
	p("`miss` asks for each key at most once after the prefix is flushed; `hit` asks again for the keys `miss` read; `put` writes random keys. CPU is the service process's own, per successful request.\n\n")
	p("![by rows](rows.png) ![by value size](sizes.png)\n\n")
	table := func(title string, points []point, label func(point) string) {
		p("## %s\n\n| point | bulk load | miss/s | hit/s | put/s | CPU µs per miss | per hit | per put |\n|---|---|---:|---:|---:|---:|---:|---:|\n", title)
		for _, pt := range points {
			load := "(table reused)"
			if pt.loadRate > 0 {
				load = fmt.Sprintf("%.0f rows/s, %.1f MB/s", pt.loadRate, pt.loadMBps)
			}
			p("| %s | %s | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f |\n", label(pt), load, pt.rate["miss"], pt.rate["hit"], pt.rate["put"], pt.cpu["miss"], pt.cpu["hit"], pt.cpu["put"])
		}
		p("\n")
	}
	table("By table size (values of about 440 bytes)", byRows, func(pt point) string { return fmt.Sprintf("%d rows", pt.rows) })
	table(fmt.Sprintf("By value size (%d rows each)", o.sizeRows), bySize, func(pt point) string { return fmt.Sprintf("%d B", pt.valueBytes) })
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
