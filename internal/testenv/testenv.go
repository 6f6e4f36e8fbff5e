// Package testenv gives integration tests real servers: PostgreSQL, PgBouncer,
// Redis and Greenplum, and a real daprd (Daprd). Each comes from an
// environment variable when it is set
// (CI may set them; `make test` sets the others to the servers of
// internal/localstack); otherwise, where a
// Docker engine is available, testcontainers-go starts PostgreSQL or Redis
// for the test. A test that can get neither is skipped with the reason,
// except under CI=true, where it fails (see Unavailable): a missing server
// must never pass as "ok".
//
//	WARMCACHE_TEST_POSTGRES_DSN   a PostgreSQL server, any database
//	WARMCACHE_TEST_PGBOUNCER_DSN  a PgBouncer in transaction pooling in front of it
//	WARMCACHE_TEST_REDIS_ADDR     a Redis server, host:port
//	WARMCACHE_TEST_GREENPLUM_DSN  a Greenplum 7 coordinator, any database
//	WARMCACHE_TEST_DAPRD          a daprd 1.17 binary, for the real-daprd lane
//
// The Greenplum lane (see Warehouses) runs the warehouse tests on both
// PostgreSQL and Greenplum. Without WARMCACHE_TEST_GREENPLUM_DSN its tests
// are skipped, saying why, unless CI=true and the Greenplum kit
// (shared/greenplum/up.sh in a directory above the module) is on the
// machine: then the variable should have been set, and they fail. The
// real-daprd lane (e2e/daprd) takes daprd from WARMCACHE_TEST_DAPRD or the
// daprd kit beside the project, and is left out, saying so, where neither
// is.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"

	"github.com/warmcache/warmcache/internal/localstack"
)

// The environment variables that name the servers. `make test` sets the
// first three to the local stack's (localstack.Config.TestEnv).
const (
	EnvPostgres  = localstack.EnvTestPostgres
	EnvPgBouncer = localstack.EnvTestPgBouncer
	EnvRedis     = localstack.EnvTestRedis
	EnvGreenplum = localstack.EnvTestGreenplum
	EnvDaprd     = localstack.EnvTestDaprd
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
		Unavailable(tb, "testenv: %s is not set and no PostgreSQL container could start: %v", EnvPostgres, err)
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
	return newDatabaseOn(tb, PostgresServer(tb), EnvPostgres, "DROP DATABASE IF EXISTS %s WITH (FORCE)")
}

// newDatabaseOn creates a database on server and drops it with dropSQL
// (a format with the database name) when the test ends.
func newDatabaseOn(tb testing.TB, server, env, dropSQL string) string {
	tb.Helper()
	name := "wc_test_" + RandomSuffix(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		tb.Fatalf("testenv: connect %s: %v", env, err)
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
		if env == EnvGreenplum {
			// Greenplum 7 (PostgreSQL 12) has no DROP DATABASE ... WITH
			// (FORCE): end the sessions left on it first.
			_, _ = conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(dropSQL, name)); err != nil {
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
		Unavailable(tb, "testenv: %s is not set; PgBouncer tests run against the local stack (make test)", EnvPgBouncer)
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
		Unavailable(tb, "testenv: %s is not set and no Redis container could start: %v", EnvRedis, err)
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

// EnvCI is the variable that CI systems set to "true". Under it, a test whose
// server or program is missing fails instead of skipping.
const EnvCI = "CI"

// Unavailable reports that something a test needs (a server, a program, a
// user account) is missing on this machine. The test is skipped with the
// reason, or, when CI=true, fails with it: in CI the suite runs for real, and
// a skip would print "ok" over a missing server.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if InCI() {
		tb.Fatalf(format+" (fatal because %s=true)", append(args, EnvCI)...)
	}
	tb.Skipf(format, args...)
}

// InCI reports whether the suite runs under CI=true.
func InCI() bool { return os.Getenv(EnvCI) == "true" }

// GreenplumServer returns the DSN of a Greenplum coordinator that the test
// may create databases on, from WARMCACHE_TEST_GREENPLUM_DSN. Without it the
// test is skipped, saying why, except under CI=true on a machine that has
// the Greenplum kit (shared/greenplum/up.sh in a directory above the
// module root), where it fails: there the lane must run.
func GreenplumServer(tb testing.TB) string {
	tb.Helper()
	if dsn := os.Getenv(EnvGreenplum); dsn != "" {
		return dsn
	}
	kit, found := greenplumKit()
	switch {
	case found && InCI():
		tb.Fatalf("testenv: CI=true and the Greenplum kit %s is on this machine, but %s is not set; "+
			"start the cluster with %s and export the DSN it prints last", kit, EnvGreenplum, kit)
	case found:
		tb.Skipf("testenv: %s is not set; the Greenplum kit is at %s: export %s=\"$(%s | tail -n1)\" to run this lane",
			EnvGreenplum, kit, EnvGreenplum, kit)
	default:
		tb.Skipf("testenv: %s is not set and this machine has no Greenplum kit (%s); the Greenplum lane is left out", EnvGreenplum, kit)
	}
	return ""
}

// greenplumKit returns where the Greenplum kit's up.sh is (see kit).
func greenplumKit() (string, bool) { return kit("shared/greenplum/up.sh") }

// kit returns where rel, a file of a kit beside the project, is: in a
// directory above the module root (the directory of go.mod, found upward
// from the working directory), its parent, grandparent or
// great-grandparent, as .ci/run looks for it. It reports whether one was
// found; if not, the path names the nearest place.
func kit(rel string) (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "../" + rel, false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "../" + rel, false
		}
		dir = parent
	}
	nearest := filepath.Join(filepath.Dir(dir), rel)
	for range 3 {
		dir = filepath.Dir(dir)
		kit := filepath.Join(dir, rel)
		if _, err := os.Stat(kit); err == nil {
			return kit, true
		}
	}
	return nearest, false
}

