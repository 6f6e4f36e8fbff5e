package doctor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/golden"
	"github.com/warmcache/warmcache/internal/pgstore/doctor"
)

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
		check    doctor.PlanCheck
		wantOK   bool
		wantText string // a phrase the verdict must hold
	}{
		{"gp_direct_dispatch", "gp_batch_two_segments", doctor.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, GINIndex: "widgets_value_gin", Packed: true},
			true, "a batched lookup of 4 keys on 2 segments is dispatched to those segments only (Gather Motion 2:1)"},
		{"gp_direct_dispatch", "gp_batch_generic_plan", doctor.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, GINIndex: "widgets_value_gin", Packed: true},
			false, "a batched lookup of 4 keys on 2 segments is dispatched to 3 segments (Gather Motion 3:1)"},
		{"gp_direct_dispatch", "", doctor.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, GINIndex: "widgets_value_gin", Packed: true},
			true, "direct-dispatched to one segment (Gather Motion 1:1)"},
		{"gp_ao_bitmap", "", doctor.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, Packed: true},
			true, "by index (widgets_archive_key_idx)"},
		{"gp_force_generic_plan", "", doctor.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: with("plan_cache_mode", "force_generic_plan"), Packed: true},
			false, "plan_cache_mode=force_generic_plan sends every prepared lookup to all segments"},
		{"gp_orca", "", doctor.PlanCheck{Dialect: dialect.Greenplum, Segments: 4, Settings: with("optimizer", "on"), Packed: true},
			false, "GPORCA plans the lookup"},
		{"gp_numeric_key_seqscan", "", doctor.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: good, Packed: true},
			false, "dispatched to all 3 segments (Gather Motion 3:1)"},
		{"gp_dispatch_off", "", doctor.PlanCheck{Dialect: dialect.Greenplum, Segments: 3, Settings: with("gp_enable_direct_dispatch", "off"), Packed: true},
			false, "direct dispatch is disabled"},
		{"pg_runtime_pruning", "", doctor.PlanCheck{Dialect: dialect.Postgres, Partitions: 8, Packed: true, GINIndex: "widgets_value_gin"},
			true, "reads 1 of 8 partitions (widgets_p3): the others are pruned when it starts (Subplans Removed: 7)"},
		{"pg_all_partitions", "", doctor.PlanCheck{Dialect: dialect.Postgres, Partitions: 4, Packed: true},
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
			d := doctor.Diagnosis{Namespace: "widgets", Check: c, Findings: c.Findings()}
			got := formatFindings(d.Findings)
			if d.OK() != tt.wantOK || !strings.Contains(got, tt.wantText) {
				t.Errorf("verdict (OK %v, want %v) lacks %q:\n%s", d.OK(), tt.wantOK, tt.wantText, got)
			}
			golden.Check(t, "explain_"+name, []byte(got))
		})
	}
}

func TestParsePlanGreenplumMotion(t *testing.T) {
	p := doctor.ParsePlan(" Gather Motion 3:1  (slice1; segments: 3)  (cost=0.00..1431.00 rows=1 width=40)\n   ->  Seq Scan on widgets  (cost=0.00..1431.00 rows=1 width=40)\n")
	m, ok := p.Motion()
	if !ok || m.Senders != 3 || m.Receivers != 1 || m.Segments != 3 {
		t.Fatalf("Motion() = %+v, %v; want 3:1 on 3 segments", m, ok)
	}
	if s := p.Scans(); len(s) != 1 || s[0].Type != "Seq Scan" || s[0].Relation != "widgets" {
		t.Fatalf("Scans() = %+v", s)
	}
}
