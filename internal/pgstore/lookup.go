package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Lookup reads key. An absent key is an Entry with Found false and a nil
// error; a NULL value column of a JSON layout reads as the JSON null. Other
// errors are the warehouse's, wrapped; an unknown namespace wraps
// warmcache.ErrUnknownNamespace.
func (s *Store) Lookup(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key) (e warmcache.Entry, err error) {
	t, err := s.table(ns)
	if err != nil {
		return warmcache.Entry{}, err
	}
	defer func(start time.Time) { t.metrics[opLookup].observe(start, err) }(time.Now())
	r := t.entryRow()
	err = s.poolFor(t, key).QueryRow(ctx, t.stmts.Lookup, s.modes.Read, keyArg(ns, key)).Scan(r.dest...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return warmcache.Entry{}, nil
	case err != nil:
		return warmcache.Entry{}, fmt.Errorf("pgstore: lookup %s/%q: %w", ns.Name, key.Text, classify(err))
	}
	return r.entry(), nil
}

// LookupMany reads keys in one query. The result has the length and order of
// keys; absent keys have Found false. On PostgreSQL it calls the table's
// lookup function (LookupCall), whose plan each session keeps, or without
// one runs LookupPositions (a join of the array with the table, one index
// probe per key), or for one key Lookup's statement. On Greenplum one key
// is read with Lookup's statement (`= $1`), which is dispatched to the
// key's segment alone, and several with one `= ANY($1)` (see
// lookupManyGreenplum). Errors are as for Lookup.
func (s *Store) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) (entries []warmcache.Entry, err error) {
	t, err := s.table(ns)
	if err != nil {
		return nil, err
	}
	// Without a lookup function (always on Greenplum), one key is read
	// with Lookup's statement.
	if len(keys) == 1 && (t.stmts.LookupCall == "" || t.functionGone.Load()) {
		e, err := s.Lookup(ctx, ns, keys[0])
		if err != nil {
			return nil, err
		}
		return []warmcache.Entry{e}, nil
	}
	entries = make([]warmcache.Entry, len(keys))
	if len(keys) == 0 {
		return entries, nil
	}
	defer func(start time.Time) { t.metrics[opLookupMany].observe(start, err) }(time.Now())
	read := s.lookupPositions
	if s.dialect == dialect.Greenplum {
		read = s.lookupManyGreenplum
	}
	if err := read(ctx, t, keys, entries); err != nil {
		return nil, fmt.Errorf("pgstore: lookup %d keys in %s: %w", len(keys), ns.Name, classify(err))
	}
	return entries, nil
}

// lookupPositions reads keys into entries, each row at its key's
// position: with LookupCall, or LookupPositions when the table has no
// lookup function or it was dropped since the store opened.
func (s *Store) lookupPositions(ctx context.Context, t *table, keys []warmcache.Key, entries []warmcache.Entry) error {
	arg := keyArray(t.ns, keys)
	if t.stmts.LookupCall != "" && !t.functionGone.Load() {
		err := s.readPositions(ctx, t, t.stmts.LookupCall, arg, entries)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UndefinedFunction || !s.lookupFunctionGone(ctx, t) {
			return err
		}
		if t.functionGone.CompareAndSwap(false, true) {
			s.log.Warn("pgstore: the lookup function is gone; batched lookups are planned at every query until the service restarts and creates it again",
				"namespace", t.ns.Name, "function", t.stmts.lookupSignature)
		}
		clear(entries)
	}
	return s.readPositions(ctx, t, t.stmts.LookupPositions, arg, entries)
}

// readPositions runs sql, which returns a key's 1-based position in arg, its
// value and its version, and places each row in entries.
func (s *Store) readPositions(ctx context.Context, t *table, sql string, arg any, entries []warmcache.Entry) error {
	rows, err := s.pool.Query(ctx, sql, s.modes.Read, arg)
	if err != nil {
		return err
	}
	var pos int64
	r := t.entryRow(&pos)
	_, err = pgx.ForEachRow(rows, r.dest, func() error {
		if pos < 1 || pos > int64(len(entries)) {
			return fmt.Errorf("the warehouse answered position %d of %d keys", pos, len(entries))
		}
		entries[pos-1] = r.entry()
		return nil
	})
	return err
}
