// Package pluggabletest starts warmcache serving its Dapr pluggable state
// store on real tiers (a warehouse database that the test made, and the
// test Redis), for the tests that drive the store as daprd does.
package pluggabletest

import (
	"context"
	"log/slog"
	"path/filepath"
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
// own (harness.Serve), until the test ends. args add command-line flags of
// serve.
func Start(tb testing.TB, dsn string, args ...string) *Server {
	tb.Helper()
	dir := harness.SocketDir(tb, "wc-dapr-")
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN": dsn,
		"WARMCACHE_NAMESPACES_FILE": harness.WriteFile(tb, "namespaces.yaml",
			harness.NamespacesYAML(harness.BytesNamespace(Namespace, "dapr_state", harness.Writable()...))),
		"WARMCACHE_REDIS_ADDRS":  testenv.RedisAddr(tb),
		"WARMCACHE_REDIS_PREFIX": "pluggable-" + testenv.RandomSuffix(tb) + ":",
		"WARMCACHE_HOT_TIMEOUT":  "1s",
		// Writes go through the component: polling suffices, and leaves no
		// replication slot for the database's drop to race with.
		"WARMCACHE_FRESHNESS":          "poll",
		"WARMCACHE_DAPR_COMPONENTS":    Component + "=" + Namespace,
		"WARMCACHE_DAPR_SOCKET_FOLDER": filepath.Join(dir, "sockets"),
	}
	args = append([]string{"--grpc-addr", ""}, args...)
	migrate(tb, harness.Config(tb, env, args...))
	// HTTP, the pluggable component, and without keys the open-access
	// notice.
	s := harness.Serve(tb, env, 3, args...)
	if s.DaprSocket == "" {
		tb.Fatalf("the pluggable component was not announced: %q", s.Lines)
	}
	return &Server{Socket: s.DaprSocket, Gateway: s.Gateway}
}

// migrate creates the namespaces' tables.
func migrate(tb testing.TB, cfg config.Config) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
