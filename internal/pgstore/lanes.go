package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// Segment lanes, on Greenplum reached directly. A Greenplum session keeps a
// process on every segment it has sent a statement to, and a single-key
// statement costs more when its session's statements went to other
// segments: on a 12-segment cluster a single-key write cost the segments
// 1.66 ms through sessions that each wrote keys of every segment, 0.45 ms
// through sessions that alternated between two, and 0.35 ms through
// sessions that each kept to one; a key lookup 0.38 ms against 0.14
// (loadtest/gp-sessions.sh, docs/warehouse.md#segment-lanes). So beside its
// shared pool the store keeps a lane per segment, a small pool of its own,
// and sends each single-key lookup and write through the lane of its key's
// segment. Statements that reach several segments (a batched lookup, the
// watermark poll, the sweeper, a transaction of several writes) stay on
// the shared pool: split by segment, a batch cost the coordinator a
// statement per segment and measured slower. The store finds a key's
// segment as Greenplum does for a table distributed by its key column with
// the type's default hash operator class: PostgreSQL's hash function of
// the key (hashint8, hashtext), reduced to a segment by jump consistent
// hashing. Open checks both on each table (its distribution policy, and
// sample rows against their gp_segment_id) and gives lanes only to the
// tables that pass.

// LaneMode says whether the store keeps segment lanes on Greenplum.
type LaneMode string

// The lane modes.
const (
	// LanesAuto keeps segment lanes on Greenplum reached directly (not
	// through PgBouncer, whose server connections are not the client's).
	LanesAuto LaneMode = "auto"
	// LanesOff sends every statement through the one pool.
	LanesOff LaneMode = "off"
)

// DefaultSegmentLanes is the lane mode when none is given.
const DefaultSegmentLanes = LanesAuto

// ParseLaneMode parses a lane mode; empty is the default.
func ParseLaneMode(s string) (LaneMode, error) {
	switch m := LaneMode(s); m {
	case "":
		return DefaultSegmentLanes, nil
	case LanesAuto, LanesOff:
		return m, nil
	}
	return "", fmt.Errorf("segment lanes %q: want auto or off", s)
}

// lanes are the segment lanes of a store, one per segment.
type lanes struct {
	segments int
	pools    []*pgxpool.Pool
}

// laneSizes returns the connections of each segment's lane beside a
// shared pool of maxConns on a cluster of segments: maxConns shared out,
// at least one each. No lanes below 2 segments.
func laneSizes(segments int, maxConns int32) []int32 {
	if segments < 2 {
		return nil
	}
	sizes := make([]int32, segments)
	for i := range sizes {
		sizes[i] = max(1, maxConns/int32(segments))
	}
	return sizes
}

// LaneConnections returns the connections a store of Options.MaxConns
// maxConns may open on a Greenplum cluster of segments with segment
// lanes: the shared pool's and the lanes'.
func LaneConnections(segments, maxConns int) int {
	n := maxConns
	for _, s := range laneSizes(segments, int32(maxConns)) {
		n += int(s)
	}
	return n
}

// newLanes opens one pool of cfg per size.
func newLanes(ctx context.Context, cfg *pgxpool.Config, segments int, sizes []int32) (*lanes, error) {
	l := &lanes{segments: segments}
	for _, n := range sizes {
		c := cfg.Copy()
		c.MaxConns, c.MinConns = n, n // a lane keeps its sessions: a new one costs a Greenplum session and a segment process
		p, err := pgxpool.NewWithConfig(ctx, c)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("pgstore: create lane pool: %w", err)
		}
		l.pools = append(l.pools, p)
	}
	return l, nil
}

func (l *lanes) close() {
	if l == nil {
		return
	}
	for _, p := range l.pools {
		p.Close()
	}
}

// lane returns the lane of key of ns.
func (l *lanes) lane(ns *warmcache.Namespace, key warmcache.Key) int {
	return segmentOf(ns, key, l.segments)
}

// poolFor returns the pool of a statement on key of t: its lane's when t
// has lanes and the lane has an idle connection, else the shared pool. A
// lane holds few connections, and a statement that waits (a write behind
// another's lock) must not hold up the other keys of its segment.
func (s *Store) poolFor(t *table, key warmcache.Key) *pgxpool.Pool {
	if !t.lanes {
		return s.pool
	}
	lane := s.lanes.pools[s.lanes.lane(t.ns, key)]
	if lane.Stat().IdleConns() == 0 {
		return s.pool
	}
	return lane
}

