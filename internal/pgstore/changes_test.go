package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/golden"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/pgstore/doctor"
	wcschema "github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestChangeStatementsGolden pins the SQL of the watermark poll and the
// generations, the same on both dialects: every read of a namespace table
// or the delete log is a range on the version column with ORDER BY and
// LIMIT, the shape the version index serves.
func TestChangeStatementsGolden(t *testing.T) {
	var b strings.Builder
	for _, ns := range []*warmcache.Namespace{widgetsNamespace(), peopleNamespace()} {
		st, err := pgstore.BuildChangeStatements(ns)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "-- %s: changed\n%s\n\n-- %s: newest\n%s\n\n", ns.Name, st.Changed, ns.Name, st.Newest)
		for _, sql := range []string{st.Changed, st.Newest} {
			if !strings.Contains(sql, "ORDER BY") || !strings.Contains(sql, "LIMIT") {
				t.Errorf("%s: %q reads without ORDER BY ... LIMIT", ns.Name, sql)
			}
		}
	}
	for _, st := range []struct{ name, sql string }{
		{"deleted", pgstore.DeletedSQL},
		{"newest_deleted", pgstore.NewestDeletedSQL},
		{"prune_deleted", pgstore.PruneDeletedSQL},
		{"generations", pgstore.GenerationsSQL},
		{"bump", pgstore.BumpSQL},
		{"bump_insert", pgstore.BumpInsertSQL},
	} {
		fmt.Fprintf(&b, "-- %s\n%s\n\n", st.name, st.sql)
	}
	golden.Check(t, "change_statements", []byte(b.String()))
}

// TestChangePollPlanGreenplum runs the poll's queries on a real
// Greenplum (WARMCACHE_TEST_GREENPLUM_DSN) over a migrated, analyzed
// table of 20,000 rows with the service's session settings, and checks
// that each reads the version index on every segment, never a sequential
// scan. The plan's nodes are pinned in a golden file.
func TestChangePollPlanGreenplum(t *testing.T) {
	dsn := testenv.GreenplumServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		testenv.Unavailable(t, "greenplum: connect: %v", err)
	}
	defer conn.Close(context.Background())
	schemaName := "wc_fresh_" + testenv.RandomSuffix(t)
	mustExec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	mustExec("CREATE SCHEMA " + schemaName)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+schemaName+" CASCADE")
	})
	mustExec("SET search_path = " + schemaName)
	var tables []wcschema.Table
	_, all := config.DefaultNamespaces()
	for _, tb := range all {
		if tb.Namespace.Name == "widgets" {
			tables = append(tables, tb)
		}
	}
	m, err := wcschema.NewMigrator(conn, dialect.Greenplum, tables, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	mustExec(`INSERT INTO widgets (key, value) SELECT i, jsonb_build_object('n', i) FROM generate_series(1, 20000) AS i`)
	mustExec(`INSERT INTO warmcache_deletes (namespace, key) SELECT 'widgets', i::text FROM generate_series(1, 20000) AS i`)
	mustExec("ANALYZE widgets")
	mustExec("ANALYZE warmcache_deletes")
	for _, s := range pgstore.SessionSettings(pgstore.Options{}) {
		mustExec(s)
	}
	var high int64
	if err := conn.QueryRow(ctx, "SELECT max(version) FROM widgets").Scan(&high); err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.BuildChangeStatements(tables[0].Namespace)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, q := range []struct {
		name, sql, table string
		args             []any
	}{
		{"changed", st.Changed, "widgets", []any{high - 50, int64(5000)}},
		{"newest", st.Newest, "widgets", nil},
		{"deleted", pgstore.DeletedSQL, "warmcache_deletes", []any{high + 19950, int64(5000)}},
		{"newest_deleted", pgstore.NewestDeletedSQL, "warmcache_deletes", nil},
	} {
		args := append([]any{pgx.QueryExecModeSimpleProtocol}, q.args...)
		rows, err := conn.Query(ctx, "EXPLAIN "+q.sql, args...)
		if err != nil {
			t.Fatalf("explain %s: %v", q.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("explain %s: %v", q.name, err)
		}
		text := strings.Join(lines, "\n")
		plan := doctor.ParsePlan(text)
		fmt.Fprintf(&b, "-- %s\n", q.name)
		indexed := false
		for _, n := range plan.Nodes {
			fmt.Fprintf(&b, "%s", n.Type)
			if n.Relation != "" {
				fmt.Fprintf(&b, " on %s", n.Relation)
			}
			if n.Index != "" {
				fmt.Fprintf(&b, " using %s", n.Index)
				indexed = indexed || n.Index == q.table+"_version_idx"
			}
			b.WriteString("\n")
			if n.Type == "Seq Scan" && n.Relation == q.table {
				t.Errorf("%s reads %s sequentially:\n%s", q.name, q.table, text)
			}
		}
		if !indexed {
			t.Errorf("%s does not read an index of %s:\n%s", q.name, q.table, text)
		}
		t.Logf("%s on Greenplum:\n%s", q.name, text)
	}
	golden.Check(t, "change_gp_plan", []byte(b.String()))
}
