package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/golden"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/pgstore/doctor"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// batchSQL returns ns's batched read, the statement that LookupMany sends
// on Greenplum for several keys.
func batchSQL(tb testing.TB, ns *warmcache.Namespace) string {
	tb.Helper()
	stmts, err := pgstore.Statements(ns, false)
	if err != nil {
		tb.Fatalf("statements of %s: %v", ns.Name, err)
	}
	return stmts.LookupMany
}

// TestGreenplumBatchGolden pins the SQL of Greenplum's batched read for
// each kind of namespace: one `= ANY` of the key column's exact array
// type, whatever the key type and the value expression, with no
// per-segment grouping and no per-key statements.
func TestGreenplumBatchGolden(t *testing.T) {
	var b strings.Builder
	for _, tt := range []struct {
		name string
		ns   *warmcache.Namespace
	}{
		{"packed_bigint", packedNamespace("widgets", "key", warmcache.KeyBigint, "value")},
		{"packed_text", packedNamespace("app.Sessions", "id", warmcache.KeyText, "doc")},
		{"columns", columnsNamespace()},
	} {
		sql := batchSQL(t, tt.ns)
		if want := fmt.Sprintf(" = ANY($1::%s[])", tt.ns.KeyType); !strings.HasSuffix(sql, want) {
			t.Errorf("%s: %q does not end with %q: the keys must reach the planner with the column's exact type", tt.name, sql, want)
		}
		if strings.Count(sql, "$") != 1 {
			t.Errorf("%s: %q takes more than the one array parameter", tt.name, sql)
		}
		fmt.Fprintf(&b, "-- %s\n%s\n\n", tt.name, sql)
	}
	golden.Check(t, "greenplum_batch", []byte(b.String()))
}

// gpBatchSchema is the Greenplum test tables of the batched read: bigint
// and text keys, each table distributed by its key. The text keys include
// the characters that an array literal must quote.
const gpBatchSchema = `
CREATE TABLE widgets (key bigint PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL) DISTRIBUTED BY (key);
INSERT INTO widgets SELECT g, jsonb_build_object('id', g), g * 10 FROM generate_series(1, 300) g;
CREATE TABLE sessions (id text PRIMARY KEY, doc jsonb NOT NULL, version bigint NOT NULL) DISTRIBUTED BY (id);
INSERT INTO sessions SELECT 's' || g, jsonb_build_object('id', 's' || g), g FROM generate_series(1, 300) g;
INSERT INTO sessions SELECT k, jsonb_build_object('id', k), 1000 + n
FROM unnest(ARRAY['a,b', 'quo"te', 'back\slash', '{br}ace', 'NULL', ' padded ', 'ünï', 'it''s', 'semi;colon', '$1']) WITH ORDINALITY AS u(k, n);
ANALYZE widgets;
ANALYZE sessions;
`

// gpBatchNamespaces are the read-only namespaces of gpBatchSchema.
func gpBatchNamespaces() (widgets, sessions *warmcache.Namespace) {
	widgets = packedNamespace("widgets", "key", warmcache.KeyBigint, "value")
	sessions = packedNamespace("sessions", "id", warmcache.KeyText, "doc")
	sessions.Name = "sessions"
	widgets.Writable, sessions.Writable = false, false
	return widgets, sessions
}

// gpConn connects to the database of dsn with the session settings of key
// lookups, as the store's connections have them.
func gpConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, stmt := range dialect.SessionSettings("") {
		if _, err := conn.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return conn
}

// segmentsOf returns the segment (gp_segment_id) of each row of table,
// by its key as text.
func segmentsOf(t *testing.T, conn *pgx.Conn, table, key string) map[string]int {
	t.Helper()
	rows, err := conn.Query(testContext(t), fmt.Sprintf("SELECT %s::text, gp_segment_id FROM %s", key, table))
	if err != nil {
		t.Fatalf("segments of %s: %v", table, err)
	}
	out := map[string]int{}
	var k string
	var seg int
	if _, err := pgx.ForEachRow(rows, []any{&k, &seg}, func() error { out[k] = seg; return nil }); err != nil {
		t.Fatalf("segments of %s: %v", table, err)
	}
	return out
}

