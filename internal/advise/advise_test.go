package advise_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/advise"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/golden"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

func widgets() schema.Table {
	return schema.Table{Namespace: &warmcache.Namespace{Name: "widgets", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version"}, Managed: true,
		Storage: schema.Storage{Partitions: 4, Compression: "lz4", GINIndex: true}}
}

// TestCandidatesGolden pins the candidates of each dialect; Greenplum's
// cannot be built here, so their list and DDL are checked as text.
func TestCandidatesGolden(t *testing.T) {
	cols := []warmcache.Column{{Name: "status", Type: "text"}, {Name: "total", Type: "numeric"}}
	for _, d := range []dialect.Dialect{dialect.Postgres, dialect.Greenplum} {
		t.Run(d.String(), func(t *testing.T) {
			tb := widgets()
			cands := advise.Candidates(d, tb, cols)
			var b strings.Builder
			for i, c := range cands {
				fmt.Fprintf(&b, "%d %s | layout %s value %s query %s migratable %v storage %+v\n",
					i, c.Name, c.Layout, c.Value, c.Query, c.Migratable, c.Storage)
			}
			fmt.Fprintf(&b, "current: %d\n", advise.Current(d, tb, cands))
			// Every candidate is a storage migrate can render for the dialect.
			for i, c := range cands {
				cns := *tb.Namespace
				cns.Name, cns.Table, cns.Layout, cns.Columns = fmt.Sprintf("c%d", i), fmt.Sprintf("s.c%d", i), c.Layout, c.Columns
				if _, err := schema.Plan(d, []schema.Table{{Namespace: &cns, Managed: true, Storage: c.Storage}}); err != nil {
					t.Errorf("candidate %s: %v", c.Name, err)
				}
			}
			golden.Check(t, "candidates_"+d.String(), []byte(b.String()))
		})
	}
}

func TestInferColumns(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   string
	}{
		{"flat", []string{`{"id":1,"price":2.5,"ok":true,"day":"2024-01-02","name":"a"}`, `{"id":2,"price":3,"ok":false,"day":"2024-01-03","name":"b","extra":[1]}`},
			"id bigint, price numeric, ok boolean, day date, name text, extra jsonb"},
		{"nulls and mixed", []string{`{"a":null,"b":"2024-01-01"}`, `{"a":1,"b":"x"}`}, "a bigint, b text"},
		{"nested", []string{`{"widget":{"id":"1"}}`}, "widget jsonb"},
		{"not objects", []string{`[1,2]`}, ""},
		{"reserved name", []string{`{"key":1}`}, ""},
		{"bad identifier", []string{`{"Has Space":1}`}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var vals [][]byte
			for _, v := range tt.values {
				vals = append(vals, []byte(v))
			}
			var got []string
			for _, c := range advise.InferColumns(vals, "key", "version") {
				got = append(got, c.Name+" "+c.Type)
			}
			if strings.Join(got, ", ") != tt.want {
				t.Fatalf("InferColumns = %q, want %q", strings.Join(got, ", "), tt.want)
			}
		})
	}
}

