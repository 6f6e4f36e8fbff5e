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

// table returns the statements of ns, or an error that wraps
// warmcache.ErrUnknownNamespace when the store was not opened with it.
func (s *Store) table(ns *warmcache.Namespace) (*table, error) {
	t, ok := s.tables[ns.Name]
	if !ok {
		return nil, fmt.Errorf("pgstore: %w: %q", warmcache.ErrUnknownNamespace, ns.Name)
	}
	return t, nil
}

// isRequestError reports whether err is an answer about the request rather
// than a failure of the warehouse.
func isRequestError(err error) bool {
	return warmcache.Classify(err) == warmcache.ClassClient
}
