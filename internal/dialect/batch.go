package dialect

import (
	"fmt"
	"strings"
)

// GreenplumBatchLookup returns Greenplum's read of a batch of keys, one
// statement for the whole batch:
//
//	SELECT columns FROM table WHERE key = ANY($1::keyType[])
//
// table, key and columns are SQL text (quoted where they need it); keyType
// is the key column's exact type, so that the planner can hash the keys as
// the table's distribution does.
//
// The statement is meant for pgx's simple protocol, which sends the array
// as a typed constant ('{...}'::bigint[]). From a constant array
// Greenplum's planner computes the segment of each key and sends the query
// only to the segments that hold them, while the batch holds at most
// TargetedBatchKeys distinct keys; a larger batch goes to every
// segment, which its keys mostly cover anyway. That makes one statement per
// batch as narrow as a statement per segment's keys, and cheaper: on the
// 3-segment test cluster, at 1 to 8 clients and batches of 8 and 64 keys,
// one `= ANY` moved 1.2–3.1× the keys per second of one `= ANY` per
// segment (each segment known exactly) in one round trip, and 2.4–18×
// those of one single-key statement per key in one round trip, each
// statement being a dispatch of its own (docs/warehouse.md). So the keys
// are not grouped by segment. An array parameter that stays a parameter (a
// generic plan, or GPORCA) is sent to every segment.
func GreenplumBatchLookup(table, key, keyType string, columns ...string) string {
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s = ANY($1::%s[])", strings.Join(columns, ", "), table, key, keyType)
}

// TargetedBatchKeys returns the most distinct keys an `= ANY` of constant
// keys may hold for Greenplum's planner to send it only to the segments
// that hold them, on a table spread over segments segments (its
// gp_distribution_policy.numsegments): 3 × segments - 1. With more keys
// the planner does not work out their segments ("don't bother for ones
// which will likely hash to many segments", cdbtargeteddispatch.c) and the
// query goes to every segment: with 3 × segments random keys, about 95% of
// the segments hold one of them anyway. It returns 0 for no segments.
func TargetedBatchKeys(segments int) int {
	if segments <= 0 {
		return 0
	}
	return 3*segments - 1
}
