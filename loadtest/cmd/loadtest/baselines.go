package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// pgbenchScript is one point lookup on a uniformly random key: the
// service's lookup statement, SELECT value, version FROM widgets WHERE
// key = $1.
const pgbenchScript = `\set k random(1, %d)
SELECT value, version FROM widgets WHERE key = :k;
`

// findPgbench returns pgbench from PATH or the newest PostgreSQL bin
// directory.
func findPgbench() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(matches) > 0 {
		return matches[len(matches)-1], nil
	}
	return "", fmt.Errorf("pgbench not found (apt-get install postgresql-contrib)")
}

// pgbench runs pgbench point lookups on the bench table at addr (PostgreSQL
// directly, or PgBouncer) with protocol mode (prepared, extended or
// simple). rate zero runs at saturation, with the CPU of PostgreSQL's
// backends, PgBouncer and pgbench measured over the run; a positive rate is
// paced and logs every transaction for percentiles.
func (h *harness) pgbench(ctx context.Context, addr, mode string, clients int, rate float64) (*bench.Baseline, error) {
	script := filepath.Join(h.opts.ArtifactDir, "pgbench-lookup.sql")
	if err := os.WriteFile(script, fmt.Appendf(nil, pgbenchScript, h.opts.Rows), 0o644); err != nil {
		return nil, fmt.Errorf("pgbench script: %w", err)
	}
	b, _, err := h.runPgbench(ctx, pgbenchRun{addr: addr, mode: mode, clients: clients, rate: rate, script: script})
	return b, err
}

// pgbenchRun is one run of pgbench: script at addr (PostgreSQL directly,
// or PgBouncer) in protocol mode with clients, for the attack duration.
// Rate zero runs at saturation, with the CPU of PostgreSQL's backends,
// PgBouncer and pgbench measured over the run; a positive rate is paced.
// logged keeps every transaction's latency from pgbench's transaction
// log (--log); a paced run always keeps them.
type pgbenchRun struct {
	addr, mode, script string
	clients            int
	rate               float64
	logged             bool
}

// runPgbench runs pr and returns its baseline and, when it was logged,
// every transaction's latency (its percentiles are the baseline's).
func (h *harness) runPgbench(ctx context.Context, pr pgbenchRun) (*bench.Baseline, []time.Duration, error) {
	bin, err := findPgbench()
	if err != nil {
		return nil, nil, err
	}
	pr.logged = pr.logged || pr.rate > 0
	args, logDir, err := h.pgbenchArgs(pr)
	if err != nil {
		return nil, nil, err
	}
	name, argv := h.pin.Loader(bin, args)
	cmd := exec.CommandContext(ctx, name, argv...)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=5")
	var w *cpuWindow
	if pr.rate == 0 {
		w = h.meter(0).start()
	}
	out, err := cmd.CombinedOutput()
	var used map[string]time.Duration
	var wall time.Duration
	if w != nil {
		used, wall = w.stop()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	tps, err := bench.ParsePgbenchTPS(string(out))
	if err != nil {
		return nil, nil, fmt.Errorf("%w\n%s", err, out)
	}
	b := &bench.Baseline{
		Name:       h.pgbenchName(pr.addr, pr.mode),
		Mode:       pr.mode,
		Command:    "pgbench " + strings.Join(args, " "),
		Clients:    pr.clients,
		Rate:       pr.rate,
		Throughput: tps,
	}
	if w != nil {
		if b.CPU, err = pgbenchCPU(cmd, used, wall, string(out)); err != nil {
			return nil, nil, err
		}
	}
	if !pr.logged {
		return b, nil, nil
	}
	lat, err := pgbenchLatencies(logDir)
	if err != nil {
		return nil, nil, err
	}
	b.Latency = bench.Percentiles(slices.Clone(lat))
	return b, lat, nil
}

// pgbenchArgs returns pgbench's arguments for pr and the directory of its
// transaction log, emptied, when pr is logged.
func (h *harness) pgbenchArgs(pr pgbenchRun) ([]string, string, error) {
	host, port, _ := net.SplitHostPort(pr.addr)
	secs := max(1, int(h.opts.Duration.Round(time.Second)/time.Second))
	threads := min(pr.clients, 2)
	args := []string{"-h", host, "-p", port, "-U", "postgres", "-n", "-M", pr.mode,
		"-c", strconv.Itoa(pr.clients), "-j", strconv.Itoa(threads), "-T", strconv.Itoa(secs), "-f", pr.script}
	if pr.rate > 0 {
		args = append(args, "-R", strconv.Itoa(max(1, int(pr.rate))))
	}
	logDir := filepath.Join(h.opts.ArtifactDir, "pgbench-log")
	if pr.logged {
		if err := os.RemoveAll(logDir); err != nil {
			return nil, "", fmt.Errorf("pgbench log dir: %w", err)
		}
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return nil, "", fmt.Errorf("pgbench log dir: %w", err)
		}
		args = append(args, "--log", "--log-prefix="+filepath.Join(logDir, "pgbench"))
	}
	return append(args, h.opts.Database), logDir, nil
}

