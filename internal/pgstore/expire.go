package pgstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Expirer = (*Store)(nil)

// DeleteExpired implements warmcache.Expirer: it deletes at most limit
// rows of ns whose expiry has passed and returns their keys with the
// absent entries of their deletes. It first reads the keys of expired rows
// through the expiry column's index (ExpiredKeys), outside any
// transaction; then it deletes them as a Write of their deletes would: in
// one transaction that takes the table's lock shared and each key's write
// lock, in the order of their hashes, and draws the versions once they
// are held, so that it orders with the service's writes of the same keys.
// The delete itself is by key list (`key = ANY($1)`), each key's row only
// while it is still past its expiry: a key written again since the first
// read, by the service or by a writer outside it, keeps its new row. On
// Greenplum a key list is dispatched only to the segments that hold its
// keys, and an append-optimized table's rows are moved to their delete's
// version and then deleted, as its deletes are. A namespace without an
// expiry column deletes nothing. Errors are the warehouse's, wrapped; an
// unknown namespace wraps warmcache.ErrUnknownNamespace.
func (s *Store) DeleteExpired(ctx context.Context, ns *warmcache.Namespace, limit int) (keys []warmcache.Key, entries []warmcache.Entry, err error) {
	t, err := s.table(ns)
	if err != nil {
		return nil, nil, err
	}
	if !t.stmts.Expiring || limit <= 0 {
		return nil, nil, nil
	}
	candidates, err := s.expiredKeys(ctx, t, limit)
	if err != nil || len(candidates) == 0 {
		return nil, nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: delete expired rows of %s: connect: %w", ns.Name, classify(err))
	}
	defer conn.Release()
	defer func() {
		if err != nil {
			rollback(ctx, conn)
		}
	}()
	writes := make([]warmcache.Write, len(candidates))
	for i, k := range candidates {
		writes[i] = warmcache.Write{Key: k, Delete: true}
	}
	versions, err := s.begin(ctx, conn, t, writes)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: delete expired rows of %s: lock: %w", ns.Name, classify(err))
	}
	next := versions[len(versions)-1]
	arg := keyArray(ns, candidates)
	sql := t.stmts.DeleteExpired
	if t.stmts.AppendOptimized {
		sql = t.stmts.RetireExpired
	}
	rows, err := conn.Query(ctx, sql, s.modes.Write, arg, next)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: delete expired rows of %s: %w", ns.Name, classify(err))
	}
	keys, entries, err = collectDeleted(ns, rows)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: delete expired rows of %s: %w", ns.Name, classify(err))
	}
	if t.stmts.AppendOptimized && len(keys) > 0 {
		if _, err = conn.Exec(ctx, t.stmts.RemoveExpired, s.modes.Write, arg); err != nil {
			return nil, nil, fmt.Errorf("pgstore: delete expired rows of %s: %w", ns.Name, classify(err))
		}
	}
	if _, err = conn.Exec(ctx, "COMMIT", s.modes.Write); err != nil {
		return nil, nil, fmt.Errorf("pgstore: delete expired rows of %s: commit: %w", ns.Name, classify(err))
	}
	return keys, entries, nil
}

// expiredKeys reads the keys of at most limit rows of t past their expiry.
func (s *Store) expiredKeys(ctx context.Context, t *table, limit int) ([]warmcache.Key, error) {
	rows, err := s.pool.Query(ctx, t.stmts.ExpiredKeys, s.modes.Read, limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: find expired rows of %s: %w", t.ns.Name, classify(err))
	}
	var keys []warmcache.Key
	if t.ns.KeyType == warmcache.KeyBigint {
		ints, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		for _, n := range ints {
			keys = append(keys, warmcache.Key{Text: strconv.FormatInt(n, 10), Int: n})
		}
		if err != nil {
			return nil, fmt.Errorf("pgstore: find expired rows of %s: %w", t.ns.Name, classify(err))
		}
		return keys, nil
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pgstore: find expired rows of %s: %w", t.ns.Name, classify(err))
	}
	for _, k := range texts {
		keys = append(keys, warmcache.Key{Text: k})
	}
	return keys, nil
}

// collectDeleted reads the rows of DeleteExpired or RetireExpired: each
// deleted key and the version of its delete.
func collectDeleted(ns *warmcache.Namespace, rows pgx.Rows) ([]warmcache.Key, []warmcache.Entry, error) {
	var (
		keys    []warmcache.Key
		entries []warmcache.Entry
		version int64
	)
	k := newRowKey(ns)
	_, err := pgx.ForEachRow(rows, []any{k.dest(), &version}, func() error {
		keys, entries = append(keys, k.key()), append(entries, warmcache.Entry{Version: version})
		return nil
	})
	return keys, entries, err
}
