package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/pgstore"
	migrations "github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// variant is one storage of a managed namespace. On PostgreSQL the
// append-optimized options are not applied (migrate notes it), so the same
// assertions run on heap tables there.
type variant struct {
	name    string
	storage migrations.Storage
}

// variants are the storages the lane covers: heap, append-optimized row and
// append-optimized column, each zstd-compressed when append-optimized.
func variants() []variant {
	return []variant{
		{"heap", migrations.Storage{Partitions: 2, GINIndex: true}},
		{"ao_row", migrations.Storage{AppendOptimized: true, Orientation: "row", Compression: "zstd", GINIndex: true}},
		{"ao_column", migrations.Storage{AppendOptimized: true, Orientation: "column", Compression: "zstd", GINIndex: true}},
	}
}

// laneTables returns the tables of a packed, a columns-layout and a bytes
// namespace for each variant, all managed, so that migrate creates them.
func laneTables() []migrations.Table {
	var out []migrations.Table
	for _, v := range variants() {
		columns := v.storage
		columns.GINIndex = false
		out = append(out,
			migrations.Table{Namespace: &warmcache.Namespace{
				Name: v.name + "_packed", Table: v.name + "_packed", KeyColumn: "key", KeyType: warmcache.KeyBigint,
				Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version",
				ExpiresColumn: "expires_at", Writable: true,
			}, Managed: true, Storage: v.storage},
			migrations.Table{Namespace: &warmcache.Namespace{
				Name: v.name + "_columns", Table: v.name + "_columns", KeyColumn: "id", KeyType: warmcache.KeyBigint,
				Layout: warmcache.LayoutColumns,
				Columns: []warmcache.Column{
					{Name: "name", Type: "text"},
					{Name: "age", Type: "integer"},
				},
				VersionColumn: "version", ExpiresColumn: "expires_at", Writable: true,
			}, Managed: true, Storage: columns},
			bytesTable(v.name+"_bytes", columns))
	}
	return out
}

// bytesTable returns a managed table of a bytes namespace called name.
func bytesTable(name string, st migrations.Storage) migrations.Table {
	return migrations.Table{Namespace: &warmcache.Namespace{
		Name: name, Table: name, KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutBytes, ValueColumn: "blob", VersionColumn: "version",
		ExpiresColumn: "expires_at", Writable: true,
	}, Managed: true, Storage: st}
}

// packedLaneTables returns the lane's tables of the packed layout.
func packedLaneTables() []migrations.Table {
	var out []migrations.Table
	for _, tb := range laneTables() {
		if tb.Namespace.Layout == warmcache.LayoutPacked {
			out = append(out, tb)
		}
	}
	return out
}

// namespacesOf returns the namespaces of tables.
func namespacesOf(tables []migrations.Table) []*warmcache.Namespace {
	out := make([]*warmcache.Namespace, len(tables))
	for i, tb := range tables {
		out[i] = tb.Namespace
	}
	return out
}

