package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/loadtest/bench"
)

// benchNamespaces declares the benchmark's table: the load tools' widgets
// namespace, with 8 hash partitions compressed with lz4, and a near TTL
// for the l1 scenario (the only one with the near cache on).
var benchNamespaces = bench.Namespaces(`    near_ttl: 30s
    ttl_jitter: 0.1
    storage:
      partitions: 8
      compression: lz4
`, "")

// widgetDoc is the sample widget document of deploy/local/sample-widgets.sql.
const widgetDoc = `{"widget": {
    "debug": "on",
    "id": "",
    "window": {"title": "Sample Konfabulator Widget", "name": "main_window", "width": 500, "height": 500},
    "image": {"src": "Images/Sun.png", "name": "sun1", "hOffset": 250, "vOffset": 250, "alignment": "center"},
    "text": {"data": "Click Here", "size": 36, "style": "bold", "name": "text1", "hOffset": 250, "vOffset": 100,
             "alignment": "center", "onMouseUp": "sun1.opacity = (sun1.opacity / 100) * 90;"}
}}`

// loadChunk is the number of rows of one INSERT ... SELECT, so that the
// load can print progress and resume.
const loadChunk = 100_000

// prepareDatabase creates the database, migrates it with bin/warmcache and
// fills it with o.Rows widgets unless they are already there. It returns
// the value of key 1 as PostgreSQL prints it.
func (h *harness) prepareDatabase(ctx context.Context) (string, error) {
	if err := h.createDatabase(ctx); err != nil {
		return "", err
	}
	if err := h.migrate(ctx); err != nil {
		return "", err
	}
	conn, err := h.database(ctx)
	if err != nil {
		return "", err
	}
	defer func() {
		// Publish this session's statistics now (PostgreSQL 15 and later
		// flush them when a session goes idle after this call), so that the
		// stampede's idx_scan count starts from a quiet table and does not
		// catch this session's lookups late.
		bg := context.WithoutCancel(ctx)
		if _, err := conn.Exec(bg, "SELECT pg_stat_force_next_flush()"); err == nil {
			_, _ = conn.Exec(bg, "SELECT 1")
		}
		_ = conn.Close(bg)
	}()
	if err := h.loadRows(ctx, conn); err != nil {
		return "", err
	}
	var sample string
	if err := conn.QueryRow(ctx, "SELECT value::text FROM widgets WHERE key = 1").Scan(&sample); err != nil {
		return "", fmt.Errorf("read sample row: %w", err)
	}
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&h.report.Env.PostgreSQL); err != nil {
		return "", fmt.Errorf("read server version: %w", err)
	}
	return sample, nil
}

// createDatabase creates the harness's database unless it exists.
func (h *harness) createDatabase(ctx context.Context) error {
	admin, err := pgx.Connect(ctx, dsn(h.opts.PGHost, "postgres"))
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	var exists bool
	err = admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", h.opts.Database).Scan(&exists)
	if err == nil && !exists {
		h.logf("creating database %s", h.opts.Database)
		_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{h.opts.Database}.Sanitize())
	}
	_ = admin.Close(ctx)
	if err != nil {
		return fmt.Errorf("create database %s: %w", h.opts.Database, err)
	}
	return nil
}

// migrate writes the benchmark's namespaces file and runs bin/warmcache
// migrate up with it.
func (h *harness) migrate(ctx context.Context) error {
	nsFile := filepath.Join(h.opts.ArtifactDir, "namespaces.yaml")
	if err := os.WriteFile(nsFile, benchNamespaces, 0o644); err != nil {
		return fmt.Errorf("write namespaces: %w", err)
	}
	h.nsFile = nsFile
	return localstack.Migrate(ctx, h.opts.Bin, append(cleanEnv(), "WARMCACHE_POSTGRES_DSN="+dsn(h.opts.PGHost, h.opts.Database), "WARMCACHE_NAMESPACES_FILE="+nsFile))
}

// loadRows fills the widgets table chunk by chunk, skipping the chunks
// already there, and vacuums it if it loaded any.
func (h *harness) loadRows(ctx context.Context, conn *pgx.Conn) error {
	loaded := false
	start := time.Now()
	for lo := int64(1); lo <= h.opts.Rows; lo += loadChunk {
		hi := min(lo+loadChunk-1, h.opts.Rows)
		var present bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM widgets WHERE key = $1)", hi).Scan(&present); err != nil {
			return fmt.Errorf("check rows: %w", err)
		}
		if present {
			continue
		}
		if !loaded {
			h.logf("loading %d widget rows into %s.widgets (the slowest step; done once, reused by later runs)", h.opts.Rows, h.opts.Database)
			loaded = true
		}
		_, err := conn.Exec(ctx, `INSERT INTO widgets (key, value, version)
SELECT g.key, jsonb_set($3::jsonb, '{widget,id}', to_jsonb(g.key::text)), nextval('warmcache_version_seq')
FROM generate_series($1::bigint, $2::bigint) AS g(key)
ON CONFLICT (key) DO NOTHING`, lo, hi, widgetDoc)
		if err != nil {
			return fmt.Errorf("load rows %d..%d: %w", lo, hi, err)
		}
		h.logf("  %7d / %d rows (%s)", hi, h.opts.Rows, time.Since(start).Round(100*time.Millisecond))
	}
	if !loaded {
		h.logf("reusing %s.widgets (%d rows present)", h.opts.Database, h.opts.Rows)
		return nil
	}
	h.logf("vacuum analyze widgets")
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) widgets"); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return nil
}

