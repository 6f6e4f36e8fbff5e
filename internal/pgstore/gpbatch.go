package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// lookupManyGreenplum is LookupMany on Greenplum for several keys (one
// is Lookup's statement, which is direct-dispatched to the key's segment):
// one StatementSet.LookupMany (`key = ANY($1::keytype[])`) over the
// distinct keys, in the read exec mode. In the simple protocol
// (Greenplum's default for reads) pgx sends the keys as a typed constant
// array, so the planner sends the query only to the segments that hold
// them while there are fewer than dialect.TargetedBatchKeys of the
// table's segments, and to every segment beyond, which its keys mostly
// cover anyway. Keys are not grouped by segment: on the 3-segment test
// cluster one `= ANY` per batch moved more keys per second than one
// `= ANY` per segment, and far more than one single-key statement per key
// in one round trip (docs/warehouse.md#batched-misses-on-greenplum), and
// it stays on the shared pool with segment lanes (lanes.go). An
// array that stays a parameter (a generic plan, or GPORCA) is sent to
// every segment. It fills entries, of the length and order of keys; absent
// keys keep Found false.
func (s *Store) lookupManyGreenplum(ctx context.Context, t *table, keys []warmcache.Key, entries []warmcache.Entry) error {
	ns := t.ns

	// found maps each key's canonical text to its entry; it also drops
	// the keys asked twice from the array.
	found := make(map[string]warmcache.Entry, len(keys))
	distinct := make([]warmcache.Key, 0, len(keys))
	for _, k := range keys {
		if _, dup := found[k.Text]; !dup {
			found[k.Text] = warmcache.Entry{}
			distinct = append(distinct, k)
		}
	}
	k := newRowKey(ns)
	r := t.entryRow(k.dest())
	rows, err := s.pool.Query(ctx, t.stmts.LookupMany, s.modes.Read, keyArray(ns, distinct))
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, r.dest, func() error {
		found[k.key().Text] = r.entry()
		return nil
	})
	if err != nil {
		return err
	}
	for i, k := range keys {
		entries[i] = found[k.Text]
	}
	return nil
}
