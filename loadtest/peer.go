package main

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

// The peer is the cache-aside a user would write by hand instead of
// adopting warmcache: a chi handler that GETs the key from Redis and, on a
// miss, reads the row from PostgreSQL with its own pgx pool and SETs it.
// It has none of warmcache's guarantees (no versions, no stampede
// protection, no negative caching, no breaker); it is the reference that
// warmcache's hits and misses are held against.
func newPeerHandler(rdb *redis.Client, pool *pgxpool.Pool, prefix string, ttl time.Duration) http.Handler {
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

// servePeer runs `loadtest peer -addr HOST:PORT -redis HOST:PORT -postgres
// DSN -prefix P` until ctx is cancelled.
func servePeer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest peer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback)")
	redisAddr := fs.String("redis", "127.0.0.1:6379", "Redis address")
	pgDSN := fs.String("postgres", "", "PostgreSQL DSN (direct)")
	prefix := fs.String("prefix", "peer:", "Redis key prefix")
	conns := fs.Int("conns", 32, "PostgreSQL pool size and Redis pool size")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := requireLoopback(*addr); err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(*pgDSN)
	if err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	cfg.MaxConns = int32(*conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	defer pool.Close()
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: *conns})
	defer rdb.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("peer: listen: %w", err)
	}
	srv := floorServer(newPeerHandler(rdb, pool, *prefix, 10*time.Minute), stderr)
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
