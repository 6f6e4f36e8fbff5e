package pgstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/golden"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// formatStatements writes a statement set as labelled SQL.
func formatStatements(s pgstore.StatementSet) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "-- append_optimized: %v\n", s.AppendOptimized)
	for _, st := range []struct{ name, sql string }{
		{"lookup", s.Lookup},
		{"lookup_many", s.LookupMany},
		{"lookup_positions", s.LookupPositions},
		{"lookup_function", s.LookupFunction},
		{"lookup_call", s.LookupCall},
		{"table_lock", s.TableLock},
		{"key_lock", s.KeyLock},
		{"row_lock", s.RowLock},
		{"next_version", s.NextVersion},
		{"upsert", s.Upsert},
		{"update_if_match", s.UpdateIfMatch},
		{"update", s.Update},
		{"insert", s.Insert},
		{"delete", s.Delete},
		{"delete_if_match", s.DeleteIfMatch},
		{"retire", s.Retire},
		{"retire_if_match", s.RetireIfMatch},
		{"remove", s.Remove},
		{"version", s.Version},
	} {
		sql := st.sql
		if sql == "" {
			sql = "(none)"
		}
		fmt.Fprintf(&b, "\n-- %s\n%s\n", st.name, sql)
	}
	return []byte(b.String())
}

func packedNamespace(table, key string, keyType warmcache.KeyType, value string) *warmcache.Namespace {
	return &warmcache.Namespace{
		Name: "ns", Table: table, KeyColumn: key, KeyType: keyType,
		Layout: warmcache.LayoutPacked, ValueColumn: value, VersionColumn: "version", Writable: true,
	}
}

func bytesNamespace() *warmcache.Namespace {
	return &warmcache.Namespace{
		Name: "blobs", Table: "app.blobs", KeyColumn: "id", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutBytes, ValueColumn: "blob", VersionColumn: "version", Writable: true,
	}
}

func columnsNamespace() *warmcache.Namespace {
	return &warmcache.Namespace{
		Name: "people", Table: "people", KeyColumn: "id", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutColumns,
		Columns: []warmcache.Column{
			{Name: "name", Type: "text"},
			{Name: "age", Type: "integer"},
			{Name: "Nick'name", Type: "text"},
			{Name: "tags", Type: "jsonb"},
		},
		VersionColumn: "version", Writable: true,
	}
}

func TestStatementsGolden(t *testing.T) {
	tests := []struct {
		name            string
		ns              *warmcache.Namespace
		appendOptimized bool
	}{
		{"packed_bigint_heap", packedNamespace("widgets", "key", warmcache.KeyBigint, "value"), false},
		{"packed_text", packedNamespace("app.Sessions", "id", warmcache.KeyText, "doc"), false},
		{"columns", columnsNamespace(), false},
		{"greenplum_ao_packed", packedNamespace("widgets", "key", warmcache.KeyBigint, "value"), true},
		{"greenplum_ao_columns", columnsNamespace(), true},
		{"bytes_text_heap", bytesNamespace(), false},
		{"greenplum_ao_bytes", bytesNamespace(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := pgstore.Statements(tt.ns, tt.appendOptimized)
			if err != nil {
				t.Fatalf("Statements: %v", err)
			}
			golden.Check(t, "statements_"+tt.name, formatStatements(s))
		})
	}
}

func TestStatementsRefuseIncompleteNamespace(t *testing.T) {
	tests := []struct {
		name   string
		change func(*warmcache.Namespace)
		want   string
	}{
		{"no table", func(ns *warmcache.Namespace) { ns.Table = "" }, "no table"},
		{"empty schema", func(ns *warmcache.Namespace) { ns.Table = ".people" }, "empty name part"},
		{"no key column", func(ns *warmcache.Namespace) { ns.KeyColumn = "" }, "no key column"},
		{"no version column", func(ns *warmcache.Namespace) { ns.VersionColumn = "" }, "no version column"},
		{"bad key type", func(ns *warmcache.Namespace) { ns.KeyType = "uuid" }, `key type "uuid"`},
		{"bad layout", func(ns *warmcache.Namespace) { ns.Layout = "wide" }, `layout "wide"`},
		{"no columns", func(ns *warmcache.Namespace) { ns.Columns = nil }, "without columns"},
		{"column is the key", func(ns *warmcache.Namespace) { ns.Columns[0].Name = "id" }, `column "id" is listed twice`},
		{"too many columns", func(ns *warmcache.Namespace) {
			ns.Columns = make([]warmcache.Column, 51)
			for i := range ns.Columns {
				ns.Columns[i] = warmcache.Column{Name: fmt.Sprintf("c%d", i), Type: "text"}
			}
		}, "at most 50"},
		{"packed without value column", func(ns *warmcache.Namespace) {
			ns.Layout, ns.ValueColumn = warmcache.LayoutPacked, ""
		}, "without a value column"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := columnsNamespace()
			tt.change(ns)
			_, err := pgstore.Statements(ns, false)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"people"`) {
				t.Fatalf("Statements error = %v, want one naming the namespace and containing %q", err, tt.want)
			}
		})
	}
}

func TestSessionSettingsGolden(t *testing.T) {
	var b strings.Builder
	for _, stmt := range pgstore.SessionSettings(pgstore.Options{}) {
		b.WriteString(stmt + ";\n")
	}
	golden.Check(t, "greenplum_session_settings", []byte(b.String()))

	got := pgstore.SessionSettings(pgstore.Options{StatementMem: "32MB"})
	if last := got[len(got)-1]; last != "SET statement_mem = '32MB'" {
		t.Errorf("last setting with StatementMem 32MB = %q", last)
	}
	for _, stmt := range got {
		if strings.Contains(stmt, "force_generic_plan") {
			t.Errorf("session settings force generic plans: %q", stmt)
		}
	}
}
