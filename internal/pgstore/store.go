package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
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
	pool *pgxpool.Pool
	// lanes are the segment lanes on Greenplum (lanes.go); nil without.
	lanes   *lanes
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
	// lanes says that the table's single-key statements go through their
	// key's segment lane (Store.poolFor).
	lanes bool
}

// Dialect returns the dialect the server speaks.
func (s *Store) Dialect() dialect.Dialect { return s.dialect }

// ExecMode returns the exec mode of reads, as an Options.ExecMode value such
// as "cache_statement".
func (s *Store) ExecMode() string { return ExecModeName(s.modes.Read) }

// WriteExecMode returns the exec mode of writes, which differs from
// ExecMode on Greenplum with ExecMode "auto".
func (s *Store) WriteExecMode() string { return ExecModeName(s.modes.Write) }

// Pool returns the store's connection pool, for the tools that examine
// the warehouse as the store reads it (the doctor).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Table is one namespace's table as the store runs it.
type Table struct {
	Namespace *warmcache.Namespace
	// Statements are the statements the store runs now on the table:
	// without the lookup or the write function once the store has found it
	// dropped.
	Statements StatementSet
	// ReadMode is the exec mode of the store's reads.
	ReadMode pgx.QueryExecMode
}

// Tables returns the store's tables, in namespace name order.
func (s *Store) Tables() []Table {
	out := make([]Table, 0, len(s.tables))
	for _, t := range s.tables {
		st := t.stmts
		if t.functionGone.Load() {
			st.dropLookupFunction()
		}
		if t.writeFunctionGone.Load() {
			st.dropWriteFunction()
		}
		out = append(out, Table{Namespace: t.ns, Statements: st, ReadMode: s.modes.Read})
	}
	slices.SortFunc(out, func(a, b Table) int { return strings.Compare(a.Namespace.Name, b.Namespace.Name) })
	return out
}

// Close closes the pool, waiting for acquired connections to be released,
// and unregisters the store's metrics.
func (s *Store) Close() {
	for _, c := range s.collectors {
		s.reg.Unregister(c)
	}
	s.collectors = nil
	s.pool.Close()
	s.lanes.close()
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
