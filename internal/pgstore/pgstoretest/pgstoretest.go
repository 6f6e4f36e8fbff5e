// Package pgstoretest holds what the tests of pgstore and of its doctor do
// to a real database: create one with a schema, run SQL on it, hold a
// connection to it, and bound the test's calls in time. It works on DSNs
// from testenv and on pgx alone, so that pgstore's in-package tests may
// import it as well as its external ones.
package pgstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/testenv"
)

// Timeout bounds each of the helpers' calls, and the context of Context.
const Timeout = 30 * time.Second

// WidgetsSchema creates the version sequence and widgets, a table of
// bigint keys, jsonb values and versions, hash-partitioned four ways: the
// table of a packed namespace named widgets.
const WidgetsSchema = `
CREATE SEQUENCE warmcache_version_seq;
CREATE TABLE widgets (key bigint, value jsonb NOT NULL, version bigint NOT NULL, PRIMARY KEY (key)) PARTITION BY HASH (key);
CREATE TABLE widgets_p0 PARTITION OF widgets FOR VALUES WITH (MODULUS 4, REMAINDER 0);
CREATE TABLE widgets_p1 PARTITION OF widgets FOR VALUES WITH (MODULUS 4, REMAINDER 1);
CREATE TABLE widgets_p2 PARTITION OF widgets FOR VALUES WITH (MODULUS 4, REMAINDER 2);
CREATE TABLE widgets_p3 PARTITION OF widgets FOR VALUES WITH (MODULUS 4, REMAINDER 3);
`

// Context returns a context that ends after Timeout, or with the test.
func Context(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	tb.Cleanup(cancel)
	return ctx
}

// NewDatabase creates a fresh PostgreSQL database (testenv.NewDatabase),
// runs schema on it and returns its DSN. The database is dropped when the
// test ends.
func NewDatabase(tb testing.TB, schema string) string {
	tb.Helper()
	dsn := testenv.NewDatabase(tb)
	Exec(tb, dsn, schema)
	return dsn
}

// Exec runs sql with args on the database of dsn, and fails the test if it
// fails.
func Exec(tb testing.TB, dsn, sql string, args ...any) {
	tb.Helper()
	WithConn(tb, dsn, func(ctx context.Context, conn *pgx.Conn) {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			tb.Fatalf("exec %q: %v", sql, err)
		}
	})
}

// WithConn runs use with a connection to the database of dsn and a context
// that ends after Timeout; the connection is closed when use returns.
func WithConn(tb testing.TB, dsn string, use func(ctx context.Context, conn *pgx.Conn)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	use(ctx, conn)
}