// migrated creates a database on w, applies the migrations of the lane's
// tables and returns its DSN.
func migrated(t testing.TB, w testenv.Warehouse, tables []migrations.Table) string {
	t.Helper()
	dsn := w.NewDatabase(t)
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	m, err := migrations.OpenMigrator(ctx, conn, tables, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Dialect().String(), w.Name; got != want {
		t.Fatalf("detected dialect %s, want %s", got, want)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	return dsn
}

// laneStore opens a small store (the Greenplum coordinator takes 100
// connections in all) on dsn.
func laneStore(t *testing.T, dsn string, namespaces ...*warmcache.Namespace) *pgstore.Store {
	t.Helper()
	s, err := openStore(t, pgstore.Options{DSN: dsn, MaxConns: 2}, prometheus.NewRegistry(), namespaces...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// value returns a document of ns's layout for n.
func value(ns *warmcache.Namespace, n int, tag string) []byte {
	if ns.Layout == warmcache.LayoutBytes {
		return fmt.Appendf([]byte{0x00, 0xff, '\\', 'x'}, "%d %s\x00", n, tag)
	}
	if ns.Layout == warmcache.LayoutColumns {
		return fmt.Appendf(nil, `{"name": %q, "age": %d}`, tag, n)
	}
	return fmt.Appendf(nil, `{"n": %d, "tag": %q}`, n, tag)
}

// TestWarehouseLane runs reads, writes, conditional writes, _mget, _query
// and bulk loads on every storage variant and the JSON layouts, and reads,
// writes and round trips of every byte value on the bytes layout (which
// takes no loads or queries), on PostgreSQL and on Greenplum, with the same
// assertions.
func TestWarehouseLane(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			tables := laneTables()
			dsn := migrated(t, w, tables)
			namespaces := namespacesOf(tables)
			s := laneStore(t, dsn, namespaces...)
			if got := s.Dialect().String(); got != w.Name {
				t.Fatalf("Dialect() = %s, want %s", got, w.Name)
			}
			for _, ns := range namespaces {
				t.Run(ns.Name, func(t *testing.T) {
					t.Run("writes", func(t *testing.T) { checkWrites(t, s, ns) })
					if ns.Layout == warmcache.LayoutBytes {
						t.Run("bytes", func(t *testing.T) { checkBytes(t, s, ns, blockBound(w, ns)) })
						return
					}
					t.Run("load", func(t *testing.T) { checkLoad(t, s, dsn, ns) })
					if ns.Layout == warmcache.LayoutPacked {
						t.Run("query", func(t *testing.T) { checkQuery(t, s, ns) })
					}
				})
			}
		})
	}
}

// checkWrites puts, reads, conditionally writes and deletes one key. On
// Greenplum's append-optimized tables every update and delete of an
// existing key used to fail with 0A000 (DELETE ... RETURNING), and a wrong
// If-Match with it instead of a version mismatch.
func checkWrites(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace) {
	ctx := testContext(t)
	k := key(t, ns, "7")
	e1, err := s.Put(ctx, ns, k, value(ns, 1, "one"), nil)
	if err != nil {
		t.Fatalf("Put new key: %v", err)
	}
	e2, err := s.Put(ctx, ns, k, value(ns, 2, "two"), nil)
	if err != nil {
		t.Fatalf("Put existing key: %v", err)
	}
	if e2.Version <= e1.Version {
		t.Fatalf("versions went %d then %d, want growing", e1.Version, e2.Version)
	}
	got, err := s.Lookup(ctx, ns, k)
	if err != nil || !got.Found || got.Version != e2.Version || !strings.Contains(string(got.Value), "two") {
		t.Fatalf("Lookup after Put = %+v (%s), %v; want version %d with tag two", got, got.Value, err, e2.Version)
	}
	stale := e1.Version
	if _, err := s.Put(ctx, ns, k, value(ns, 3, "three"), &stale); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Fatalf("Put with a stale If-Match = %v, want ErrVersionMismatch", err)
	}
	e3, err := s.Put(ctx, ns, k, value(ns, 3, "three"), &e2.Version)
	if err != nil || e3.Version <= e2.Version {
		t.Fatalf("Put with the right If-Match = %+v, %v; want a version over %d", e3, err, e2.Version)
	}
	absent := key(t, ns, "999999")
	if _, err := s.Put(ctx, ns, absent, value(ns, 1, "x"), &e3.Version); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Fatalf("Put with If-Match on an absent key = %v, want ErrVersionMismatch", err)
	}

	many, err := s.LookupMany(ctx, ns, []warmcache.Key{absent, k})
	if err != nil || len(many) != 2 || many[0].Found || !many[1].Found || many[1].Version != e3.Version {
		t.Fatalf("LookupMany = %+v, %v; want [absent, version %d]", many, err, e3.Version)
	}

	if _, err := s.Delete(ctx, ns, k, &stale); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Fatalf("Delete with a stale If-Match = %v, want ErrVersionMismatch", err)
	}
	dv, err := s.Delete(ctx, ns, k, &e3.Version)
	if err != nil || dv <= e3.Version {
		t.Fatalf("Delete with the right If-Match = %d, %v; want a version over %d", dv, err, e3.Version)
	}
	if got, err := s.Lookup(ctx, ns, k); err != nil || got.Found {
		t.Fatalf("Lookup after Delete = %+v, %v; want absent", got, err)
	}
	if _, err := s.Delete(ctx, ns, k, nil); !errors.Is(err, warmcache.ErrNotFound) {
		t.Fatalf("Delete of an absent key = %v, want ErrNotFound", err)
	}
	e4, err := s.Put(ctx, ns, k, value(ns, 4, "four"), nil)
	if err != nil {
		t.Fatalf("Put after Delete: %v", err)
	}
	dv, err = s.Delete(ctx, ns, k, nil)
	if err != nil || dv <= e4.Version {
		t.Fatalf("Delete = %d, %v; want a version over %d", dv, err, e4.Version)
	}
}

