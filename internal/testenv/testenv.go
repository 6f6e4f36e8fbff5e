// Package testenv gives integration tests real servers: PostgreSQL, PgBouncer
// and Redis. Each comes from an environment variable when it is set (CI and
// `make test` set them from the local stack); otherwise, where a Docker engine
// is available, testcontainers-go starts one for the test. A test that can
// get neither is skipped with the reason.
//
//	WARMCACHE_TEST_POSTGRES_DSN   a PostgreSQL server, any database
//	WARMCACHE_TEST_PGBOUNCER_DSN  a PgBouncer in transaction pooling in front of it
//	WARMCACHE_TEST_REDIS_ADDR     a Redis server, host:port
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// The environment variables that name the servers.
const (
	EnvPostgres  = "WARMCACHE_TEST_POSTGRES_DSN"
	EnvPgBouncer = "WARMCACHE_TEST_PGBOUNCER_DSN"
	EnvRedis     = "WARMCACHE_TEST_REDIS_ADDR"
)

// PostgresServer returns a DSN of a PostgreSQL server that the test may
// create databases on.
func PostgresServer(tb testing.TB) string {
	tb.Helper()
	if dsn := os.Getenv(EnvPostgres); dsn != "" {
		return dsn
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("postgres"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies())
	testcontainers.CleanupContainer(tb, c)
	if err != nil {
		tb.Skipf("testenv: %s is not set and no PostgreSQL container could start: %v", EnvPostgres, err)
	}
	dsn, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		tb.Fatalf("testenv: postgres container: %v", err)
	}
	return dsn
}

// NewDatabase creates a fresh, empty database on the PostgreSQL server and
// returns its DSN. The database is dropped when the test ends.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	server := PostgresServer(tb)
	name := "wc_test_" + RandomSuffix(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		tb.Fatalf("testenv: connect %s: %v", EnvPostgres, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("testenv: create database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, server)
		if err != nil {
			tb.Errorf("testenv: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	return WithDatabase(tb, server, name)
}

// PgBouncerDSN returns a DSN that reaches database (on the server of
// PostgresServer) through PgBouncer in transaction pooling. The test is
// skipped when no PgBouncer is configured.
func PgBouncerDSN(tb testing.TB, database string) string {
	tb.Helper()
	dsn := os.Getenv(EnvPgBouncer)
	if dsn == "" {
		tb.Skipf("testenv: %s is not set; PgBouncer tests run against the local stack (make test)", EnvPgBouncer)
	}
	return WithDatabase(tb, dsn, database)
}

// DatabaseName returns the database a DSN names.
func DatabaseName(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("testenv: parse dsn: %v", err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// WithDatabase returns dsn with its database replaced by name.
func WithDatabase(tb testing.TB, dsn, name string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("testenv: parse dsn: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// RedisAddr returns the host:port of a Redis server. Tests share it, so each
// must use its own key prefix (see RandomSuffix).
func RedisAddr(tb testing.TB) string {
	tb.Helper()
	if addr := os.Getenv(EnvRedis); addr != "" {
		return addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := tcredis.Run(ctx, "redis:7-alpine")
	testcontainers.CleanupContainer(tb, c)
	if err != nil {
		tb.Skipf("testenv: %s is not set and no Redis container could start: %v", EnvRedis, err)
	}
	uri, err := c.ConnectionString(ctx)
	if err != nil {
		tb.Fatalf("testenv: redis container: %v", err)
	}
	u, err := url.Parse(uri)
	if err != nil {
		tb.Fatalf("testenv: redis container address %q: %v", uri, err)
	}
	return u.Host
}

// RandomSuffix returns 12 random lowercase hex characters, for names that
// must not collide between tests.
func RandomSuffix(tb testing.TB) string {
	tb.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("testenv: random: %v", err)
	}
	return hex.EncodeToString(b[:])
}
