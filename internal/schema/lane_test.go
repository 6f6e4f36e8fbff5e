package schema_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
)

// laneNamespaces covers every storage option migrate takes: heap with a GIN
// index, append-optimized row with zstd and zlib, append-optimized column
// with zstd and rle_type, and the columns layout with a text key in its own
// schema. On PostgreSQL the Greenplum-only options are notes in the DDL.
func laneNamespaces() []schema.Table {
	return []schema.Table{
		packed("heap_gin", schema.Storage{Partitions: 2, GINIndex: true}),
		packed("ao_row_zstd", schema.Storage{AppendOptimized: true, Compression: "zstd", CompressLevel: 5, GINIndex: true}),
		packed("ao_row_zlib", schema.Storage{AppendOptimized: true, Compression: "zlib"}),
		packed("ao_column_zstd", schema.Storage{AppendOptimized: true, Orientation: "column", Compression: "zstd"}),
		packed("ao_column_rle", schema.Storage{AppendOptimized: true, Orientation: "column", Compression: "rle_type", CompressLevel: 2}),
		people(schema.Storage{Partitions: 2, Compression: "pglz"}),
		blobs("bytes_heap_lz4", schema.Storage{Partitions: 2, Compression: "lz4"}),
		blobs("bytes_ao_row_zstd", schema.Storage{AppendOptimized: true, Compression: "zstd"}),
		blobs("bytes_ao_column_zlib", schema.Storage{AppendOptimized: true, Orientation: "column", Compression: "zlib"}),
	}
}

// TestMigrationsLane plans, applies and reverts every storage option on
// PostgreSQL and on Greenplum, and checks what the server built: the
// access method and compression of each table on Greenplum, a heap table
// everywhere on PostgreSQL, and a version sequence with CACHE 1.
func TestMigrationsLane(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			ctx := context.Background()
			conn := mustConnect(t, w.NewDatabase(t))
			if _, err := conn.Exec(ctx, "CREATE SCHEMA app"); err != nil {
				t.Fatal(err)
			}
			namespaces := laneNamespaces()
			m, err := schema.OpenMigrator(ctx, conn, namespaces, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("OpenMigrator: %v", err)
			}
			if m.Dialect().String() != w.Name {
				t.Fatalf("Dialect = %v, want %s", m.Dialect(), w.Name)
			}
			plan := schema.Render(m.Steps())
			if strings.Contains(plan, "DISTRIBUTED BY") != w.Greenplum || strings.Contains(plan, "PARTITION BY HASH") == w.Greenplum {
				t.Fatalf("plan for %s has the other dialect's clauses:\n%s", w.Name, plan)
			}
			applied, err := m.Up(ctx)
			if err != nil {
				t.Fatalf("Up: %v", err)
			}
			if len(applied) != len(m.Steps()) {
				t.Fatalf("Up applied %d of %d steps", len(applied), len(m.Steps()))
			}
			if n := queryInt(t, conn, "SELECT cache_size::int FROM pg_sequences WHERE sequencename = 'warmcache_version_seq'"); n != 1 {
				t.Errorf("version sequence has CACHE %d, want 1", n)
			}
			// What the server built, table by table: access method (pg_am)
			// and the compresstype in reloptions.
			want := map[string]string{
				"heap_gin": "heap", "ao_row_zstd": "ao_row zstd", "ao_row_zlib": "ao_row zlib",
				"ao_column_zstd": "ao_column zstd", "ao_column_rle": "ao_column rle_type", "app.people": "heap",
				"bytes_heap_lz4": "heap", "bytes_ao_row_zstd": "ao_row zstd", "bytes_ao_column_zlib": "ao_column zlib",
			}
			for table, storage := range want {
				if !w.Greenplum {
					storage = "heap"
				}
				var got string
				err := conn.QueryRow(ctx, `SELECT coalesce(am.amname, 'partitioned') || coalesce(' ' || (SELECT substr(o, length('compresstype=') + 1)
  FROM unnest(c.reloptions) AS o WHERE o LIKE 'compresstype=%'), '')
FROM pg_class c LEFT JOIN pg_am am ON am.oid = c.relam WHERE c.oid = to_regclass($1)`, table).Scan(&got)
				if !w.Greenplum && err == nil && got == "partitioned" {
					// A hash-partitioned table; its partitions are heap.
					err = conn.QueryRow(ctx, `SELECT am.amname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_am am ON am.oid = c.relam WHERE i.inhparent = to_regclass($1) LIMIT 1`, table).Scan(&got)
				}
				if err != nil || got != storage {
					t.Errorf("table %s is %q (%v), want %q", table, got, err, storage)
				}
			}
			states, err := m.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range states {
				if !s.Applied {
					t.Errorf("%s not applied after Up", s.Label())
				}
			}
			for i := 0; ; i++ {
				reverted, err := m.Down(ctx)
				if err != nil {
					t.Fatalf("Down: %v", err)
				}
				if len(reverted) == 0 {
					break
				}
				if i > 100 {
					t.Fatal("Down keeps reverting")
				}
			}
			for table := range want {
				if exists(t, conn, table) {
					t.Errorf("table %s remains after reverting every version", table)
				}
			}
			if exists(t, conn, "warmcache_version_seq") {
				t.Error("sequence remains after reverting every version")
			}
			if again, err := m.Up(ctx); err != nil || len(again) != len(m.Steps()) {
				t.Fatalf("Up after Down applied %d steps, %v", len(again), err)
			}
		})
	}
}