// loadRows are the lines of a load into ns: keys from..to.
func loadRows(ns *warmcache.Namespace, from, to int, tag string) *sliceRows {
	rows := &sliceRows{}
	for k := from; k <= to; k++ {
		rows.rows = append(rows.rows, warmcache.LoadRow{
			Line: int64(len(rows.rows) + 1), Key: warmcache.Key{Text: fmt.Sprint(k), Int: int64(k)}, Value: value(ns, k, tag),
		})
	}
	return rows
}

// checkLoad loads 20,000 rows into a table that already had its first
// insert, then reloads part of them changed. On Greenplum the columns
// layout's merge never finished before its record moved into a subquery's
// select list, and statistics stayed at the first insert's (reltuples 1)
// until something ran ANALYZE.
func checkLoad(t *testing.T, s *pgstore.Store, dsn string, ns *warmcache.Namespace) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := s.Put(ctx, ns, key(t, ns, "1"), value(ns, 1, "first"), nil); err != nil {
		t.Fatalf("first Put: %v", err)
	}
	const n = 20_000
	start := time.Now()
	counts, err := s.Load(ctx, ns, loadRows(ns, 1, n, "a"))
	if err != nil {
		t.Fatalf("Load of %d rows: %v", n, err)
	}
	t.Logf("loaded %d rows in %s", n, time.Since(start).Round(time.Millisecond))
	if counts.Inserted != n-1 || counts.Updated != 1 || len(counts.Changed) != n {
		t.Fatalf("Load counts = %d inserted, %d updated, %d changed; want %d inserted and 1 updated",
			counts.Inserted, counts.Updated, len(counts.Changed), n-1)
	}
	var reltuples float64
	if err := queryRow(t, dsn, "SELECT reltuples::float8 FROM pg_class WHERE oid = to_regclass($1)", ns.Table).Scan(&reltuples); err != nil {
		t.Fatal(err)
	}
	if reltuples < n/2 {
		t.Errorf("reltuples = %v after loading %d rows, want the load to have analyzed the table", reltuples, n)
	}
	before, err := s.Lookup(ctx, ns, key(t, ns, "10"))
	if err != nil || !before.Found {
		t.Fatalf("Lookup after Load = %+v, %v", before, err)
	}

	counts, err = s.Load(ctx, ns, loadRows(ns, 1, 100, "b"))
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	if counts.Updated != 100 || counts.Inserted != 0 || counts.Unchanged != 0 {
		t.Fatalf("reload counts = %d inserted, %d updated, %d unchanged; want 100 updated", counts.Inserted, counts.Updated, counts.Unchanged)
	}
	after, err := s.Lookup(ctx, ns, key(t, ns, "10"))
	if err != nil || !after.Found || after.Version <= before.Version || !strings.Contains(string(after.Value), `"b"`) {
		t.Fatalf("Lookup after reload = %+v (%s), %v; want tag b at a version over %d", after, after.Value, err, before.Version)
	}
	counts, err = s.Load(ctx, ns, loadRows(ns, 1, 100, "b"))
	if err != nil || counts.Unchanged != 100 || len(counts.Changed) != 0 {
		t.Fatalf("same reload = %+v, %v; want 100 unchanged", counts, err)
	}
}

