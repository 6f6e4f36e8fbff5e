package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Warm = (*Store)(nil)

// Store is the warm tier over a pgx connection pool: it reads and writes the
// namespaces' tables on PostgreSQL or Greenplum, directly or through
// PgBouncer. A Store is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	dialect dialect.Dialect
	modes   ExecModes
	tables  map[string]*table
	// loadTimeout is Options.LoadStatementTimeout.
	loadTimeout time.Duration
	reg         prometheus.Registerer
	collectors  []prometheus.Collector
	log         *slog.Logger
}

// table is one namespace's statements and metrics.
type table struct {
	ns      *warmcache.Namespace
	stmts   StatementSet
	metrics [numOps]opMetrics
	// functionGone is set when the lookup function was dropped while the
	// store ran: reads go on with LookupPositions until a restart creates
	// the function again.
	functionGone atomic.Bool
	// writeFunctionGone is functionGone for the write function: writes go
	// on in transactions of their own.
	writeFunctionGone atomic.Bool
	// maxRow bounds a row's key and value, in bytes, on a table whose
	// rows must fit one block of Greenplum's append-optimized row storage
	// (see dialect.RowBlockSize and checkRow). Zero means no bound.
	maxRow int
}

// rowOverhead is what a row of an append-optimized row table takes in its
// block besides its key and value: the tuple and block headers, the
// version and the alignment. Measured on Greenplum 7 with the default
// 32 KiB block, a bytea value of 32,700 bytes under a one-byte key was
// found by key and one of 32,740 bytes was not; the bound keeps a margin.
const rowOverhead = 256

// checkRow refuses a row whose key and value are over maxRow bytes (when
// maxRow is not zero) with an error that wraps warmcache.ErrTooLarge: on an
// append-optimized row table such a row spans blocks, and key lookups
// would not find it. A JSON value is counted as its text; jsonb may store
// it larger.
func checkRow(ns *warmcache.Namespace, maxRow int, key warmcache.Key, value []byte) error {
	if maxRow > 0 && len(key.Text)+len(value) > maxRow {
		return fmt.Errorf("%w: namespace %q: a key and value of more than %d bytes do not fit one block of its append-optimized row table, where lookups by key would not find them; store large values in a heap or column-oriented table",
			warmcache.ErrTooLarge, ns.Name, maxRow)
	}
	return nil
}

// Dialect returns the dialect the server speaks.
func (s *Store) Dialect() dialect.Dialect { return s.dialect }

// ExecMode returns the exec mode of reads, as an Options.ExecMode value such
// as "cache_statement".
func (s *Store) ExecMode() string { return ExecModeName(s.modes.Read) }

// WriteExecMode returns the exec mode of writes, which differs from
// ExecMode on Greenplum with ExecMode "auto".
func (s *Store) WriteExecMode() string { return ExecModeName(s.modes.Write) }

// Close closes the pool, waiting for acquired connections to be released,
// and unregisters the store's metrics.
func (s *Store) Close() {
	for _, c := range s.collectors {
		s.reg.Unregister(c)
	}
	s.collectors = nil
	s.pool.Close()
}

// Ping reports whether the warehouse answers, through a pooled connection.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("pgstore: ping: %w", classify(err))
	}
	return nil
}

// keyArray returns keys as the array parameter of ns's key type: []int64
// for bigint keys, []string for text keys.
func keyArray(ns *warmcache.Namespace, keys []warmcache.Key) any {
	if ns.KeyType == warmcache.KeyBigint {
		ints := make([]int64, len(keys))
		for i, k := range keys {
			ints[i] = k.Int
		}
		return ints
	}
	texts := make([]string, len(keys))
	for i, k := range keys {
		texts[i] = k.Text
	}
	return texts
}

// table returns the statements of ns, or an error that wraps
// warmcache.ErrUnknownNamespace when the store was not opened with it.
func (s *Store) table(ns *warmcache.Namespace) (*table, error) {
	t, ok := s.tables[ns.Name]
	if !ok {
		return nil, fmt.Errorf("pgstore: %w: %q", warmcache.ErrUnknownNamespace, ns.Name)
	}
	return t, nil
}

// keyArg returns key as the Go value of the key column's type.
func keyArg(ns *warmcache.Namespace, key warmcache.Key) any {
	if ns.KeyType == warmcache.KeyBigint {
		return key.Int
	}
	return key.Text
}

// valueArg returns value as the parameter of ns's value column: text for
// the JSON layouts, which the statements cast to json or jsonb, and bytes,
// never nil (pgx sends a nil slice as NULL), for the bytes layout's bytea.
func valueArg(ns *warmcache.Namespace, value []byte) any {
	if ns.Layout != warmcache.LayoutBytes {
		return string(value)
	}
	if value == nil {
		return []byte{}
	}
	return value
}

// dest returns the scan destinations of a statement of t that returns
// cols, followed by the row's expiry when the table has an expiry column
// (see StatementSet.Expiring).
func (t *table) dest(expires **time.Time, cols ...any) []any {
	if t.stmts.Expiring {
		return append(cols, expires)
	}
	return cols
}

// expiresAt returns a row's expiry column as Entry.ExpiresAt: zero for
// NULL (never). It is cut to the millisecond, the precision every tier
// keeps, so that all of them agree on it: a row written elsewhere with a
// finer expiry reads as absent up to a millisecond early.
func expiresAt(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Truncate(time.Millisecond)
}

// jsonValue turns an SQL NULL value into the JSON null. The bytes layout
// reads a NULL as no bytes (see valueExpr), so its values never are nil.
func jsonValue(b []byte) []byte {
	if b == nil {
		return []byte("null")
	}
	return b
}

// isRequestError reports whether err is an answer about the request rather
// than a failure of the warehouse.
func isRequestError(err error) bool {
	return warmcache.Classify(err) == warmcache.ClassClient
}
