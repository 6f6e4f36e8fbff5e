package pgstore_test

import (
	"fmt"
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/pgstore"
	migrations "github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// mixTables are three managed namespaces whose loads stage different
// shapes: bigint keys (nums), text keys (names), and text keys with the
// columns layout (cards).
func mixTables() []migrations.Table {
	return []migrations.Table{
		{Namespace: &warmcache.Namespace{
			Name: "nums", Table: "nums", KeyColumn: "key", KeyType: warmcache.KeyBigint,
			Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true,
		}, Managed: true},
		{Namespace: &warmcache.Namespace{
			Name: "names", Table: "names", KeyColumn: "key", KeyType: warmcache.KeyText,
			Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true,
		}, Managed: true},
		{Namespace: &warmcache.Namespace{
			Name: "cards", Table: "cards", KeyColumn: "id", KeyType: warmcache.KeyText,
			Layout:        warmcache.LayoutColumns,
			Columns:       []warmcache.Column{{Name: "name", Type: "text"}, {Name: "age", Type: "integer"}},
			VersionColumn: "version", Writable: true,
		}, Managed: true},
	}
}

// TestLoadMixedKeyTypes loads into namespaces of different key types
// through one pool of one connection, so that every load runs on the
// connection the previous one used, with whatever that connection keeps
// from it. A text key whose digits are a bigint must be stored as that
// text, never as the eight bytes of the number ("dddddddd" for
// 7234017283807667300), and loads that alternate between the shapes must
// each store exactly their own rows. On PostgreSQL it runs through every
// target (exec mode, direct or through PgBouncer); on Greenplum with the
// store's default modes.
func TestLoadMixedKeyTypes(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			if w.Greenplum {
				tables := mixTables()
				dsn := migrated(t, w, tables)
				s, err := openStore(t, pgstore.Options{DSN: dsn, MaxConns: 1}, prometheus.NewRegistry(), namespacesOf(tables)...)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				checkMixedLoads(t, s, dsn, namespacesOf(tables))
				return
			}
			eachTarget(t, func(t *testing.T, tg target) {
				tables := mixTables()
				dsn := migrated(t, w, tables)
				opts := options(t, dsn, tg)
				opts.MaxConns = 1
				s, err := openStore(t, opts, prometheus.NewRegistry(), namespacesOf(tables)...)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if got := s.ExecMode(); got != tg.wantMode {
					t.Errorf("ExecMode() = %q, want %q", got, tg.wantMode)
				}
				checkMixedLoads(t, s, dsn, namespacesOf(tables))
			})
		})
	}
}

// mixLoader loads into the namespaces of checkMixedLoads and keeps what
// each table should hold: its rows' values as the warehouse prints them,
// by key text.
type mixLoader struct {
	t    *testing.T
	s    *pgstore.Store
	want map[string]map[string]string
}

// load loads one line per key into ns with the value of ns's layout for
// n, and checks that the load succeeded and counted each key.
func (m *mixLoader) load(ns *warmcache.Namespace, n int, keys ...string) {
	m.t.Helper()
	rows := &sliceRows{}
	for i, raw := range keys {
		v := fmt.Appendf(nil, `{"v": %d}`, n)
		printed := string(v)
		if ns.Layout == warmcache.LayoutColumns {
			v = fmt.Appendf(nil, `{"name": %q, "age": %d}`, raw, n)
			printed = fmt.Sprintf("%s/%d", raw, n)
		}
		rows.rows = append(rows.rows, warmcache.LoadRow{Line: int64(i + 1), Key: key(m.t, ns, raw), Value: v})
		m.want[ns.Name][raw] = printed
	}
	counts, err := m.s.Load(testContext(m.t), ns, rows)
	if err != nil {
		m.t.Fatalf("Load of %q into %s (%s keys): %v", keys, ns.Name, ns.KeyType, err)
	}
	if got := counts.Inserted + counts.Updated + counts.Unchanged; got != int64(len(keys)) {
		m.t.Fatalf("Load of %q into %s = %+v, want %d keys counted", keys, ns.Name, counts, len(keys))
	}
}

// check compares every table with what the loads so far should have left.
func (m *mixLoader) check(dsn, when string) {
	m.t.Helper()
	queries := map[string]string{
		"nums":  "SELECT key::text, value::text, version::text FROM nums",
		"names": "SELECT key, value::text, version::text FROM names",
		"cards": "SELECT id, name || '/' || age::text, version::text FROM cards",
	}
	for name, query := range queries {
		got := map[string]string{}
		for k, row := range tableState(m.t, dsn, query) {
			got[k] = row[0]
		}
		if !maps.Equal(got, m.want[name]) {
			m.t.Fatalf("%s: table %s holds\n%v\nwant\n%v", when, name, got, m.want[name])
		}
	}
}

// checkMixedLoads alternates loads between the key types of namespaces
// (nums, names, cards of mixTables) on one store.
func checkMixedLoads(t *testing.T, s *pgstore.Store, dsn string, namespaces []*warmcache.Namespace) {
	nums, names, cards := namespaces[0], namespaces[1], namespaces[2]
	m := &mixLoader{t: t, s: s, want: map[string]map[string]string{"nums": {}, "names": {}, "cards": {}}}

	m.load(nums, 0, "1")
	m.load(names, 1, "7234017283807667300")
	ctx := testContext(t)
	got, err := s.Lookup(ctx, names, key(t, names, "7234017283807667300"))
	if err != nil || !got.Found || string(got.Value) != `{"v": 1}` {
		t.Fatalf("Lookup of text key 7234017283807667300 after the load = %+v (%s), %v; want {\"v\": 1}", got, got.Value, err)
	}
	if got, err := s.Lookup(ctx, names, key(t, names, "dddddddd")); err != nil || got.Found {
		t.Fatalf("Lookup of text key dddddddd = %+v (%s), %v; want absent", got, got.Value, err)
	}
	m.check(dsn, "after a bigint load then a text load")

	// Each round goes bigint, text, bigint, text columns, text: keys that
	// parse as numbers, that would hold a NUL as the bytes of a bigint
	// ("1"), that are not numbers at all, and numbers of the bigint
	// namespace that are not valid UTF-8 as bytes.
	for r := 1; r <= 4; r++ {
		m.load(nums, 10*r, fmt.Sprint(r), fmt.Sprint(-100-r), "7234017283807667300", "-1")
		m.load(names, 10*r+1, "1", fmt.Sprintf("key-%d", r), "7234017283807667300", "dddddddd")
		m.load(nums, 10*r+2, fmt.Sprint(1000+r), "9223372036854775807")
		m.load(cards, 10*r+3, fmt.Sprintf("card-%d", r), "42", "-9")
		m.load(names, 10*r+4, fmt.Sprint(r), "ünïcödé")
		m.check(dsn, fmt.Sprintf("round %d", r))
	}
}
