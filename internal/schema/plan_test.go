package schema_test

import (
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/golden"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// packed returns the managed table of a bigint-keyed packed namespace with
// the storage options.
func packed(name string, st schema.Storage) schema.Table {
	return schema.Table{Namespace: &warmcache.Namespace{
		Name: name, Table: name, KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version",
	}, Managed: true, Storage: st}
}

// blobs returns the managed table of a text-keyed bytes namespace with the
// storage options.
func blobs(name string, st schema.Storage) schema.Table {
	return schema.Table{Namespace: &warmcache.Namespace{
		Name: name, Table: name, KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutBytes, ValueColumn: "blob", VersionColumn: "version",
	}, Managed: true, Storage: st}
}

// people returns the managed table of a text-keyed namespace of the
// columns layout in the schema app.
func people(st schema.Storage) schema.Table {
	return schema.Table{Namespace: &warmcache.Namespace{
		Name: "people", Table: "app.people", KeyColumn: "email", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutColumns,
		Columns: []warmcache.Column{
			{Name: "name", Type: "text"},
			{Name: "age", Type: "integer"},
			{Name: "balance", Type: "numeric(12, 2)"},
			{Name: "joined", Type: "timestamptz"},
		},
		VersionColumn: "version",
	}, Managed: true, Storage: st}
}

func TestPlanGolden(t *testing.T) {
	tests := []struct {
		name    string
		dialect dialect.Dialect
		ns      schema.Table
		// want are fragments the DDL must contain whatever the golden says.
		want []string
		// notWant are fragments it must not contain.
		notWant []string
	}{
		{
			name:    "greenplum_heap_packed_gin",
			dialect: dialect.Greenplum,
			ns:      packed("widgets", schema.Storage{GINIndex: true}),
			want: []string{
				"-- 0001 version_sequence\n", "CREATE SEQUENCE IF NOT EXISTS warmcache_version_seq CACHE 1;",
				"-- 0002 namespace_table (widgets)\n",
				`"key" bigint NOT NULL`, `"value" jsonb NOT NULL`, `"version" bigint NOT NULL`,
				`PRIMARY KEY ("key")`, `DISTRIBUTED BY ("key")`, "appendoptimized=false",
				`CREATE INDEX "widgets_value_gin" ON "widgets" USING gin ("value" jsonb_path_ops);`,
				"-- 0003 dictionaries\n", "CREATE TABLE IF NOT EXISTS warmcache_dictionaries (",
				"PRIMARY KEY (namespace, id)\n)\nWITH (appendoptimized=false)\nDISTRIBUTED BY (namespace);",
				"DROP TABLE IF EXISTS warmcache_dictionaries;",
			},
			notWant: []string{"PARTITION BY", "appendoptimized=true", "SET COMPRESSION"},
		},
		{
			name:    "greenplum_ao_row_zstd5",
			dialect: dialect.Greenplum,
			ns:      packed("events", schema.Storage{AppendOptimized: true, Compression: "zstd", CompressLevel: 5}),
			want: []string{
				"WITH (appendoptimized=true, orientation=row, compresstype=zstd, compresslevel=5)",
				`DISTRIBUTED BY ("key")`,
				`CREATE INDEX "events_key_idx" ON "events" ("key");`,
			},
			notWant: []string{`PRIMARY KEY ("key")`, "PARTITION BY", "USING gin"},
		},
		{
			name:    "greenplum_ao_column_rle",
			dialect: dialect.Greenplum,
			ns: packed("metrics", schema.Storage{
				AppendOptimized: true, Orientation: "column", Compression: "rle_type", Partitions: 8,
			}),
			want: []string{
				"WITH (appendoptimized=true, orientation=column, compresstype=rle_type, compresslevel=1)",
				`DISTRIBUTED BY ("key")`, `CREATE INDEX "metrics_key_idx" ON "metrics" ("key");`,
				"-- storage.partitions not applied",
			},
			notWant: []string{`PRIMARY KEY ("key")`, "PARTITION BY"},
		},
		{
			name:    "greenplum_columns_text_key",
			dialect: dialect.Greenplum,
			ns:      people(schema.Storage{}),
			want: []string{
				`CREATE TABLE "app"."people" (`, `"email" text NOT NULL`, `"name" text NOT NULL`,
				`"age" integer NOT NULL`, `"balance" numeric(12,2) NOT NULL`, `"joined" timestamptz NOT NULL`,
				`PRIMARY KEY ("email")`, `DISTRIBUTED BY ("email")`, `DROP TABLE IF EXISTS "app"."people";`,
			},
			notWant: []string{"jsonb", "USING gin"},
		},
		{
			name:    "greenplum_ao_row_bytes",
			dialect: dialect.Greenplum,
			ns:      blobs("blobs", schema.Storage{AppendOptimized: true, Compression: "zstd"}),
			want: []string{
				`"key" text NOT NULL`, `"blob" bytea NOT NULL`,
				"WITH (appendoptimized=true, orientation=row, compresstype=zstd",
				`DISTRIBUTED BY ("key")`, `CREATE INDEX "blobs_key_idx" ON "blobs" ("key");`,
			},
			notWant: []string{`"blob" jsonb`, "USING gin"},
		},
		{
			name:    "postgres_bytes_lz4",
			dialect: dialect.Postgres,
			ns:      blobs("blobs", schema.Storage{Compression: "lz4"}),
			want:    []string{`"blob" bytea NOT NULL`, `ALTER COLUMN "blob" SET COMPRESSION lz4;`, `PRIMARY KEY ("key")`},
			notWant: []string{`"blob" jsonb`, "USING gin", "DISTRIBUTED"},
		},
		{
			name:    "postgres_packed_lz4_8_partitions",
			dialect: dialect.Postgres,
			ns:      packed("widgets", schema.Storage{Compression: "lz4", GINIndex: true}),
			want: []string{
				`PRIMARY KEY ("key")`, `PARTITION BY HASH ("key");`,
				`CREATE TABLE "widgets_p0" PARTITION OF "widgets" FOR VALUES WITH (MODULUS 8, REMAINDER 0);`,
				`CREATE TABLE "widgets_p7" PARTITION OF "widgets" FOR VALUES WITH (MODULUS 8, REMAINDER 7);`,
				`ALTER COLUMN "value" SET COMPRESSION lz4;`, "2 kB",
				`CREATE INDEX "widgets_value_gin" ON "widgets" USING gin ("value" jsonb_path_ops);`,
				"PRIMARY KEY (namespace, id)\n);",
			},
			notWant: []string{"DISTRIBUTED", "appendoptimized", "widgets_p8"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, err := schema.Plan(tt.dialect, []schema.Table{tt.ns})
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			var all strings.Builder
			all.WriteString(schema.Render(steps))
			for _, s := range steps {
				all.WriteString(s.Down)
			}
			got := schema.Render(steps)
			for _, w := range tt.want {
				if !strings.Contains(all.String(), w) {
					t.Errorf("DDL lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("DDL contains %q:\n%s", w, got)
				}
			}
			golden.Check(t, tt.name, []byte(got))
		})
	}
}

func TestPlanNotes(t *testing.T) {
	tests := []struct {
		name    string
		dialect dialect.Dialect
		ns      schema.Table
		want    []string
	}{
		{
			name:    "postgres zstd becomes lz4",
			dialect: dialect.Postgres,
			ns:      packed("w", schema.Storage{Compression: "zstd", CompressLevel: 7, AppendOptimized: true, Orientation: "column"}),
			want: []string{
				"-- storage.compression zstd does not exist on PostgreSQL: TOAST lz4 is used instead.",
				`ALTER COLUMN "value" SET COMPRESSION lz4;`,
				"-- storage.compress_level 7 not applied",
				"-- storage.appendoptimized not applied",
				"-- storage.orientation column not applied",
			},
		},
		{
			name:    "postgres columns compress the variable-length columns",
			dialect: dialect.Postgres,
			ns:      people(schema.Storage{Compression: "pglz", Partitions: 2}),
			want: []string{
				`CREATE TABLE "app"."people_p1" PARTITION OF "app"."people" FOR VALUES WITH (MODULUS 2, REMAINDER 1);`,
				"ALTER TABLE \"app\".\"people\"\n    ALTER COLUMN \"name\" SET COMPRESSION pglz,\n    ALTER COLUMN \"balance\" SET COMPRESSION pglz;",
			},
		},
		{
			name:    "greenplum heap lz4 not applied",
			dialect: dialect.Greenplum,
			ns:      packed("w", schema.Storage{Compression: "lz4", Partitions: 8, GINIndex: true}),
			want:    []string{"-- storage.compression lz4 not applied", `PRIMARY KEY ("key")`},
		},
		{
			name:    "greenplum ao lz4 becomes zstd",
			dialect: dialect.Greenplum,
			ns:      packed("w", schema.Storage{Compression: "lz4", AppendOptimized: true}),
			want:    []string{"-- storage.compression lz4 does not exist for append-optimized tables", "compresstype=zstd, compresslevel=3"},
		},
		{
			name:    "greenplum ao zlib default level",
			dialect: dialect.Greenplum,
			ns:      packed("w", schema.Storage{Compression: "zlib", AppendOptimized: true}),
			want:    []string{"compresstype=zlib, compresslevel=5"},
		},
		{
			name:    "greenplum ao without compression",
			dialect: dialect.Greenplum,
			ns:      packed("w", schema.Storage{AppendOptimized: true, Orientation: "row"}),
			want:    []string{"WITH (appendoptimized=true, orientation=row)\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, err := schema.Plan(tt.dialect, []schema.Table{tt.ns})
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			got := schema.Render(steps)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("DDL lacks %q:\n%s", w, got)
				}
			}
		})
	}
}

