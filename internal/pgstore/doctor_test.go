package pgstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/golden"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// formatFindings writes findings one per line.
func formatFindings(fs []pgstore.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintln(&b, f)
	}
	return b.String()
}

// TestPlanCheckGolden judges EXPLAIN texts of Greenplum (which cannot run
// here) and PostgreSQL, written as the servers print them, against golden
// verdicts.
func TestPlanCheckGolden(t *testing.T) {
	good := map[string]string{"optimizer": "off", "gp_enable_direct_dispatch": "on", "plan_cache_mode": "auto"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for key, val := range good {
			m[key] = val
		}
		m[k] = v
		return m
	}
	tests := []struct {
		plan     string
		batch    string // the batched lookup's plan (4 keys on 2 segments), if any
		check    pgstore.PlanCheck
		wantOK   bool
		wantText string // a phrase the verdict must hold
	}{
		{"gp_direct_dispatch", "gp_batch_two_segments", pgstore.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, GINIndex: "widgets_value_gin", Packed: true},
			true, "a batched lookup of 4 keys on 2 segments is dispatched to those segments only (Gather Motion 2:1)"},
		{"gp_direct_dispatch", "gp_batch_generic_plan", pgstore.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, GINIndex: "widgets_value_gin", Packed: true},
			false, "a batched lookup of 4 keys on 2 segments is dispatched to 3 segments (Gather Motion 3:1)"},
		{"gp_direct_dispatch", "", pgstore.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, GINIndex: "widgets_value_gin", Packed: true},
			true, "direct-dispatched to one segment (Gather Motion 1:1)"},
		{"gp_ao_bitmap", "", pgstore.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, Packed: true},
			true, "by index (widgets_archive_key_idx)"},
		{"gp_force_generic_plan", "", pgstore.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: with("plan_cache_mode", "force_generic_plan"), Packed: true},
			false, "plan_cache_mode=force_generic_plan sends every prepared lookup to all segments"},
		{"gp_orca", "", pgstore.PlanCheck{Dialect: dialect.Greenplum, Segments: 4, Settings: with("optimizer", "on"), Packed: true},
			false, "GPORCA plans the lookup"},
		{"gp_numeric_key_seqscan", "", pgstore.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, Packed: true},
			false, "dispatched to all 3 segments (Gather Motion 3:1)"},
		{"gp_dispatch_off", "", pgstore.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: with("gp_enable_direct_dispatch", "off"), Packed: true},
			false, "direct dispatch is disabled"},
		{"pg_runtime_pruning", "", pgstore.PlanCheck{Dialect: dialect.Postgres, Partitions: 8, Packed: true, GINIndex: "widgets_value_gin"},
			true, "reads 1 of 8 partitions (widgets_p3): the others are pruned when it starts (Subplans Removed: 7)"},
		{"pg_all_partitions", "", pgstore.PlanCheck{Dialect: dialect.Postgres, Partitions: 4, Packed: true},
			false, "scans all 4 partitions"},
	}
	for _, tt := range tests {
		t.Run(tt.plan+"/"+tt.batch, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join("testdata", "explain", tt.plan+".plan"))
			if err != nil {
				t.Fatal(err)
			}
			c := tt.check
			c.Table, c.KeyColumn, c.Plan = "widgets", "key", string(text)
			name := tt.plan
			if tt.batch != "" {
				batch, err := os.ReadFile(filepath.Join("testdata", "explain", tt.batch+".plan"))
				if err != nil {
					t.Fatal(err)
				}
				c.BatchPlan, c.BatchKeys, c.BatchSegments = string(batch), 4, 2
				name = tt.batch
			}
			d := pgstore.Diagnosis{Namespace: "widgets", Check: c, Findings: c.Findings()}
			got := formatFindings(d.Findings)
			if d.OK() != tt.wantOK || !strings.Contains(got, tt.wantText) {
				t.Errorf("verdict (OK %v, want %v) lacks %q:\n%s", d.OK(), tt.wantOK, tt.wantText, got)
			}
			golden.Check(t, "explain_"+name, []byte(got))
		})
	}
}

func TestParsePlanGreenplumMotion(t *testing.T) {
	p := pgstore.ParsePlan(" Gather Motion 3:1  (slice1; segments: 3)  (cost=0.00..1431.00 rows=1 width=40)\n   ->  Seq Scan on widgets  (cost=0.00..1431.00 rows=1 width=40)\n")
	m, ok := p.Motion()
	if !ok || m.Senders != 3 || m.Receivers != 1 || m.Segments != 3 {
		t.Fatalf("Motion() = %+v, %v; want 3:1 on 3 segments", m, ok)
	}
	if s := p.Scans(); len(s) != 1 || s[0].Type != "Seq Scan" || s[0].Relation != "widgets" {
		t.Fatalf("Scans() = %+v", s)
	}
}

// TestDoctor runs the doctor on real tables: a hash-partitioned table with
// its key index passes; a table without an index on the key is caught; a
// tiny indexed table read sequentially is only a note.
func TestDoctor(t *testing.T) {
	for _, tg := range []target{{name: "direct", wantMode: "cache_statement"}, {name: "pgbouncer", pgbouncer: true, wantMode: "cache_describe"}} {
		t.Run(tg.name, func(t *testing.T) {
			dsn := newDatabase(t, schema+`
CREATE INDEX widgets_value_gin ON widgets USING gin (value jsonb_path_ops);
INSERT INTO widgets SELECT g, jsonb_build_object('n', g), g FROM generate_series(1, 5000) g;
CREATE TABLE broken (key bigint NOT NULL, value jsonb NOT NULL, version bigint NOT NULL);
INSERT INTO broken SELECT g, jsonb_build_object('n', g), g FROM generate_series(1, 5000) g;
CREATE TABLE tiny (key bigint PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL);
INSERT INTO tiny VALUES (1, '{}', 1), (2, '{}', 2);
ANALYZE;
`)
			widgets := widgetsNamespace()
			broken := &warmcache.Namespace{Name: "broken", Table: "broken", KeyColumn: "key", KeyType: warmcache.KeyBigint,
				Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version"}
			tiny := *broken
			tiny.Name, tiny.Table = "tiny", "tiny"
			s := mustOpenStore(t, dsn, tg, widgets, broken, &tiny, peopleNamespace())
			diags, err := s.Doctor(testContext(t))
			if err != nil {
				t.Fatalf("Doctor: %v", err)
			}
			byName := map[string]pgstore.Diagnosis{}
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
			again, err := s.Doctor(testContext(t))
			if err != nil || len(again) != len(diags) || formatFindings(again[3].Findings) != formatFindings(diags[3].Findings) {
				t.Fatalf("second Doctor = %v, %v", again, err)
			}
		})
	}
}