// checkQuery runs a containment query after checkLoad's rows.
func checkQuery(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace) {
	ctx := testContext(t)
	rows, err := s.Query(ctx, ns, []byte(`{"tag": "b"}`), 10, nil)
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if len(rows) != 10 || rows[0].Key.Text != "1" || rows[9].Key.Text != "10" {
		t.Fatalf("Query = %d rows (%v), want keys 1..10", len(rows), rows)
	}
}

// queryRow runs one query on the database of dsn.
func queryRow(t *testing.T, dsn, sql string, args ...any) pgx.Row {
	t.Helper()
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn.QueryRow(ctx, sql, args...)
}

// TestVersionsNeverGoBackwards writes one key in turn through three stores
// of one connection each, on a version sequence with CACHE 20: each session
// then draws from its own block (1, 21, 41, 2, ...), as every sequence
// created without CACHE does on Greenplum. The versions a key gets must
// still grow with every write and its delete, on every dialect and storage.
// (A key inserted again after its delete has no row to be ordered after:
// there only the sequence orders it, which is why migrate makes it CACHE 1
// and the doctor warns about a cached one.)
func TestVersionsNeverGoBackwards(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			tables := packedLaneTables()
			dsn := migrated(t, w, tables)
			namespaces := namespacesOf(tables)
			var cache int64
			if err := queryRow(t, dsn, "SELECT cache_size FROM pg_sequences WHERE sequencename = $1", pgstore.VersionSequence).Scan(&cache); err != nil {
				t.Fatal(err)
			}
			if cache != 1 {
				t.Errorf("migrate created %s with CACHE %d, want 1", pgstore.VersionSequence, cache)
			}
			execSQL(t, dsn, "ALTER SEQUENCE "+pgstore.VersionSequence+" CACHE 20")
			stores := make([]*pgstore.Store, 3)
			for i := range stores {
				s, err := openStore(t, pgstore.Options{DSN: dsn, MaxConns: 1, MinConns: 1}, prometheus.NewRegistry(), namespaces...)
				if err != nil {
					t.Fatal(err)
				}
				stores[i] = s
			}
			for _, ns := range namespaces {
				t.Run(ns.Name, func(t *testing.T) {
					ctx := testContext(t)
					k := key(t, ns, "42")
					var versions []int64
					const rounds = 9
					for round := range rounds {
						s := stores[round%len(stores)]
						var v int64
						if round == rounds-1 {
							var err error
							if v, err = s.Delete(ctx, ns, k, nil); err != nil {
								t.Fatalf("round %d: Delete: %v", round, err)
							}
						} else {
							e, err := s.Put(ctx, ns, k, value(ns, round, "r"), nil)
							if err != nil {
								t.Fatalf("round %d: Put: %v", round, err)
							}
							v = e.Version
						}
						versions = append(versions, v)
					}
					if !slices.IsSorted(versions) || len(slices.Compact(slices.Clone(versions))) != len(versions) {
						t.Fatalf("versions of one key across sessions: %v, want strictly growing", versions)
					}
				})
			}
		})
	}
}

// TestLoadStatementTimeout bounds a load's statements: with a timeout too
// short for any merge, the load fails on both dialects and leaves the table
// as it was.
func TestLoadStatementTimeout(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			tables := laneTables()[:1]
			namespaces := namespacesOf(tables)
			ns := namespaces[0]
			dsn := migrated(t, w, tables)
			s, err := openStore(t, pgstore.Options{DSN: dsn, MaxConns: 1, LoadStatementTimeout: time.Millisecond}, prometheus.NewRegistry(), namespaces...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Load(testContext(t), ns, loadRows(ns, 1, 20_000, "a"))
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.QueryCanceled {
				t.Fatalf("Load with a 1ms statement timeout = %v, want a canceled statement (57014)", err)
			}
			var n int
			if err := queryRow(t, dsn, "SELECT count(*) FROM "+ns.Table).Scan(&n); err != nil || n != 0 {
				t.Fatalf("table has %d rows (%v) after a load that timed out, want 0", n, err)
			}
		})
	}
}
