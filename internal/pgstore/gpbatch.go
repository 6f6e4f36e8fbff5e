package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// greenplumBatchSQL returns ns's Greenplum batched read (see
// dialect.GreenplumBatchLookup): the key, the value as JSON text and the
// version of each key of the array $1 that is found.
func greenplumBatchSQL(ns *warmcache.Namespace) string {
	return dialect.GreenplumBatchLookup(tableIdent(ns.Table), ident(ns.KeyColumn), string(ns.KeyType),
		ident(ns.KeyColumn), valueExpr(ns, ""), ident(ns.VersionColumn))
}

// lookupManyGreenplum is LookupMany on Greenplum: one key is Lookup's
// statement, which is direct-dispatched to the key's segment; several are
// one greenplumBatchSQL statement over the distinct keys, in the read exec
// mode. In the simple protocol (Greenplum's default for reads) pgx sends
// the keys as a typed constant array, so the planner sends the query only
// to the segments that hold them while there are fewer than
// dialect.TargetedBatchKeys of the table's segments, and to every segment
// beyond; keys are not grouped by segment, which measured slower (see
// dialect.GreenplumBatchLookup). The result has the length and order of
// keys; absent keys have Found false.
func (s *Store) lookupManyGreenplum(ctx context.Context, t *table, keys []warmcache.Key) (entries []warmcache.Entry, err error) {
	ns := t.ns
	if len(keys) == 1 {
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

	// found maps each key's canonical text to its entry; it also drops
	// the keys asked twice from the array.
	found := make(map[string]warmcache.Entry, len(keys))
	var (
		arg     any
		intKey  int64
		textKey string
		value   []byte
		version int64
		dest    []any
	)
	if ns.KeyType == warmcache.KeyBigint {
		ints := make([]int64, 0, len(keys))
		for _, k := range keys {
			if _, dup := found[k.Text]; !dup {
				found[k.Text] = warmcache.Entry{}
				ints = append(ints, k.Int)
			}
		}
		arg, dest = ints, []any{&intKey, &value, &version}
	} else {
		texts := make([]string, 0, len(keys))
		for _, k := range keys {
			if _, dup := found[k.Text]; !dup {
				found[k.Text] = warmcache.Entry{}
				texts = append(texts, k.Text)
			}
		}
		arg, dest = texts, []any{&textKey, &value, &version}
	}
	rows, err := s.pool.Query(ctx, t.gpBatch, s.modes.Read, arg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: lookup %d keys in %s: %w", len(keys), ns.Name, classify(err))
	}
	_, err = pgx.ForEachRow(rows, dest, func() error {
		k := textKey
		if ns.KeyType == warmcache.KeyBigint {
			k = strconv.FormatInt(intKey, 10)
		}
		found[k] = warmcache.Entry{Value: jsonValue(value), Version: version, Found: true}
		value = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: lookup %d keys in %s: %w", len(keys), ns.Name, classify(err))
	}
	for i, k := range keys {
		entries[i] = found[k.Text]
	}
	return entries, nil
}

// prepareGreenplumBatch prepares ns's greenplumBatchSQL with the unnamed
// statement, checks its parameter and result types as prepareStatements
// does for LookupMany's, and returns it.
func prepareGreenplumBatch(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace) (string, error) {
	sql := greenplumBatchSQL(ns)
	keyOID, keyArrayOID := keyOIDs(ns)
	sd, err := conn.Conn().Prepare(ctx, "", sql)
	if err != nil {
		return "", tableError(ns, "prepare greenplum_batch statement: %w", err)
	}
	if want := []uint32{keyArrayOID}; !slices.Equal(sd.ParamOIDs, want) {
		return "", tableError(ns, "greenplum_batch statement takes parameters (%s), want (%s)", typeNames(sd.ParamOIDs, ", "), typeNames(want, ", "))
	}
	if want := []uint32{keyOID, pgtype.TextOID, pgtype.Int8OID}; !slices.Equal(fieldOIDs(sd.Fields), want) {
		return "", tableError(ns, "greenplum_batch statement returns (%s), want (%s)", typeNames(fieldOIDs(sd.Fields), ", "), typeNames(want, ", "))
	}
	return sql, nil
}
