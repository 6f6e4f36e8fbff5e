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
