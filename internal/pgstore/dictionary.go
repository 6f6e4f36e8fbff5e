package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// DictionaryTable holds the hot tier's compression dictionaries; migration
// 0003 creates it.
const DictionaryTable = "warmcache_dictionaries"

// ErrNoDictionaryTable means the warehouse has no DictionaryTable: the
// migrations have not been applied up to version 3.
var ErrNoDictionaryTable = errors.New("table " + DictionaryTable + " does not exist (run warmcache migrate up)")

// Dictionary is a compression dictionary of one namespace, as the warehouse
// keeps it.
type Dictionary struct {
	Namespace string
	// ID identifies the dictionary within its namespace. It is the
	// dictionary's own zstd id, derived from its content.
	ID uint32
	// Data is the dictionary in zstd's format.
	Data []byte
	// CreatedAt is when the dictionary was stored, or stored again; the
	// newest dictionary of a namespace is the one that encodes.
	CreatedAt time.Time
}

const (
	dictionariesSQL = `SELECT namespace, id, dict, created_at FROM ` + DictionaryTable + `
ORDER BY namespace, created_at, id`
	// touchDictionarySQL makes a stored dictionary the newest again.
	touchDictionarySQL = `UPDATE ` + DictionaryTable + ` SET created_at = clock_timestamp()
WHERE namespace = $1::text AND id = $2::bigint RETURNING created_at`
	insertDictionarySQL = `INSERT INTO ` + DictionaryTable + ` (namespace, id, dict, created_at)
VALUES ($1::text, $2::bigint, $3::bytea, clock_timestamp()) RETURNING created_at`
)

// dictionaryErr wraps err for op, as ErrNoDictionaryTable when the table is
// missing.
func dictionaryErr(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable {
		return fmt.Errorf("pgstore: %s: %w", op, ErrNoDictionaryTable)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// SampleValues returns up to n values of ns picked at random, as the
// value's bytes exactly as lookups return them; fewer when the table has fewer rows, none
// when it is empty. Rows whose value is NULL are left out. It costs one scan
// of the table: every row draws a random number and the n smallest are kept
// (a bounded top-n sort). That suits an occasional offline task such as
// training a dictionary, and it works on PostgreSQL and every Greenplum
// version alike. Errors are the warehouse's, wrapped; an unknown namespace
// wraps warmcache.ErrUnknownNamespace. SampleValues is safe for concurrent
// use.
func (s *Store) SampleValues(ctx context.Context, ns *warmcache.Namespace, n int) ([][]byte, error) {
	t, err := s.table(ns)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	sql := fmt.Sprintf("SELECT %s FROM %s ORDER BY random() LIMIT $1::bigint", valueExpr(t.ns, ""), tableIdent(t.ns.Table))
	rows, err := s.pool.Query(ctx, sql, s.modes.Read, n)
	if err != nil {
		return nil, fmt.Errorf("pgstore: sample %s: %w", ns.Name, err)
	}
	var out [][]byte
	var value []byte
	_, err = pgx.ForEachRow(rows, []any{&value}, func() error {
		if value != nil {
			out = append(out, append([]byte(nil), value...))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: sample %s: %w", ns.Name, err)
	}
	return out, nil
}

// Dictionaries returns every stored dictionary, by namespace and, within a
// namespace, oldest first. Errors are the warehouse's, wrapped; when the
// table does not exist they wrap ErrNoDictionaryTable. Dictionaries is safe
// for concurrent use.
func (s *Store) Dictionaries(ctx context.Context) ([]Dictionary, error) {
	rows, err := s.pool.Query(ctx, dictionariesSQL, s.modes.Read)
	if err != nil {
		return nil, dictionaryErr("read dictionaries", err)
	}
	var id int64
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Dictionary, error) {
		var d Dictionary
		err := row.Scan(&d.Namespace, &id, &d.Data, &d.CreatedAt)
		if err == nil && (id <= 0 || id > 1<<32-1) {
			err = fmt.Errorf("dictionary %s/%d: id outside 1..2^32-1", d.Namespace, id)
		}
		d.ID = uint32(id)
		return d, err
	})
	if err != nil {
		return nil, dictionaryErr("read dictionaries", err)
	}
	return out, nil
}

// SaveDictionary stores d (its Namespace, ID and Data) as the newest
// dictionary of its namespace and returns it with its CreatedAt. A
// dictionary already stored under the same namespace and id (the same
// content) is not stored twice: it becomes the newest again. The namespace
// need not be one the store was opened with. Errors are the warehouse's,
// wrapped; when the table does not exist they wrap ErrNoDictionaryTable.
// SaveDictionary is safe for concurrent use.
func (s *Store) SaveDictionary(ctx context.Context, d Dictionary) (Dictionary, error) {
	if d.Namespace == "" || d.ID == 0 || len(d.Data) == 0 {
		return Dictionary{}, errors.New("pgstore: save dictionary: namespace, id and data are required")
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, touchDictionarySQL, s.modes.Write, d.Namespace, int64(d.ID)).Scan(&d.CreatedAt)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return tx.QueryRow(ctx, insertDictionarySQL, s.modes.Write, d.Namespace, int64(d.ID), d.Data).Scan(&d.CreatedAt)
	})
	if err != nil {
		return Dictionary{}, dictionaryErr(fmt.Sprintf("save dictionary %s/%d", d.Namespace, d.ID), err)
	}
	return d, nil
}
