package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Searcher = (*Store)(nil)

// DefaultQueryTimeout is the statement timeout of a query whose context has
// no deadline.
const DefaultQueryTimeout = 30 * time.Second

// QueryStatements holds the SQL of a namespace's non-key query.
type QueryStatements struct {
	// First returns the rows whose value contains $1 (jsonb), ordered by
	// key, at most $2 of them: key, value as JSON text, version.
	First string
	// After is First for the keys greater than $3 (the key column's type).
	After string
}

// BuildQueryStatements returns the SQL of ns's non-key query. A packed
// value is compared as jsonb with @>, which a GIN index on the value column
// (jsonb_path_ops or jsonb_ops) serves; a json column is cast to jsonb,
// which no index serves. A columns-layout value is rebuilt as a jsonb object
// from its columns and compared, which scans the table. It needs no
// database and fails when the namespace is incomplete, or stores opaque
// bytes (an error that wraps warmcache.ErrInvalidValue).
func BuildQueryStatements(ns *warmcache.Namespace) (QueryStatements, error) {
	if err := checkNamespace(ns); err != nil {
		return QueryStatements{}, err
	}
	if ns.Layout == warmcache.LayoutBytes {
		return QueryStatements{}, fmt.Errorf("pgstore: namespace %q: %w: a bytes namespace holds no JSON to query", ns.Name, warmcache.ErrInvalidValue)
	}
	var (
		table   = tableIdent(ns.Table)
		key     = ident(ns.KeyColumn)
		version = ident(ns.VersionColumn)
	)
	doc := ident(ns.ValueColumn) + "::jsonb"
	if ns.Layout == warmcache.LayoutColumns {
		doc = "(" + valueExpr(ns, "") + ")::jsonb"
	}
	// Rows past their expiry are left out; the expiry comes last.
	expiry, live := "", ""
	if ns.ExpiresColumn != "" {
		exp := ident(ns.ExpiresColumn)
		expiry, live = ", "+exp, fmt.Sprintf(" AND (%s IS NULL OR %s > now())", exp, exp)
	}
	base := fmt.Sprintf("SELECT %s, %s, %s%s FROM %s WHERE %s @> $1::jsonb%s", key, valueExpr(ns, ""), version, expiry, table, doc, live)
	order := fmt.Sprintf(" ORDER BY %s LIMIT $2::integer", key)
	return QueryStatements{
		First: base + order,
		After: base + fmt.Sprintf(" AND %s > $3::%s", key, ns.KeyType) + order,
	}, nil
}

// Query returns at most limit rows of ns whose value contains match, a JSON
// object, ordered by key and after the key after when it is not nil. It
// runs in a read-only transaction whose statement_timeout (SET LOCAL, so
// that it works through PgBouncer in transaction pooling) is the time left
// before ctx's deadline, or DefaultQueryTimeout without one; a query that
// runs out of it fails with an error that wraps context.DeadlineExceeded.
// A match that is not valid JSON gives an error that wraps
// warmcache.ErrInvalidValue. Other errors are the warehouse's, wrapped; an
// unknown namespace wraps warmcache.ErrUnknownNamespace.
func (s *Store) Query(ctx context.Context, ns *warmcache.Namespace, match []byte, limit int, after *warmcache.Key) (rows []warmcache.QueryRow, err error) {
	t, err := s.table(ns)
	if err != nil {
		return nil, err
	}
	defer func(start time.Time) { t.metrics[opQuery].observe(start, err) }(time.Now())
	stmts, err := BuildQueryStatements(ns)
	if err != nil {
		return nil, err
	}
	timeout := DefaultQueryTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("pgstore: query %s: %w", ns.Name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // read-only: nothing to keep
	_, err = tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", pgx.QueryExecModeSimpleProtocol,
		strconv.FormatInt(max(timeout.Milliseconds(), 1), 10))
	if err != nil {
		return nil, fmt.Errorf("pgstore: query %s: statement timeout: %w", ns.Name, err)
	}
	var pgRows pgx.Rows
	if after == nil {
		pgRows, err = tx.Query(ctx, stmts.First, s.modes.Read, string(match), limit)
	} else {
		pgRows, err = tx.Query(ctx, stmts.After, s.modes.Read, string(match), limit, keyArg(ns, *after))
	}
	if err != nil {
		return nil, queryError(ns, err)
	}
	k := newRowKey(ns)
	r := t.entryRow(k.dest())
	_, err = pgx.ForEachRow(pgRows, r.dest, func() error {
		rows = append(rows, warmcache.QueryRow{Key: k.key(), Entry: r.entry()})
		return nil
	})
	if err != nil {
		return nil, queryError(ns, err)
	}
	return rows, nil
}

// queryError translates the errors of a query, classified once (see
// classify): the statement timeout also wraps context.DeadlineExceeded,
// and the server's data errors (bad JSON text, a number out of range, a
// NUL) wrap warmcache.ErrInvalidValue.
func queryError(ns *warmcache.Namespace, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.QueryCanceled {
		return fmt.Errorf("pgstore: query %s: statement timeout: %w: %w", ns.Name, warmcache.ErrUnavailable, context.DeadlineExceeded)
	}
	err = classify(err)
	if errors.Is(err, warmcache.ErrInvalidValue) || errors.Is(err, warmcache.ErrTooLarge) {
		return err
	}
	return fmt.Errorf("pgstore: query %s: %w", ns.Name, err)
}