// pgbenchName names the baseline of mode at addr in the report.
func (h *harness) pgbenchName(addr, mode string) string {
	name := "`pgbench -M " + mode + "`"
	if addr == h.opts.PGBouncer {
		return name + " via PgBouncer"
	}
	return name + " direct"
}

// pgbenchCPU is the CPU used over a pgbench run at saturation. The
// harness's own CPU is not the load there: pgbench's is.
func pgbenchCPU(cmd *exec.Cmd, used map[string]time.Duration, wall time.Duration, out string) (*bench.CPU, error) {
	delete(used, bench.ProcLoad)
	if st := cmd.ProcessState; st != nil {
		used[bench.ProcLoad] = st.UserTime() + st.SystemTime()
	}
	n, err := bench.ParsePgbenchTransactions(out)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	return &bench.CPU{Used: used, Wall: wall, Requests: n, Server: "—"}, nil
}

// pgbenchLatencies reads every transaction's latency from pgbench's
// transaction logs in logDir.
func pgbenchLatencies(logDir string) ([]time.Duration, error) {
	files, _ := filepath.Glob(filepath.Join(logDir, "pgbench*"))
	var lat []time.Duration
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return nil, fmt.Errorf("pgbench log: %w", err)
		}
		ds, err := bench.ParsePgbenchLog(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		lat = append(lat, ds...)
	}
	return lat, nil
}

// redisBenchmark runs redis-benchmark GET on one key of the harness's
// prefix holding a value of size bytes, with clients connections, for about
// the attack duration (the request count is estimated from a short run).
func (h *harness) redisBenchmark(ctx context.Context, rdb *redis.Client, clients, size int) (*bench.Baseline, error) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return nil, fmt.Errorf("redis-benchmark not found (apt-get install redis-tools)")
	}
	key := h.opts.RedisPrefix + "redis-benchmark"
	if err := rdb.Set(ctx, key, strings.Repeat("x", size), time.Hour).Err(); err != nil {
		return nil, fmt.Errorf("redis-benchmark key: %w", err)
	}
	defer rdb.Del(context.WithoutCancel(ctx), key)
	host, port, _ := net.SplitHostPort(h.opts.RedisAddr)
	runOnce := func(n int) (bench.RedisBenchmark, []string, error) {
		args := []string{"-h", host, "-p", port, "-c", strconv.Itoa(clients), "-n", strconv.Itoa(n), "--csv", "GET", key}
		name, argv := h.pin.Loader(bin, args)
		out, err := exec.CommandContext(ctx, name, argv...).CombinedOutput()
		if err != nil {
			return bench.RedisBenchmark{}, args, fmt.Errorf("redis-benchmark: %w\n%s", err, out)
		}
		rb, err := bench.ParseRedisBenchmarkCSV(string(out), "GET "+key)
		return rb, args, err
	}
	probe, _, err := runOnce(10_000)
	if err != nil {
		return nil, err
	}
	n := int(probe.RPS * h.opts.Duration.Seconds())
	rb, args, err := runOnce(max(n, 10_000))
	if err != nil {
		return nil, err
	}
	return &bench.Baseline{
		Name:       "`redis-benchmark` GET",
		Command:    "redis-benchmark " + strings.Join(args, " ") + fmt.Sprintf("   # the key holds %d bytes", size),
		Clients:    clients,
		Throughput: rb.RPS,
		Latency:    bench.Latency{P50: rb.P50, P90: rb.P95, P99: rb.P99, Max: rb.Max, Count: 1},
		NoP90:      true,
	}, nil
}