// Daprd returns the path of a daprd binary: WARMCACHE_TEST_DAPRD when it
// is set (.ci/run sets it from the kit beside the project, since it tests
// a clone elsewhere), or else what the daprd kit (shared/dapr/daprd.sh in a
// directory above the module root, which unpacks daprd once) prints.
// Without either the test is skipped, saying so, as the Greenplum lane is:
// the kit is a tool beside the project. Under CI=true with the kit on the
// machine, it runs; a kit that fails, or a path that is not a file, fails
// the test.
func Daprd(tb testing.TB) string {
	tb.Helper()
	path := os.Getenv(EnvDaprd)
	source := EnvDaprd
	if path == "" {
		script, found := kit("shared/dapr/daprd.sh")
		if !found {
			tb.Skipf("testenv: %s is not set and this machine has no daprd kit (%s); the real-daprd lane is left out", EnvDaprd, script)
		}
		out, err := exec.Command(script).Output()
		if err != nil {
			var stderr []byte
			if exit, ok := err.(*exec.ExitError); ok {
				stderr = exit.Stderr
			}
			tb.Fatalf("testenv: the daprd kit %s failed: %v\n%s", script, err, stderr)
		}
		path, source = strings.TrimSpace(string(out)), "the daprd kit "+script
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		tb.Fatalf("testenv: %s names %q, which is not a file: %v", source, path, err)
	}
	return path
}

// NewGreenplumDatabase creates a fresh, empty database on the Greenplum
// server (see GreenplumServer) and returns its DSN. The database is dropped
// when the test ends. The coordinator takes 100 connections in all and
// opening one is slow (docs/warehouse.md#greenplum-measured), so tests keep
// their pools small.
func NewGreenplumDatabase(tb testing.TB) string {
	tb.Helper()
	return newDatabaseOn(tb, GreenplumServer(tb), EnvGreenplum, "DROP DATABASE IF EXISTS %s")
}

// Warehouse is a SQL server that the warehouse-facing tests run on:
// PostgreSQL or Greenplum.
type Warehouse struct {
	// Name is "postgres" or "greenplum", the name of the dialect.
	Name string
	// Greenplum says whether the server is Greenplum.
	Greenplum bool
}

// Warehouses returns the servers the warehouse tests run on, PostgreSQL
// then Greenplum, so that one table-driven test holds both dialects to the
// same assertions:
//
//	for _, w := range testenv.Warehouses() {
//		t.Run(w.Name, func(t *testing.T) { dsn := w.NewDatabase(t); ... })
//	}
func Warehouses() []Warehouse {
	return []Warehouse{{Name: "postgres"}, {Name: "greenplum", Greenplum: true}}
}

// Server returns the DSN of the warehouse server: PostgresServer or
// GreenplumServer, which skip or fail as they say.
func (w Warehouse) Server(tb testing.TB) string {
	tb.Helper()
	if w.Greenplum {
		return GreenplumServer(tb)
	}
	return PostgresServer(tb)
}

// NewDatabase creates a fresh database on the warehouse server and returns
// its DSN; it is dropped when the test ends.
func (w Warehouse) NewDatabase(tb testing.TB) string {
	tb.Helper()
	if w.Greenplum {
		return NewGreenplumDatabase(tb)
	}
	return NewDatabase(tb)
}
