package pgstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

func TestLaneSizes(t *testing.T) {
	for _, tt := range []struct {
		segments int
		maxConns int32
		lanes    []int32
		total    int
	}{
		{1, 8, nil, 8},
		{3, 8, []int32{2, 2, 2}, 14},
		{3, 16, []int32{5, 5, 5}, 31},
		{6, 8, slices.Repeat([]int32{1}, 6), 14},
		{12, 8, slices.Repeat([]int32{1}, 12), 20},
		{3, 2, []int32{1, 1, 1}, 5},
	} {
		lanes := pgstore.LaneSizes(tt.segments, tt.maxConns)
		if !slices.Equal(lanes, tt.lanes) {
			t.Errorf("%d segments, pool of %d: lanes %v, want %v", tt.segments, tt.maxConns, lanes, tt.lanes)
		}
		if got := pgstore.LaneConnections(tt.segments, int(tt.maxConns)); got != tt.total {
			t.Errorf("%d segments, pool of %d: %d connections, want %d", tt.segments, tt.maxConns, got, tt.total)
		}
	}
}

// TestLaneHashIsTheServers holds the hash that places a key on its segment
// against PostgreSQL's own hashint8 and hashtext, on keys of every size.
func TestLaneHashIsTheServers(t *testing.T) {
	dsn := testenv.PostgresServer(t)
	r := rand.New(rand.NewPCG(1, 2))
	ints := []int64{0, 1, -1, 42, math.MaxInt64, math.MinInt64, 1 << 32, -(1 << 32), math.MaxInt32, math.MinInt32}
	for range 200 {
		ints = append(ints, int64(r.Uint64()), r.Int64N(1e6))
	}
	texts := []string{"", "a", "ünï", "it's", "a,b"}
	for n := range 60 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('!' + r.IntN(90))
		}
		texts = append(texts, string(b), strconv.Itoa(r.IntN(1e9))+"ключ")
	}
	withConn(t, dsn, func(ctx context.Context, conn *pgx.Conn) {
		rows, _ := conn.Query(ctx, "SELECT k, hashint8(k) FROM unnest($1::bigint[]) k", ints)
		var k int64
		var h int32
		n, err := pgx.ForEachRow(rows, []any{&k, &h}, func() error {
			if got := int32(pgstore.HashInt8(k)); got != h {
				t.Errorf("hashint8(%d) = %d, the store's hash %d", k, h, got)
			}
			return nil
		})
		if err != nil || int(n.RowsAffected()) != len(ints) {
			t.Fatalf("hashint8: %v (%d rows)", err, n.RowsAffected())
		}
		rows, _ = conn.Query(ctx, "SELECT s, hashtext(s) FROM unnest($1::text[]) s", texts)
		var s string
		n, err = pgx.ForEachRow(rows, []any{&s, &h}, func() error {
			if got := int32(pgstore.HashBytes([]byte(s))); got != h {
				t.Errorf("hashtext(%q) = %d, the store's hash %d", s, h, got)
			}
			return nil
		})
		if err != nil || int(n.RowsAffected()) != len(texts) {
			t.Fatalf("hashtext: %v (%d rows)", err, n.RowsAffected())
		}
	})
}

// lanesSchema has a table of each key type distributed by its key, and
// one distributed randomly, which gets no lanes.
const lanesSchema = `
CREATE SEQUENCE warmcache_version_seq CACHE 1;
CREATE TABLE widgets (key bigint PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL) DISTRIBUTED BY (key);
INSERT INTO widgets SELECT g, jsonb_build_object('id', g), g FROM generate_series(1, 400) g;
CREATE TABLE sessions (id text PRIMARY KEY, doc jsonb NOT NULL, version bigint NOT NULL) DISTRIBUTED BY (id);
INSERT INTO sessions SELECT 's' || g || repeat('x', g % 17), jsonb_build_object('id', g), g FROM generate_series(1, 400) g;
CREATE TABLE events (key bigint NOT NULL, value jsonb NOT NULL, version bigint NOT NULL) DISTRIBUTED RANDOMLY;
INSERT INTO events SELECT g, jsonb_build_object('id', g), g FROM generate_series(1, 50) g;
ANALYZE;
`

// TestGreenplumSegmentLanes opens a store with segment lanes on a real
// cluster: every row is on the segment the store computes for its key,
// reads and writes through the lanes answer as without them, and the
// pool's metrics count the lanes.
func TestGreenplumSegmentLanes(t *testing.T) {
	dsn := testenv.NewGreenplumDatabase(t)
	conn := gpConn(t, dsn)
	ctx := testContext(t)
	if _, err := conn.Exec(ctx, lanesSchema, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	segments, err := dialect.Segments(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	widgets := packedNamespace("widgets", "key", warmcache.KeyBigint, "value")
	widgets.Name = "widgets"
	sessions := packedNamespace("sessions", "id", warmcache.KeyText, "doc")
	sessions.Name, sessions.Writable = "sessions", false
	events := packedNamespace("events", "key", warmcache.KeyBigint, "value")
	events.Name, events.Writable = "events", false
	reg := prometheus.NewRegistry()
	s, err := openStore(t, pgstore.Options{DSN: dsn, MaxConns: 4}, reg, widgets, sessions, events)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if !s.HasLanes("widgets") || !s.HasLanes("sessions") || s.HasLanes("events") {
		t.Fatalf("lanes: widgets %v, sessions %v, events %v; want the tables distributed by their key only",
			s.HasLanes("widgets"), s.HasLanes("sessions"), s.HasLanes("events"))
	}

	for _, tc := range []struct {
		ns         *warmcache.Namespace
		table, key string
	}{{widgets, "widgets", "key"}, {sessions, "sessions", "id"}} {
		segs := segmentsOf(t, conn, tc.table, tc.key)
		var keys []warmcache.Key
		for raw, seg := range segs {
			k := key(t, tc.ns, raw)
			if got := pgstore.SegmentOf(tc.ns, k, segments); got != seg {
				t.Errorf("%s %q is on segment %d, the store says %d", tc.table, raw, seg, got)
			}
			keys = append(keys, k)
		}
		entries, err := s.LookupMany(ctx, tc.ns, append(keys, key(t, tc.ns, "999999")))
		if err != nil {
			t.Fatalf("LookupMany %s: %v", tc.table, err)
		}
		for i, e := range entries[:len(keys)] {
			if !e.Found {
				t.Errorf("LookupMany %s: %q not found", tc.table, keys[i].Text)
			}
		}
		if entries[len(keys)].Found {
			t.Errorf("LookupMany %s: an absent key was found", tc.table)
		}
	}
	for i := range 40 {
		k := key(t, widgets, strconv.Itoa(1+i*9))
		if _, err := s.Put(ctx, widgets, k, []byte(fmt.Sprintf(`{"put":%d}`, i)), nil); err != nil {
			t.Fatalf("Put %s: %v", k.Text, err)
		}
		e, err := s.Lookup(ctx, widgets, k)
		if err != nil || !e.Found || string(e.Value) != fmt.Sprintf(`{"put": %d}`, i) {
			t.Fatalf("Lookup %s after its Put = %+v, %v", k.Text, e, err)
		}
	}

	// The pool gauge counts the lanes' connections with the shared pool's.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "warmcache_sql_pool_max_connections" {
			if got, want := f.GetMetric()[0].GetGauge().GetValue(), float64(pgstore.LaneConnections(segments, 4)); got != want {
				t.Errorf("warmcache_sql_pool_max_connections = %v, want %v", got, want)
			}
			return
		}
	}
	t.Error("no warmcache_sql_pool_max_connections")
}
