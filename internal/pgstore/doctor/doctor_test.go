package doctor_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/pgstore/doctor"
	"github.com/warmcache/warmcache/internal/pgstore/pgstoretest"
	migrations "github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// schema creates the version sequence, a hash-partitioned packed table and
// a columns-layout table.
const schema = pgstoretest.WidgetsSchema + `
CREATE TABLE people (id bigint PRIMARY KEY, name text NOT NULL, age integer, version bigint NOT NULL);
`

// TestDoctor runs the doctor on real tables: a hash-partitioned table with
// its key index passes; a table without an index on the key is caught; a
// tiny indexed table read sequentially is only a note.
func TestDoctor(t *testing.T) {
	for _, pgbouncer := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "pgbouncer"}[pgbouncer], func(t *testing.T) {
			dsn := pgstoretest.NewDatabase(t, schema+`
CREATE INDEX widgets_value_gin ON widgets USING gin (value jsonb_path_ops);
INSERT INTO widgets SELECT g, jsonb_build_object('n', g), g FROM generate_series(1, 5000) g;
CREATE TABLE broken (key bigint NOT NULL, value jsonb NOT NULL, version bigint NOT NULL);
INSERT INTO broken SELECT g, jsonb_build_object('n', g), g FROM generate_series(1, 5000) g;
CREATE TABLE tiny (key bigint PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL);
INSERT INTO tiny VALUES (1, '{}', 1), (2, '{}', 2);
ANALYZE;
`)
			widgets := &warmcache.Namespace{Name: "widgets", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
				Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true}
			people := &warmcache.Namespace{Name: "people", Table: "people", KeyColumn: "id", KeyType: warmcache.KeyBigint,
				Layout: warmcache.LayoutColumns, Columns: []warmcache.Column{{Name: "name", Type: "text"}, {Name: "age", Type: "integer"}},
				VersionColumn: "version", Writable: true}
			broken := &warmcache.Namespace{Name: "broken", Table: "broken", KeyColumn: "key", KeyType: warmcache.KeyBigint,
				Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version"}
			tiny := *broken
			tiny.Name, tiny.Table = "tiny", "tiny"
			opts := pgstore.Options{DSN: dsn, MaxConns: 4}
			if pgbouncer {
				opts.DSN, opts.Pooler = testenv.PgBouncerDSN(t, testenv.DatabaseName(t, dsn)), pgstore.PoolerPgBouncer
			}
			s := openStore(t, opts, widgets, broken, &tiny, people)
			diags, err := doctor.Diagnose(pgstoretest.Context(t), s)
			if err != nil {
				t.Fatalf("Doctor: %v", err)
			}
			byName := map[string]doctor.Diagnosis{}
			var order []string
			for _, d := range diags {
				byName[d.Namespace] = d
				order = append(order, d.Namespace)
			}
			if got := strings.Join(order, ","); got != "broken,people,tiny,widgets" {
				t.Fatalf("diagnosed %s, want broken,people,tiny,widgets", got)
			}
			tests := []struct {
				name   string
				wantOK bool
				want   []string
			}{
				{"widgets", true, []string{
					"ok    the lookup (custom plan at the 6th execution) reads 1 of 4 partitions",
					"ok    with a generic plan (plan_cache_mode=force_generic_plan), the lookup reads 1 of 4 partitions",
					"(Subplans Removed: 3)",
					"ok    the lookup reads by index (widgets_p",
					"ok    _query: containment (@>) is served by the GIN index widgets_value_gin",
					"ok    lookups read through \"public\".\"warmcache_lookup_",
				}},
				{"broken", false, []string{
					"warn  the lookup reads broken sequentially: there is no usable index on \"key\"",
					"CREATE INDEX ON broken (key)",
					"note  _query: no GIN index on the value column",
				}},
				{"tiny", true, []string{"note  the lookup reads tiny sequentially because it is small enough", "the index tiny_pkey is usable"}},
				{"people", true, []string{"note  the lookup reads people sequentially because it is small", "note  _query: the columns layout"}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					d := byName[tt.name]
					got := formatFindings(d.Findings)
					if d.OK() != tt.wantOK {
						t.Errorf("OK() = %v, want %v", d.OK(), tt.wantOK)
					}
					for _, w := range tt.want {
						if !strings.Contains(got, w) {
							t.Errorf("verdict lacks %q:\n%s\nplan:\n%s\ngeneric plan:\n%s", w, got, d.Check.Plan, d.Check.GenericPlan)
						}
					}
				})
			}
			// The doctor leaves nothing behind: its statements are gone and
			// a second run gives the same verdict.
			again, err := doctor.Diagnose(pgstoretest.Context(t), s)
			if err != nil || len(again) != len(diags) || formatFindings(again[3].Findings) != formatFindings(diags[3].Findings) {
				t.Fatalf("second Doctor = %v, %v", again, err)
			}
		})
	}
}

