package pgstore_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/golden"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// sliceRows is warmcache.LoadRows over a slice; err is returned by Err
// after the last row.
type sliceRows struct {
	rows []warmcache.LoadRow
	i    int
	err  error
}

func (s *sliceRows) Next() bool {
	if s.i >= len(s.rows) {
		return false
	}
	s.i++
	return true
}

func (s *sliceRows) Row() warmcache.LoadRow { return s.rows[s.i-1] }
func (s *sliceRows) Err() error             { return s.err }

// widgetRows returns rows for keys from..to with value {"n": <key>, "tag": tag}.
func widgetRows(from, to int, tag string) []warmcache.LoadRow {
	var rows []warmcache.LoadRow
	for k := from; k <= to; k++ {
		rows = append(rows, warmcache.LoadRow{
			Line:  int64(len(rows) + 1),
			Key:   warmcache.Key{Text: strconv.Itoa(k), Int: int64(k)},
			Value: fmt.Appendf(nil, `{"n": %d, "tag": %q}`, k, tag),
		})
	}
	return rows
}

// tableState returns the value text and version of every row of a table by
// key text.
func tableState(t *testing.T, dsn, query string) map[string][2]string {
	t.Helper()
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	var k, v, ver string
	if _, err := pgx.ForEachRow(rows, []any{&k, &v, &ver}, func() error {
		out[k] = [2]string{v, ver}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoadMerge(t *testing.T) {
	for _, appendOptimized := range []bool{false, true} {
		t.Run(fmt.Sprintf("append_optimized=%v", appendOptimized), func(t *testing.T) {
			eachTarget(t, func(t *testing.T, tg target) {
				widgets := widgetsNamespace()
				dsn := newDatabase(t, schema)
				s := mustOpenStore(t, dsn, tg, widgets)
				if appendOptimized {
					if err := s.UseAppendOptimizedWrites("widgets"); err != nil {
						t.Fatal(err)
					}
				}
				ctx := testContext(t)
				const state = "SELECT key::text, value::text, version::text FROM widgets"

				counts, err := s.Load(ctx, widgets, &sliceRows{rows: widgetRows(1, 300, "a")})
				if err != nil {
					t.Fatalf("first Load: %v", err)
				}
				if counts.Inserted != 300 || counts.Updated != 0 || counts.Unchanged != 0 || len(counts.Changed) != 300 {
					t.Fatalf("first Load counts = %+v (changed %d), want 300 inserted", counts, len(counts.Changed))
				}
				before := tableState(t, dsn, state)

				// Keys 1..100 unchanged, 101..200 changed, 201..300 left
				// alone, 301..350 new; key 150 twice, the last line wins.
				rows := widgetRows(1, 100, "a")
				rows = append(rows, widgetRows(101, 200, "b")...)
				rows = append(rows, widgetRows(301, 350, "c")...)
				rows = append(rows, warmcache.LoadRow{Key: warmcache.Key{Text: "150", Int: 150}, Value: []byte(`{"n": 150, "tag": "last"}`)})
				for i := range rows {
					rows[i].Line = int64(i + 1)
				}
				counts, err = s.Load(ctx, widgets, &sliceRows{rows: rows})
				if err != nil {
					t.Fatalf("second Load: %v", err)
				}
				if counts.Inserted != 50 || counts.Updated != 100 || counts.Unchanged != 100 || len(counts.Changed) != 150 {
					t.Fatalf("second Load counts = %+v (changed %d), want 50 inserted, 100 updated, 100 unchanged", counts, len(counts.Changed))
				}
				after := tableState(t, dsn, state)
				if len(after) != 350 {
					t.Fatalf("table has %d rows, want 350", len(after))
				}
				var maxBefore int64
				for _, r := range before {
					v, _ := strconv.ParseInt(r[1], 10, 64)
					maxBefore = max(maxBefore, v)
				}
				changed := map[string]bool{}
				for _, k := range counts.Changed {
					changed[k.Text] = true
				}
				for k := 1; k <= 350; k++ {
					key := strconv.Itoa(k)
					old, now := before[key], after[key]
					version, _ := strconv.ParseInt(now[1], 10, 64)
					switch {
					case k <= 100 || (k > 200 && k <= 300):
						if now != old || changed[key] {
							t.Errorf("key %d changed from %v to %v (in Changed: %v), want it untouched", k, old, now, changed[key])
						}
					default:
						if version <= maxBefore || !changed[key] {
							t.Errorf("key %d version %d (before the load at most %d), in Changed %v; want a new version", k, version, maxBefore, changed[key])
						}
					}
				}
				if got := after["150"][0]; got != `{"n": 150, "tag": "last"}` {
					t.Errorf("key 150 = %s, want the last line's value", got)
				}
			})
		})
	}
}

func TestLoadRollsBack(t *testing.T) {
	widgets, people := widgetsNamespace(), peopleNamespace()
	for _, appendOptimized := range []bool{false, true} {
		t.Run(fmt.Sprintf("append_optimized=%v", appendOptimized), func(t *testing.T) {
			dsn := newDatabase(t, schema)
			s := mustOpenStore(t, dsn, target{wantMode: "cache_statement"}, widgets, people)
			if appendOptimized {
				for _, name := range []string{"widgets", "people"} {
					if err := s.UseAppendOptimizedWrites(name); err != nil {
						t.Fatal(err)
					}
				}
			}
			ctx := testContext(t)
			if _, err := s.Load(ctx, widgets, &sliceRows{rows: widgetRows(1, 10, "a")}); err != nil {
				t.Fatalf("Load: %v", err)
			}
			before := tableState(t, dsn, "SELECT key::text, value::text, version::text FROM widgets")

			t.Run("source error", func(t *testing.T) {
				sourceErr := &warmcache.LoadError{Count: 1, Lines: []warmcache.LineError{{Line: 7, Err: warmcache.ErrInvalidValue}}}
				_, err := s.Load(ctx, widgets, &sliceRows{rows: widgetRows(5, 20, "b"), err: sourceErr})
				var le *warmcache.LoadError
				if !errors.As(err, &le) || le != sourceErr {
					t.Fatalf("Load error = %v, want the source's error", err)
				}
				if after := tableState(t, dsn, "SELECT key::text, value::text, version::text FROM widgets"); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Fatalf("table changed after a failed load:\nbefore %v\nafter  %v", before, after)
				}
			})
			t.Run("value the table rejects", func(t *testing.T) {
				rows := []warmcache.LoadRow{
					{Line: 1, Key: warmcache.Key{Text: "1", Int: 1}, Value: []byte(`{"name": "Ann", "age": 41}`)},
					{Line: 2, Key: warmcache.Key{Text: "2", Int: 2}, Value: []byte(`{"name": "Bo", "age": "old"}`)},
				}
				_, err := s.Load(ctx, people, &sliceRows{rows: rows})
				if !errors.Is(err, warmcache.ErrInvalidValue) {
					t.Fatalf("Load error = %v, want ErrInvalidValue", err)
				}
				if got := tableState(t, dsn, "SELECT id::text, name, version::text FROM people"); len(got) != 0 {
					t.Fatalf("people has %v after a failed load, want no rows", got)
				}
			})
			t.Run("columns layout", func(t *testing.T) {
				rows := []warmcache.LoadRow{
					{Line: 1, Key: warmcache.Key{Text: "1", Int: 1}, Value: []byte(`{"name": "Ann", "age": 41, "tags": ["x"]}`)},
					{Line: 2, Key: warmcache.Key{Text: "2", Int: 2}, Value: []byte(`{"name": "Bo"}`)},
				}
				counts, err := s.Load(ctx, people, &sliceRows{rows: rows})
				if err != nil || counts.Inserted != 2 {
					t.Fatalf("Load = %+v, %v; want 2 inserted", counts, err)
				}
				counts, err = s.Load(ctx, people, &sliceRows{rows: rows[:1]})
				if err != nil || counts.Unchanged != 1 || len(counts.Changed) != 0 {
					t.Fatalf("reload = %+v, %v; want 1 unchanged", counts, err)
				}
				got := tableState(t, dsn, "SELECT id::text, name || '/' || coalesce(age::text, '-') || '/' || coalesce(tags::text, '-'), version::text FROM people")
				if got["1"][0] != `Ann/41/["x"]` || got["2"][0] != "Bo/-/-" {
					t.Fatalf("people = %v", got)
				}
			})
		})
	}
}

// TestLoadStatementsGreenplum pins the SQL of a load on Greenplum:
// temporary tables distributed by the key, UPDATE + INSERT for
// append-optimized tables, and the columns layout's record in a subquery's
// select list (TestGreenplumLane runs them on a real cluster).
func TestLoadStatementsGreenplum(t *testing.T) {
	tests := []struct {
		name            string
		ns              *warmcache.Namespace
		appendOptimized bool
	}{
		{"greenplum_heap_packed", widgetsNamespace(), false},
		{"greenplum_heap_columns", peopleNamespace(), false},
		{"greenplum_ao_packed", widgetsNamespace(), true},
		{"greenplum_ao_columns", peopleNamespace(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls, err := pgstore.BuildLoadStatements(dialect.Greenplum, tt.ns, tt.appendOptimized)
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("-- append_optimized: %v\n\n-- stage\n%s\n\n-- source\n%s\n\n-- next_version\n%s\n\n-- existing\n%s\n\n-- update\n%s\n\n-- merge\n%s\n\n-- analyze\n%s\n",
				ls.AppendOptimized, ls.Stage, ls.Source, ls.NextVersion, orNone(ls.Existing), orNone(ls.Update), ls.Merge, ls.Analyze)
			golden.Check(t, "load_"+tt.name, []byte(got))
		})
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