// keysOn returns n keys of segs that live on segment seg, in key order.
func keysOn(t *testing.T, segs map[string]int, seg, n int) []string {
	t.Helper()
	var out []string
	for k, s := range segs {
		if s == seg {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	if len(out) < n {
		t.Fatalf("segment %d holds %d keys, the test needs %d", seg, len(out), n)
	}
	return out[:n]
}

// TestGreenplumLookupMany reads batches of keys spread over the segments,
// found and absent, bigint and text, through the store on a real
// Greenplum cluster, in its default read mode (the simple protocol), and
// checks that each key gets exactly its own entry.
func TestGreenplumLookupMany(t *testing.T) {
	dsn := testenv.NewGreenplumDatabase(t)
	conn := gpConn(t, dsn)
	if _, err := conn.Exec(testContext(t), gpBatchSchema, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	widgets, sessions := gpBatchNamespaces()
	s, err := openStore(t, pgstore.Options{DSN: dsn, MaxConns: 2}, prometheus.NewRegistry(), widgets, sessions)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if s.Dialect() != dialect.Greenplum || s.ExecMode() != string(pgstore.ExecModeSimpleProtocol) {
		t.Fatalf("store speaks %v in %s, want greenplum in simple_protocol", s.Dialect(), s.ExecMode())
	}
	ctx := testContext(t)
	segments, err := dialect.Segments(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if segments < 2 {
		t.Fatalf("the cluster has %d segment(s); the test needs keys on several", segments)
	}
	odd := []string{"a,b", `quo"te`, `back\slash`, "{br}ace", "NULL", " padded ", "ünï", "it's", "semi;colon", "$1"}

	t.Run("bigint", func(t *testing.T) {
		segs := segmentsOf(t, conn, "widgets", "key")
		var raw []string
		for seg := range segments {
			raw = append(raw, keysOn(t, segs, seg, 3)...)
		}
		// Absent keys, between and after the found ones, and one asked
		// twice.
		raw = append(raw, "100000", raw[0], "-7", "301")
		keys := make([]warmcache.Key, len(raw))
		for i, r := range raw {
			keys[i] = key(t, widgets, r)
		}
		entries, err := s.LookupMany(ctx, widgets, keys)
		if err != nil {
			t.Fatalf("LookupMany: %v", err)
		}
		checkEntries(t, conn, "SELECT value::text, version FROM widgets WHERE key = $1", widgets, keys, entries)
	})

	t.Run("text", func(t *testing.T) {
		segs := segmentsOf(t, conn, "sessions", "id")
		spread := map[int]bool{}
		for _, k := range odd {
			spread[segs[k]] = true
		}
		if len(spread) < 2 {
			t.Fatalf("the odd keys live on %d segment(s); the test needs them on several", len(spread))
		}
		raw := append([]string{"s1", "null", "a", "b", "s1 ", `back\\slash`, "{}"}, odd...)
		raw = append(raw, "s300", "s301", "it's")
		keys := make([]warmcache.Key, len(raw))
		for i, r := range raw {
			keys[i] = key(t, sessions, r)
		}
		entries, err := s.LookupMany(ctx, sessions, keys)
		if err != nil {
			t.Fatalf("LookupMany: %v", err)
		}
		checkEntries(t, conn, "SELECT doc::text, version FROM sessions WHERE id = $1", sessions, keys, entries)
	})

	// The statement the store sends, explained in its exec mode (the
	// simple protocol, which inlines the array as a constant), goes only
	// to the segments of its keys while they are fewer than
	// TargetedBatchKeys, and to every segment beyond.
	t.Run("dispatch", func(t *testing.T) {
		limit := dialect.TargetedBatchKeys(segments)
		wsegs := segmentsOf(t, conn, "widgets", "key")
		ssegs := segmentsOf(t, conn, "sessions", "id")
		twoSegments := func(n int) []string {
			return append(keysOn(t, wsegs, 0, n/2), keysOn(t, wsegs, 1, n-n/2)...)
		}
		oddKeys := odd[:min(len(odd), limit)]
		oddSegments := map[int]bool{}
		for _, k := range oddKeys {
			oddSegments[ssegs[k]] = true
		}
		for _, tt := range []struct {
			name string
			ns   *warmcache.Namespace
			keys []string
			want int // segments the query is sent to
		}{
			{"bigint keys on one segment", widgets, keysOn(t, wsegs, 0, 2), 1},
			{fmt.Sprintf("%d bigint keys on two segments", limit), widgets, twoSegments(limit), 2},
			{fmt.Sprintf("%d bigint keys on two segments", limit+1), widgets, twoSegments(limit + 1), segments},
			{"text keys on one segment", sessions, keysOn(t, ssegs, ssegs["a,b"], 3), 1},
			{"odd text keys", sessions, oddKeys, len(oddSegments)},
		} {
			t.Run(tt.name, func(t *testing.T) {
				var arg any = tt.keys
				if tt.ns.KeyType == warmcache.KeyBigint {
					ints := make([]int64, len(tt.keys))
					for i, k := range tt.keys {
						ints[i] = key(t, tt.ns, k).Int
					}
					arg = ints
				}
				rows, err := conn.Query(ctx, "EXPLAIN "+batchSQL(t, tt.ns), pgx.QueryExecModeSimpleProtocol, arg)
				if err != nil {
					t.Fatalf("explain: %v", err)
				}
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatalf("explain: %v", err)
				}
				text := strings.Join(lines, "\n")
				m, ok := doctor.ParsePlan(text).Motion()
				if !ok || m.Senders != tt.want || m.Segments != tt.want {
					t.Errorf("the batch of %d keys is sent to %d segments (slice segments: %d), want %d:\n%s", len(tt.keys), m.Senders, m.Segments, tt.want, text)
				}
				if !strings.Contains(text, "= ANY ('{") {
					t.Errorf("the keys did not reach the planner as a constant array:\n%s", text)
				}
			})
		}
	})
}

// checkEntries checks that entries, LookupMany's answer for keys, are
// what query (one key, $1, in the extended protocol: another path than the
// store's) reads for each key, and that the batch found some keys and
// missed some.
func checkEntries(t *testing.T, conn *pgx.Conn, query string, ns *warmcache.Namespace, keys []warmcache.Key, entries []warmcache.Entry) {
	t.Helper()
	if len(entries) != len(keys) {
		t.Fatalf("LookupMany returned %d entries for %d keys", len(entries), len(keys))
	}
	var found, absent int
	for i, k := range keys {
		var arg any = k.Text
		if ns.KeyType == warmcache.KeyBigint {
			arg = k.Int
		}
		var want warmcache.Entry
		err := conn.QueryRow(testContext(t), query, pgx.QueryExecModeExec, arg).Scan(&want.Value, &want.Version)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			absent++
		case err != nil:
			t.Fatalf("read key %q: %v", k.Text, err)
		default:
			want.Found = true
			found++
		}
		got := entries[i]
		if got.Found != want.Found || string(got.Value) != string(want.Value) || got.Version != want.Version {
			t.Errorf("key %q = {found %v, %s, version %d}, want {found %v, %s, version %d}",
				k.Text, got.Found, got.Value, got.Version, want.Found, want.Value, want.Version)
		}
	}
	if found == 0 || absent == 0 {
		t.Errorf("the batch found %d keys and missed %d; the test needs both", found, absent)
	}
}
