// Package peer is the cache-aside a user would write by hand instead of
// adopting warmcache: a chi handler that GETs the key from Redis and, on a
// miss, reads the row from the warehouse with its own pgx pool and SETs it.
// It has none of warmcache's guarantees (no versions, no stampede
// protection, no negative caching, no breaker); it is the reference that
// warmcache's hits and misses are held against, by the harness in
// loadtest/cmd/loadtest (PostgreSQL) and by loadtest/cmd/gpbench (Greenplum).
package peer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Handler answers GET /v1/kv/{namespace}/{key} from Redis under prefix,
// and on a miss from the widgets table (bigint key, JSON value), storing
// what it read for ttl. It answers X-Cache: hit or miss.
func Handler(rdb *redis.Client, pool *pgxpool.Pool, prefix string, ttl time.Duration) http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	r.Get("/v1/kv/{namespace}/{key}", func(w http.ResponseWriter, r *http.Request) {
		key := chi.URLParam(r, "key")
		id, err := strconv.ParseInt(key, 10, 64)
		if err != nil {
			http.Error(w, "bad key", http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		value, err := rdb.Get(ctx, prefix+key).Bytes()
		source := "hit"
		if errors.Is(err, redis.Nil) {
			source = "miss"
			err = pool.QueryRow(ctx, "SELECT value FROM widgets WHERE key = $1", id).Scan(&value)
			if errors.Is(err, pgx.ErrNoRows) {
				http.Error(w, "not found", http.StatusNotFound)
				return
			}
			if err == nil {
				err = rdb.Set(ctx, prefix+key, value, ttl).Err()
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Cache", source)
		_, _ = w.Write(value)
	})
	return r
}

// Config is what the peer connects to.
type Config struct {
	Redis    string // Redis host:port
	Postgres string // the warehouse's DSN
	Prefix   string // Redis key prefix
	Conns    int    // the pgx pool's and the Redis pool's size
}

// Open connects the peer's pools and returns its handler and a function
// that closes them.
func Open(ctx context.Context, c Config) (http.Handler, func(), error) {
	cfg, err := pgxpool.ParseConfig(c.Postgres)
	if err != nil {
		return nil, nil, fmt.Errorf("peer: %w", err)
	}
	cfg.MaxConns = int32(c.Conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("peer: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.Redis, PoolSize: c.Conns})
	closeAll := func() {
		_ = rdb.Close()
		pool.Close()
	}
	return Handler(rdb, pool, c.Prefix, 10*time.Minute), closeAll, nil
}

// Serve runs `peer -addr HOST:PORT -redis HOST:PORT -postgres DSN -prefix
// P -conns N` until ctx is cancelled: the peer in a process of its own, so
// that its CPU is measured, and pinned, on its own. It prints
// "peer: serving on http://HOST:PORT" once it listens.
func Serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback)")
	var c Config
	fs.StringVar(&c.Redis, "redis", "127.0.0.1:6379", "Redis address")
	fs.StringVar(&c.Postgres, "postgres", "", "the warehouse's DSN (direct)")
	fs.StringVar(&c.Prefix, "prefix", "peer:", "Redis key prefix")
	fs.IntVar(&c.Conns, "conns", 32, "the warehouse pool's and the Redis pool's size")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if host, _, err := net.SplitHostPort(*addr); err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("peer: -addr %q: want a loopback host:port", *addr)
	}
	h, closePeer, err := Open(ctx, c)
	if err != nil {
		return err
	}
	defer closePeer()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("peer: listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "peer: serving on http://%s\n", ln.Addr())
	select {
	case err := <-served:
		return fmt.Errorf("peer: %w", err)
	case <-ctx.Done():
	}
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.Shutdown(drainCtx)
}
