package pgstore_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/pgstore/pgstoretest"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Warm = (*pgstore.Store)(nil)

// schema creates the tables of the test namespaces: a hash-partitioned
// packed table with bigint keys, a packed table with text keys, and a
// columns-layout table.
const schema = pgstoretest.WidgetsSchema + `
CREATE SCHEMA app;
CREATE TABLE app.sessions (id text PRIMARY KEY, doc jsonb NOT NULL, version bigint NOT NULL);
CREATE TABLE people (id bigint PRIMARY KEY, name text NOT NULL, age integer, tags jsonb, version bigint NOT NULL);
`

func widgetsNamespace() *warmcache.Namespace {
	return &warmcache.Namespace{
		Name: "widgets", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true,
	}
}

func sessionsNamespace() *warmcache.Namespace {
	return &warmcache.Namespace{
		Name: "sessions", Table: "app.sessions", KeyColumn: "id", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutPacked, ValueColumn: "doc", VersionColumn: "version", Writable: true,
	}
}

func peopleNamespace() *warmcache.Namespace {
	return &warmcache.Namespace{
		Name: "people", Table: "people", KeyColumn: "id", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutColumns,
		Columns: []warmcache.Column{
			{Name: "name", Type: "text"},
			{Name: "age", Type: "integer"},
			{Name: "tags", Type: "jsonb"},
		},
		VersionColumn: "version", Writable: true,
	}
}

// target is a way to reach the server: directly or through PgBouncer, with
// an exec mode.
type target struct {
	name      string
	pgbouncer bool
	execMode  string
	// wantMode is the effective read exec mode.
	wantMode string
}

// targets are the ways each integration test runs: the recommended mode of
// each path, plus the never-preparing modes that Greenplum reads use.
func targets() []target {
	return []target{
		{name: "direct/cache_statement", execMode: "cache_statement", wantMode: "cache_statement"},
		{name: "direct/auto", wantMode: "cache_statement"},
		{name: "direct/simple_protocol", execMode: "simple_protocol", wantMode: "simple_protocol"},
		{name: "direct/exec", execMode: "exec", wantMode: "exec"},
		{name: "pgbouncer/auto", pgbouncer: true, wantMode: "cache_describe"},
	}
}

// eachTarget runs test once per target, as subtests.
func eachTarget(t *testing.T, test func(t *testing.T, tg target)) {
	t.Helper()
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) { test(t, tg) })
	}
}

// newDatabase, execSQL, withConn and testContext are pgstoretest's, under
// the names this package's tests call them by.
func newDatabase(tb testing.TB, schema string) string {
	tb.Helper()
	return pgstoretest.NewDatabase(tb, schema)
}

func execSQL(tb testing.TB, dsn, sql string, args ...any) {
	tb.Helper()
	pgstoretest.Exec(tb, dsn, sql, args...)
}

func withConn(tb testing.TB, dsn string, use func(ctx context.Context, conn *pgx.Conn)) {
	tb.Helper()
	pgstoretest.WithConn(tb, dsn, use)
}

func testContext(tb testing.TB) context.Context {
	tb.Helper()
	return pgstoretest.Context(tb)
}

// options returns the options that reach the database of dsn as tg says.
func options(tb testing.TB, dsn string, tg target) pgstore.Options {
	tb.Helper()
	opts := pgstore.Options{DSN: dsn, ExecMode: pgstore.ExecMode(tg.execMode), MaxConns: 4}
	if tg.pgbouncer {
		opts.DSN = testenv.PgBouncerDSN(tb, testenv.DatabaseName(tb, dsn))
		opts.Pooler = pgstore.PoolerPgBouncer
	}
	return opts
}

// mustOpenStore opens a store on the database of dsn as tg says, and closes
// it when the test ends.
func mustOpenStore(tb testing.TB, dsn string, tg target, namespaces ...*warmcache.Namespace) *pgstore.Store {
	tb.Helper()
	s, err := openStore(tb, options(tb, dsn, tg), prometheus.NewRegistry(), namespaces...)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	if got := s.ExecMode(); got != tg.wantMode {
		tb.Errorf("ExecMode() = %q, want %q", got, tg.wantMode)
	}
	if s.Dialect() != dialect.Postgres {
		tb.Errorf("Dialect() = %v, want postgres", s.Dialect())
	}
	return s
}

// openStore opens a store and closes it when the test ends.
func openStore(tb testing.TB, opts pgstore.Options, reg prometheus.Registerer, namespaces ...*warmcache.Namespace) (*pgstore.Store, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := pgstore.Open(ctx, opts, namespaces, reg, log)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(s.Close)
	return s, nil
}

// key parses raw as a key of ns.
func key(tb testing.TB, ns *warmcache.Namespace, raw string) warmcache.Key {
	tb.Helper()
	k, err := ns.ParseKey(raw)
	if err != nil {
		tb.Fatalf("ParseKey(%q): %v", raw, err)
	}
	return k
}