// writeStatementVerdict is the doctor's verdict on one write statement
// that goes to the key's segment alone.
var writeStatementVerdict = regexp.MustCompile(`(?m)^ok    [a-z :]+: (direct-dispatched to one segment|dispatched to the segment that holds the key)`)

// TestDoctorLane runs the doctor on every storage variant on PostgreSQL and
// Greenplum: the lookup reads by index, the write plan is judged, rows
// added behind the planner's back (on Greenplum, after the first insert's
// automatic statistics) are reported as stale statistics until ANALYZE,
// and a version sequence with CACHE 20 is a warning.
func TestDoctorLane(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			dsn, namespaces := migrated(t, w)
			for _, ns := range namespaces {
				// One row first: Greenplum takes statistics on a table's
				// first insert, then never again by itself.
				pgstoretest.Exec(t, dsn, fmt.Sprintf(`INSERT INTO %s VALUES (0, '{}', 1)`, ns.Table))
				// Versions unique, as the sequence makes them: the version's
				// index then looks as selective as the key's to the planner.
				pgstoretest.Exec(t, dsn, fmt.Sprintf(`INSERT INTO %s SELECT g, jsonb_build_object('n', g), g + 1 FROM generate_series(1, 5000) g`, ns.Table))
			}
			// A small pool: the Greenplum coordinator takes 100 connections in all.
			s := openStore(t, pgstore.Options{DSN: dsn, MaxConns: 2}, namespaces...)
			findings := func() map[string]string {
				t.Helper()
				diags, err := doctor.Diagnose(pgstoretest.Context(t), s)
				if err != nil {
					t.Fatalf("Doctor: %v", err)
				}
				out := map[string]string{}
				for _, d := range diags {
					out[d.Namespace] = formatFindings(d.Findings)
				}
				return out
			}
			stale := findings()
			for _, ns := range namespaces {
				pgstoretest.Exec(t, dsn, "ANALYZE "+ns.Table)
			}
			pgstoretest.Exec(t, dsn, "ALTER SEQUENCE "+pgstore.VersionSequence+" CACHE 20")
			fresh := findings()
			for _, ns := range namespaces {
				t.Run(ns.Name, func(t *testing.T) {
					if w.Greenplum && !strings.Contains(stale[ns.Name], "warn  statistics of "+ns.Table+" are stale") {
						t.Errorf("before ANALYZE, the verdict lacks the stale statistics:\n%s", stale[ns.Name])
					}
					if strings.Contains(fresh[ns.Name], "statistics of") {
						t.Errorf("after ANALYZE, the verdict still reports stale statistics:\n%s", fresh[ns.Name])
					}
					if strings.Contains(stale[ns.Name], "CACHE") || !strings.Contains(fresh[ns.Name], "warn  the version sequence warmcache_version_seq has CACHE 20") {
						t.Errorf("the sequence's cache is misjudged: CACHE 1:\n%s\nCACHE 20:\n%s", stale[ns.Name], fresh[ns.Name])
					}
					if !strings.Contains(fresh[ns.Name], "ok    the lookup reads by index") {
						t.Errorf("after ANALYZE, the lookup does not read by index:\n%s", fresh[ns.Name])
					}
					wantWrite := "ok    the write is planned on " + ns.Table + " alone"
					if w.Greenplum {
						// With the version passed as a parameter the write goes
						// to one segment; nextval() in VALUES made it a
						// Redistribute Motion 1:3 under a Gather Motion 3:1.
						wantWrite = ": direct-dispatched to one segment (Gather Motion 1:1"
						if !strings.Contains(fresh[ns.Name], "ok    the lookup is direct-dispatched to one segment") {
							t.Errorf("the lookup is not direct-dispatched:\n%s", fresh[ns.Name])
						}
						// The `= ANY` of folded misses, in the simple protocol,
						// goes only to the segments of its keys. The doctor
						// samples its keys from the first rows a scan returns,
						// which may all live on one segment of a small table.
						m := batchVerdict.FindStringSubmatch(fresh[ns.Name])
						if m == nil || m[1] != m[2] {
							t.Errorf("the batched lookup is not dispatched to its keys' segments alone:\n%s", fresh[ns.Name])
						}
					}
					if !strings.Contains(fresh[ns.Name], wantWrite) {
						t.Errorf("the verdict lacks the write's dispatch (%q):\n%s", wantWrite, fresh[ns.Name])
					}
					if w.Greenplum {
						// Every statement of a write goes to the key's segment.
						if n := len(writeStatementVerdict.FindAllString(fresh[ns.Name], -1)); n < 4 || strings.Contains(fresh[ns.Name], "dispatched to all") ||
							strings.Contains(fresh[ns.Name], "not direct-dispatched") {
							t.Errorf("the verdict does not show every write statement sent to one segment (%d found):\n%s", n, fresh[ns.Name])
						}
					} else if !strings.Contains(fresh[ns.Name], "ok    writes run through") {
						t.Errorf("the verdict does not say that writes run through the write function:\n%s", fresh[ns.Name])
					}
				})
			}
		})
	}
}

