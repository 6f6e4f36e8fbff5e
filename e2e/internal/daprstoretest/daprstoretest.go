// Package daprstoretest starts warmcache serving its Dapr pluggable state
// store on real tiers (a warehouse database that the test made, and the
// test Redis), for the tests that drive the store as daprd does.
package daprstoretest

import (
	"bytes"
	"context"
	"log/slog"

	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/gateway"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
)

// Namespace is the namespace the store serves: text keys and opaque byte
// values, as a Dapr state store needs.
const Namespace = "daprstate"

// Component is the component name it is served under, the default one.
const Component = "warmcache-state"

// Server is a running warmcache.
type Server struct {
	// Socket is the pluggable component's socket.
	Socket  string
	Gateway *gateway.Gateway
}

// Start migrates the warehouse database at dsn, then serves warmcache on
// it and the test Redis with the pluggable component on a socket of its
// own, until the test ends. args add command-line flags of serve.
func Start(tb testing.TB, dsn string, args ...string) *Server {
	tb.Helper()
	dir, err := os.MkdirTemp("", "wc-dapr-") // short: a socket path is at most 107 bytes
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "namespaces.yaml")
	if err := os.WriteFile(file, []byte(harness.NamespacesYAML(harness.BytesNamespace(Namespace, "dapr_state", harness.Writable()...))), 0o600); err != nil {
		tb.Fatal(err)
	}
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN":    dsn,
		"WARMCACHE_NAMESPACES_FILE": file,
		"WARMCACHE_REDIS_ADDRS":     testenv.RedisAddr(tb),
		"WARMCACHE_REDIS_PREFIX":    "daprstore-" + testenv.RandomSuffix(tb) + ":",
		"WARMCACHE_HOT_TIMEOUT":     "1s",
		// Writes go through the component: polling suffices, and leaves no
		// replication slot for the database's drop to race with.
		"WARMCACHE_FRESHNESS":          "poll",
		"WARMCACHE_DAPR_COMPONENTS":    Component + "=" + Namespace,
		"WARMCACHE_DAPR_SOCKET_FOLDER": filepath.Join(dir, "sockets"),
	}
	args = append([]string{"--http-addr", "127.0.0.1:0", "--grpc-addr", ""}, args...)
	cfg, err := config.Load(config.ServeCommand, args, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		tb.Fatalf("config: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	migrate(ctx, tb, cfg)

	out := &announcer{seen: make(chan struct{}), want: "pluggable state store"}
	g, err := gateway.Open(ctx, cfg, gateway.Options{Stdout: out, SkipDoctor: true})
	if err != nil {
		tb.Fatalf("gateway.Open: %v", err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(serveCtx) }()
	tb.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			tb.Errorf("Serve: %v", err)
		}
		if err := g.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	select {
	case <-out.seen:
	case err := <-served:
		served <- err
		tb.Fatalf("Serve returned before the pluggable component was served: %v", err)
	case <-ctx.Done():
		tb.Fatalf("the pluggable component was not announced: %q", out.String())
	}
	return &Server{Socket: cfg.Dapr.SocketPath(), Gateway: g}
}

// migrate creates the namespaces' tables.
func migrate(ctx context.Context, tb testing.TB, cfg config.Config) {
	tb.Helper()
	conn, err := pgx.Connect(ctx, cfg.Postgres.DSN)
	if err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, err := schema.OpenMigrator(ctx, conn, cfg.Tables, slog.New(slog.DiscardHandler))
	if err == nil {
		_, err = m.Up(ctx)
	}
	if err != nil {
		tb.Fatalf("migrate: %v", err)
	}
}

// announcer is the gateway's stdout: it closes seen once a line that
// contains want is written.
type announcer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	done bool
}

func (a *announcer) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.buf.Write(p)
	if !a.done && strings.Contains(a.buf.String(), a.want) {
		a.done = true
		close(a.seen)
	}
	return len(p), nil
}

func (a *announcer) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.String()
}