// indexScans sums idx_scan over the widgets table and its partitions.
func indexScans(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, `SELECT coalesce(sum(idx_scan), 0)::bigint FROM pg_stat_user_tables
WHERE relid = 'widgets'::regclass OR relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'widgets'::regclass)`).Scan(&n)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return 0, fmt.Errorf("read idx_scan: %s: %w", pgErr.Code, err)
		}
		return 0, fmt.Errorf("read idx_scan: %w", err)
	}
	return n, nil
}

// flushPrefix deletes every Redis key under the harness's prefix.
func flushPrefix(ctx context.Context, rdb *redis.Client, prefix string) (int, error) {
	var cursor uint64
	n := 0
	for {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 5000).Result()
		if err != nil {
			return n, fmt.Errorf("scan %s*: %w", prefix, err)
		}
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return n, fmt.Errorf("unlink: %w", err)
			}
			n += len(keys)
		}
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
}

// cleanEnv is the harness's environment without WARMCACHE_* variables, so
// that the subprocesses see only what the harness sets.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WARMCACHE_") {
			env = append(env, kv)
		}
	}
	return env
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// process is a subprocess the harness started: the service, the floor,
// the peer or daprd.
type process struct {
	name string
	*localstack.Process
	log *os.File
}

// startProcess starts bin with args and env, pinned as the servers are,
// its output going to a log file in the artifact directory.
func (h *harness) startProcess(name, bin string, args, env []string) (*process, error) {
	logf, err := h.logFile(name)
	if err != nil {
		return nil, err
	}
	bin, args = h.pin.Server(bin, args)
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := localstack.Start(cmd)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &process{name: name, Process: p, log: logf}, nil
}

// serve starts bin/warmcache serve with env, pinned as the servers are,
// its output going to a log file in the artifact directory, and waits for
// its /readyz (localstack.Serve).
func (h *harness) serve(ctx context.Context, name string, env []string) (*process, error) {
	logf, err := h.logFile(name)
	if err != nil {
		return nil, err
	}
	s, err := localstack.Serve(ctx, h.opts.Bin, localstack.ServeOptions{Env: env, Stdout: logf, Stderr: logf, Wrap: h.pin.Server})
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: %w; see %s", name, err, logf.Name())
	}
	return &process{name: name, Process: s.Process, log: logf}, nil
}

// logFile creates the log file of the subprocess name.
func (h *harness) logFile(name string) (*os.File, error) {
	logf, err := os.Create(filepath.Join(h.opts.ArtifactDir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	return logf, nil
}

// stop sends SIGTERM and waits (bounded) for the process to exit.
func (p *process) stop() error {
	defer p.log.Close()
	if !p.Running() {
		return fmt.Errorf("%s exited early: %v", p.name, p.Err())
	}
	if err := p.Stop(syscall.SIGTERM, 20*time.Second); errors.Is(err, localstack.ErrNotStopped) {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}

// waitReady polls url until it answers 200, the process exits, or 30s
// pass.
func (p *process) waitReady(ctx context.Context, url string) error {
	return p.waitStatus(ctx, url, http.StatusOK, 30*time.Second)
}

// waitStatus polls url until it answers status, the process exits, or
// limit passes.
func (p *process) waitStatus(ctx context.Context, url string, status int, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err := p.WaitStatus(ctx, url, status, 100*time.Millisecond)
	if errors.Is(err, localstack.ErrExited) {
		return fmt.Errorf("%s exited before it was ready (%v); see %s", p.name, p.Err(), p.log.Name())
	}
	if err != nil {
		return fmt.Errorf("%s not ready: %w; see %s", p.name, err, p.log.Name())
	}
	return nil
}

// captureSlot is the replication slot of the services the harness starts
// with change capture (see options.Capture).
const captureSlot = "warmcache_loadtest"

// dropCaptureSlot drops the services' replication slot once they have
// stopped, so that it holds back no WAL after the run.
func (h *harness) dropCaptureSlot() {
	if !h.opts.Capture {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := h.database(ctx)
	if err != nil {
		h.note("replication slot %s not dropped: %v", captureSlot, err)
		return
	}
	defer conn.Close(ctx)
	// The last holder's walsender may take a moment to end.
	for try := 0; ; try++ {
		_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", captureSlot)
		if err == nil || try == 20 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		h.note("replication slot %s not dropped: %v", captureSlot, err)
	}
}

// database opens a connection to the harness's own database; the caller
// closes it.
func (h *harness) database(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, dsn(h.opts.PGHost, h.opts.Database))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", h.opts.Database, err)
	}
	return conn, nil
}