// batchVerdict matches the doctor's verdict on a batched lookup that goes to
// its keys' segments alone; its groups are the keys' segments and the
// segments the plan gathers from.
var batchVerdict = regexp.MustCompile(`ok    a batched lookup of \d+ keys on (\d+) segments? is dispatched to those segments only \(Gather Motion (\d+):1\)`)

// laneTables are the tables of a packed namespace in each storage the
// lane covers: heap, append-optimized row and append-optimized column, all
// managed, so that migrate creates their tables.
func laneTables() []migrations.Table {
	storages := map[string]migrations.Storage{
		"heap":      {Partitions: 2, GINIndex: true},
		"ao_row":    {AppendOptimized: true, Orientation: "row", Compression: "zstd", GINIndex: true},
		"ao_column": {AppendOptimized: true, Orientation: "column", Compression: "zstd", GINIndex: true},
	}
	var out []migrations.Table
	for _, name := range []string{"heap", "ao_row", "ao_column"} {
		out = append(out, migrations.Table{Namespace: &warmcache.Namespace{
			Name: name + "_packed", Table: name + "_packed", KeyColumn: "key", KeyType: warmcache.KeyBigint,
			Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version",
			ExpiresColumn: "expires_at", Writable: true,
		}, Managed: true, Storage: storages[name]})
	}
	return out
}

// migrated creates a database on w, applies the migrations of the lane's
// tables and returns its DSN and the tables' namespaces.
func migrated(t testing.TB, w testenv.Warehouse) (string, []*warmcache.Namespace) {
	t.Helper()
	dsn := w.NewDatabase(t)
	tables := laneTables()
	pgstoretest.WithConn(t, dsn, func(ctx context.Context, conn *pgx.Conn) {
		m, err := migrations.OpenMigrator(ctx, conn, tables, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Dialect().String(); got != w.Name {
			t.Fatalf("detected dialect %s, want %s", got, w.Name)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatalf("migrate up: %v", err)
		}
	})
	namespaces := make([]*warmcache.Namespace, len(tables))
	for i, tb := range tables {
		namespaces[i] = tb.Namespace
	}
	return dsn, namespaces
}

// openStore opens a store with opts, closed when the test ends.
func openStore(t testing.TB, opts pgstore.Options, namespaces ...*warmcache.Namespace) *pgstore.Store {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := pgstore.Open(pgstoretest.Context(t), opts, namespaces, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// formatFindings writes findings one per line.
func formatFindings(fs []doctor.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintln(&b, f)
	}
	return b.String()
}