func TestPlanSkipsUnmanaged(t *testing.T) {
	external := packed("external", schema.Storage{Orientation: "diagonal"}) // never checked
	external.Managed = false
	steps, err := schema.Plan(dialect.Postgres, []schema.Table{external, packed("widgets", schema.Storage{})})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	var labels []string
	for _, s := range steps {
		labels = append(labels, s.Label())
	}
	want := []string{"0001 version_sequence", "0002 namespace_table (widgets)", "0003 dictionaries", "0004 freshness", "0005 namespace_freshness (widgets)", "0006 namespace_expiry (widgets)"}
	if strings.Join(labels, "|") != strings.Join(want, "|") {
		t.Errorf("steps = %q, want %q", labels, want)
	}
	if steps[0].Scope != "" || steps[1].Scope != "widgets" || steps[1].Version != 2 || steps[1].Name != "namespace_table" {
		t.Errorf("steps = %+v", steps)
	}
}

func TestPlanRejects(t *testing.T) {
	tests := []struct {
		name    string
		dialect dialect.Dialect
		edit    func(ns *warmcache.Namespace, st *schema.Storage)
		want    string
	}{
		{"orientation", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { st.Orientation = "diagonal" },
			`namespace "widgets": storage.orientation: must be row or column, got "diagonal"`},
		{"column without appendoptimized", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) { st.Orientation = "column" },
			`namespace "widgets": storage.orientation: column needs storage.appendoptimized`},
		{"unknown compression", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { st.Compression = "gzip" },
			`namespace "widgets": storage.compression: must be one of`},
		{"unknown compression greenplum", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) { st.Compression = "brotli" },
			`namespace "widgets": storage.compression: must be one of`},
		{"zstd on greenplum heap", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) { st.Compression = "zstd" },
			`namespace "widgets": storage.compression: zstd needs storage.appendoptimized`},
		{"rle_type on row", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) {
			st.AppendOptimized, st.Compression = true, "rle_type"
		}, `namespace "widgets": storage.compression: rle_type needs storage.orientation column`},
		{"zstd level", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) {
			st.AppendOptimized, st.Compression, st.CompressLevel = true, "zstd", 20
		}, `namespace "widgets": storage.compress_level: must be between 1 and 19 for zstd, got 20`},
		{"zlib level", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) {
			st.AppendOptimized, st.Compression, st.CompressLevel = true, "zlib", 10
		}, `namespace "widgets": storage.compress_level: must be between 1 and 9 for zlib`},
		{"level without compression", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) {
			st.AppendOptimized, st.CompressLevel = true, 3
		}, `namespace "widgets": storage.compress_level: needs storage.compression`},
		{"level on heap", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) { st.CompressLevel = 3 },
			`namespace "widgets": storage.compress_level: needs storage.appendoptimized`},
		{"negative level", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { st.CompressLevel = -1 },
			`namespace "widgets": storage.compress_level: must not be negative`},
		{"negative partitions", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { st.Partitions = -1 },
			`namespace "widgets": storage.partitions: must be between 1 and 1024, got -1`},
		{"too many partitions", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { st.Partitions = 5000 },
			`namespace "widgets": storage.partitions: must be between 1 and 1024, got 5000`},
		{"gin on columns", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) {
			ns.Layout, ns.ValueColumn, ns.Columns = warmcache.LayoutColumns, "", []warmcache.Column{{Name: "a", Type: "text"}}
			st.GINIndex = true
		}, `namespace "widgets": storage.gin_index: needs value.layout packed`},
		{"gin on bytes", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) {
			ns.Layout = warmcache.LayoutBytes
			st.GINIndex = true
		}, `namespace "widgets": storage.gin_index: needs value.layout packed`},
		{"column type injection", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) {
			ns.Layout, ns.ValueColumn = warmcache.LayoutColumns, ""
			ns.Columns = []warmcache.Column{{Name: "a", Type: "text"}, {Name: "b", Type: "text); DROP TABLE users; --"}}
		}, `namespace "widgets": value.columns[1].type: must be one of text, varchar(n)`},
		{"numeric scale above precision", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) {
			ns.Layout, ns.ValueColumn = warmcache.LayoutColumns, ""
			ns.Columns = []warmcache.Column{{Name: "a", Type: "numeric(2,5)"}}
		}, `namespace "widgets": value.columns[0].type: must be one of`},
		{"no columns", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) {
			ns.Layout, ns.ValueColumn = warmcache.LayoutColumns, ""
		},
			`namespace "widgets": value.columns: layout columns needs at least one column`},
		{"column named like the key", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) {
			ns.Layout, ns.ValueColumn = warmcache.LayoutColumns, ""
			ns.Columns = []warmcache.Column{{Name: "key", Type: "text"}}
		}, `namespace "widgets": value.columns[0].name: "key" is also key.column`},
		{"layout", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { ns.Layout = "wide" },
			`namespace "widgets": value.layout: must be packed, columns or bytes, got "wide"`},
		{"key type", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { ns.KeyType = "uuid" },
			`namespace "widgets": key.type: must be bigint or text, got "uuid"`},
		{"empty key column", dialect.Greenplum, func(ns *warmcache.Namespace, st *schema.Storage) { ns.KeyColumn = "" },
			`namespace "widgets": key.column: must not be empty`},
		{"empty version column", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { ns.VersionColumn = "" },
			`namespace "widgets": version_column: must not be empty`},
		{"three-part table", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { ns.Table = "db.s.t" },
			`namespace "widgets": table: must be a table name, optionally schema-qualified, got "db.s.t"`},
		{"long table for partitions", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { ns.Table = strings.Repeat("t", 62) },
			`namespace "widgets": table: partition name`},
		{"control character in name", dialect.Postgres, func(ns *warmcache.Namespace, st *schema.Storage) { ns.Name = "wid\ngets" },
			`name: must not contain control characters`},
		{"unknown dialect", 0, func(*warmcache.Namespace, *schema.Storage) {}, `unknown dialect`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := packed("widgets", schema.Storage{})
			tt.edit(tb.Namespace, &tb.Storage)
			steps, err := schema.Plan(tt.dialect, []schema.Table{tb})
			if err == nil {
				t.Fatalf("Plan succeeded, want an error containing %q; DDL:\n%s", tt.want, schema.Render(steps))
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Plan error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestPlanRejectsDuplicates(t *testing.T) {
	a, b := packed("widgets", schema.Storage{}), packed("gadgets", schema.Storage{})
	b.Namespace.Table = "widgets"
	_, err := schema.Plan(dialect.Postgres, []schema.Table{a, b})
	if err == nil || !strings.Contains(err.Error(), `namespace "gadgets": table: "widgets" is also the table of namespace "widgets"`) {
		t.Errorf("Plan error = %v, want the shared table named", err)
	}
	_, err = schema.Plan(dialect.Postgres, []schema.Table{a, packed("widgets", schema.Storage{})})
	if err == nil || !strings.Contains(err.Error(), `namespace "widgets": name: declared twice`) {
		t.Errorf("Plan error = %v, want the duplicate name", err)
	}
}