func TestRecommend(t *testing.T) {
	ms := time.Millisecond
	res := func(name string, q advise.QuerySupport, migratable bool, bytes int64, p50, p99 time.Duration) advise.Result {
		return advise.Result{Candidate: advise.Candidate{Name: name, Query: q, Migratable: migratable}, Bytes: bytes, P50: p50, P99: p99}
	}
	tests := []struct {
		name    string
		results []advise.Result
		current int
		want    string
	}{
		{"smallest fast one that keeps the GIN index", []advise.Result{
			res("jsonb none", advise.QueryIndexed, true, 100, ms, 2*ms),
			res("jsonb small", advise.QueryIndexed, true, 60, ms, 2*ms),
			res("columns", advise.QueryScan, true, 30, ms, 2*ms),
			res("bytea", advise.QueryNone, false, 10, ms, 2*ms),
		}, 0, "jsonb small"},
		{"too slow is not recommended", []advise.Result{
			res("jsonb", advise.QueryIndexed, true, 100, ms, 2*ms),
			res("jsonb tiny but slow", advise.QueryIndexed, true, 10, 3*ms, 9*ms),
		}, 0, "jsonb"},
		{"equal size keeps the current", []advise.Result{
			res("jsonb pglz", advise.QueryIndexed, true, 99, ms, 2*ms),
			res("jsonb lz4", advise.QueryIndexed, true, 100, ms, 2*ms),
		}, 1, "jsonb lz4"},
		{"columns when nothing needs an index", []advise.Result{
			res("jsonb", advise.QueryScan, true, 100, ms, 2*ms),
			res("columns", advise.QueryScan, true, 40, ms, 2*ms),
		}, 0, "columns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := advise.Report{Dialect: dialect.Postgres, Results: tt.results, Current: tt.current, AvgValueBytes: 500}
			r.Recommend()
			if r.Recommended < 0 || r.Results[r.Recommended].Name != tt.want {
				t.Fatalf("recommended %d (%s), want %s", r.Recommended, r.Why, tt.want)
			}
		})
	}
}

// TestRun builds every candidate of each dialect on a small sample of a
// real table, on PostgreSQL and on Greenplum, measures it, and leaves no
// scratch schema behind. Every size must be above zero: on Greenplum the
// sizes used to come from pg_partition_tree, which is empty for a plain
// table there, and all read 0 B.
func TestRun(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) { checkRun(t, w) })
	}
}

func checkRun(t *testing.T, w testenv.Warehouse) {
	dsn := w.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	distributed := ""
	if w.Greenplum {
		distributed = " DISTRIBUTED BY (key)"
	}
	_, err = conn.Exec(ctx, `
CREATE TABLE orders (key bigint PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL)`+distributed+`;
INSERT INTO orders SELECT g, jsonb_build_object('status', (ARRAY['O','F','P'])[g % 3 + 1], 'total', g * 1.25,
	'placed', '2024-01-' || lpad((g % 28 + 1)::text, 2, '0'), 'clerk', 'Clerk#' || lpad((g % 100)::text, 9, '0')), g
FROM generate_series(1, 600) g;`)
	if err != nil {
		t.Fatal(err)
	}
	tb := schema.Table{Namespace: &warmcache.Namespace{Name: "orders", Table: "orders", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version"}, Storage: schema.Storage{Partitions: 2}}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := advise.Run(ctx, tb, advise.Options{Store: pgstore.Options{DSN: dsn}, SampleRows: 500, Lookups: 100}, log)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := 7
	if w.Greenplum {
		want = 14
	}
	if r.Rows != 500 || len(r.Results) != want || r.Dialect.String() != w.Name {
		t.Fatalf("Run on %s sampled %d rows into %d candidates, want 500 into %d on %s", r.Dialect, r.Rows, len(r.Results), want, w.Name)
	}
	for _, res := range r.Results {
		if res.Err != nil || res.Bytes <= 0 || res.P50 <= 0 || res.P99 < res.P50 || res.Load <= 0 {
			t.Errorf("%s: %+v", res.Name, res)
		}
	}
	if r.Recommended < 0 || r.Current < 0 || r.DictRatio <= 1 {
		t.Errorf("recommended %d, current %d, dictionary ratio %.2f", r.Recommended, r.Current, r.DictRatio)
	}
	var out bytes.Buffer
	if err := r.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	wantText := []string{"columns, TOAST none", "packed bytea+zstd-dict", "recommended", "migration:"}
	if w.Greenplum {
		wantText = []string{"columns, AO column zstd:5", "packed bytea+zstd-dict", "recommended", "migration:"}
	}
	for _, want := range wantText {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), " 0 B ") || strings.Contains(out.String(), "(0 B)") {
		t.Errorf("report has a size of 0 B:\n%s", out.String())
	}
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'warmcache_advise_%'").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d scratch schemas left (err %v), want 0", left, err)
	}
	if _, err := r.JSON(); err != nil {
		t.Fatal(err)
	}
}