// segmentOf returns the segment, of segments, that holds key of ns on a
// table distributed by its key column with the type's default hash
// operator class (Greenplum's cdbhash with one column: the type's hash,
// reduced by jump consistent hashing).
func segmentOf(ns *warmcache.Namespace, key warmcache.Key, segments int) int {
	var h uint32
	if ns.KeyType == warmcache.KeyBigint {
		h = hashInt8(key.Int)
	} else {
		h = hashBytes([]byte(key.Text))
	}
	return jumpHash(uint64(h), segments)
}

// jumpHash is the jump consistent hash of Lamping and Veach, as Greenplum
// computes it (floating point included).
func jumpHash(key uint64, buckets int) int {
	b, j := int64(-1), int64(0)
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

// hashInt8 is PostgreSQL's hashint8: the halves folded into 32 bits so that
// an int8 hashes as the int4 of the same value, then hashUint32.
func hashInt8(v int64) uint32 {
	lo, hi := uint32(v), uint32(v>>32)
	if v >= 0 {
		lo ^= hi
	} else {
		lo ^= ^hi
	}
	return hashUint32(lo)
}

// hashInit is the starting value of PostgreSQL's hash functions (Bob
// Jenkins' lookup3) before the length is added.
const hashInit = 0x9e3779b9 + 3923095

// hashUint32 is PostgreSQL's hash_uint32.
func hashUint32(k uint32) uint32 {
	a := uint32(hashInit + 4)
	b, c := a, a
	return hashFinal(a+k, b, c)
}

// hashBytes is PostgreSQL's hash_any on a little-endian machine, which
// hashtext applies to a text's bytes under a deterministic collation.
func hashBytes(k []byte) uint32 {
	a := uint32(hashInit) + uint32(len(k))
	b, c := a, a
	for len(k) >= 12 {
		a += binary.LittleEndian.Uint32(k[0:])
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		a, b, c = hashMix(a, b, c)
		k = k[12:]
	}
	var tail [12]byte
	copy(tail[:], k)
	a += binary.LittleEndian.Uint32(tail[0:])
	b += binary.LittleEndian.Uint32(tail[4:])
	c += binary.LittleEndian.Uint32(tail[8:]) << 8 // the low byte of c holds no key byte
	return hashFinal(a, b, c)
}

func hashMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func hashFinal(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// laneSampleRows is how many rows Open compares with their gp_segment_id.
const laneSampleRows = 256

// distributionSQL says whether table $1 is distributed by its column $2
// alone with the column type's default hash operator class, and over how
// many segments.
const distributionSQL = `SELECT p.numsegments, array_length(p.distkey::int2[], 1) = 1 AND p.distkey[0] = a.attnum
  AND p.distclass[0] = (SELECT opc.oid FROM pg_opclass opc JOIN pg_am am ON am.oid = opc.opcmethod
                        WHERE am.amname = 'hash' AND opc.opcdefault AND opc.opcintype = a.atttypid)
FROM gp_distribution_policy p JOIN pg_attribute a ON a.attrelid = p.localoid AND a.attname = $2
WHERE p.localoid = to_regclass($1)`

// laneReady says why t's keys cannot be given their segments' lanes on a
// cluster of segments, or "" when they can: the table is distributed by its
// key over every segment with the default hash, and its sample rows are
// where segmentOf puts them.
func (s *Store) laneReady(ctx context.Context, t *table, segments int) (string, error) {
	var numsegments int
	var byKey bool
	err := s.pool.QueryRow(ctx, distributionSQL, pgx.QueryExecModeSimpleProtocol, t.ns.Table, t.ns.KeyColumn).Scan(&numsegments, &byKey)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "the table has no distribution policy", nil
	case err != nil:
		return "", err
	case !byKey:
		return "the table is not distributed by its key column alone with the default hash", nil
	case numsegments != segments:
		return fmt.Sprintf("the table is on %d of the cluster's %d segments", numsegments, segments), nil
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf("SELECT %s::text, gp_segment_id FROM %s LIMIT %d", ident(t.ns.KeyColumn), tableIdent(t.ns.Table), laneSampleRows),
		pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return "", err
	}
	var text string
	var seg int
	misplaced := ""
	_, err = pgx.ForEachRow(rows, []any{&text, &seg}, func() error {
		k, err := t.ns.ParseKey(text)
		if err != nil || misplaced != "" {
			return nil
		}
		if at := segmentOf(t.ns, k, segments); at != seg {
			misplaced = fmt.Sprintf("key %q is on segment %d, not %d", text, seg, at)
		}
		return nil
	})
	return misplaced, err
}
