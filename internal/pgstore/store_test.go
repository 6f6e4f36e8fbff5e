package pgstore_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// seed holds rows the read tests expect.
const seed = `
INSERT INTO widgets (key, value, version) VALUES
	(1, '{"name": "one"}', nextval('warmcache_version_seq')),
	(2, '{"name": "two"}', nextval('warmcache_version_seq')),
	(3, '{"name": "three", "tags": ["a", "b"]}', nextval('warmcache_version_seq')),
	(-7, '{"name": "minus seven"}', nextval('warmcache_version_seq'));
INSERT INTO app.sessions (id, doc, version) VALUES
	('alpha', '{"user": 1}', nextval('warmcache_version_seq')),
	('it''s "quoted"', '{"user": 2}', nextval('warmcache_version_seq'));
INSERT INTO people (id, name, age, tags, version) VALUES
	(1, 'Ann', 41, '["a"]', nextval('warmcache_version_seq')),
	(2, 'Bo', NULL, NULL, nextval('warmcache_version_seq'));
`

func TestLookup(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		widgets, sessions, people := widgetsNamespace(), sessionsNamespace(), peopleNamespace()
		s := mustOpenStore(t, newDatabase(t, schema+seed), tg, widgets, sessions, people)
		tests := []struct {
			name  string
			ns    *warmcache.Namespace
			key   string
			found bool
			value string
		}{
			{"bigint found", widgets, "1", true, `{"name": "one"}`},
			{"bigint negative", widgets, "-7", true, `{"name": "minus seven"}`},
			{"bigint absent", widgets, "42", false, ""},
			{"text found", sessions, "alpha", true, `{"user": 1}`},
			{"text with quotes", sessions, `it's "quoted"`, true, `{"user": 2}`},
			{"text absent", sessions, "beta", false, ""},
			{"columns found", people, "1", true, `{"name" : "Ann", "age" : 41, "tags" : ["a"]}`},
			{"columns with nulls", people, "2", true, `{"name" : "Bo", "age" : null, "tags" : null}`},
			{"columns absent", people, "3", false, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				e, err := s.Lookup(testContext(t), tt.ns, key(t, tt.ns, tt.key))
				if err != nil {
					t.Fatalf("Lookup: %v", err)
				}
				if e.Found != tt.found || string(e.Value) != tt.value {
					t.Fatalf("Lookup = found %v, value %s; want found %v, value %s", e.Found, e.Value, tt.found, tt.value)
				}
				if tt.found != (e.Version > 0) {
					t.Errorf("Lookup version = %d, found %v", e.Version, e.Found)
				}
			})
		}
	})
}

func TestLookupMany(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		widgets, sessions, people := widgetsNamespace(), sessionsNamespace(), peopleNamespace()
		s := mustOpenStore(t, newDatabase(t, schema+seed), tg, widgets, sessions, people)
		tests := []struct {
			name   string
			ns     *warmcache.Namespace
			keys   []string
			values []string // "" for absent
		}{
			{"bigint order, absent and repeated keys", widgets, []string{"3", "99", "1", "3", "-7"},
				[]string{`{"name": "three", "tags": ["a", "b"]}`, "", `{"name": "one"}`, `{"name": "three", "tags": ["a", "b"]}`, `{"name": "minus seven"}`}},
			{"bigint all absent", widgets, []string{"100", "101"}, []string{"", ""}},
			{"text", sessions, []string{"nope", `it's "quoted"`, "alpha"}, []string{"", `{"user": 2}`, `{"user": 1}`}},
			{"columns", people, []string{"2", "1"}, []string{`{"name" : "Bo", "age" : null, "tags" : null}`, `{"name" : "Ann", "age" : 41, "tags" : ["a"]}`}},
			{"no keys", widgets, nil, nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				keys := make([]warmcache.Key, len(tt.keys))
				for i, raw := range tt.keys {
					keys[i] = key(t, tt.ns, raw)
				}
				entries, err := s.LookupMany(testContext(t), tt.ns, keys)
				if err != nil {
					t.Fatalf("LookupMany: %v", err)
				}
				if len(entries) != len(keys) {
					t.Fatalf("LookupMany returned %d entries for %d keys", len(entries), len(keys))
				}
				for i, e := range entries {
					want := tt.values[i]
					if e.Found != (want != "") || string(e.Value) != want || (e.Version > 0) != e.Found {
						t.Errorf("entry %d (key %s) = found %v, value %s, version %d; want value %q", i, tt.keys[i], e.Found, e.Value, e.Version, want)
					}
				}
			})
		}
	})
}

func TestPut(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		widgets, sessions := widgetsNamespace(), sessionsNamespace()
		s := mustOpenStore(t, newDatabase(t, schema), tg, widgets, sessions)
		t.Run("bigint", func(t *testing.T) { checkPut(t, s, widgets, "10", "11") })
		t.Run("text", func(t *testing.T) { checkPut(t, s, sessions, "user:10", "it's new") })
	})
}

func TestPutAppendOptimizedWrites(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		widgets := widgetsNamespace()
		s := mustOpenStore(t, newDatabase(t, schema), tg, widgets)
		if err := s.UseAppendOptimizedWrites(widgets.Name); err != nil {
			t.Fatal(err)
		}
		t.Run("put", func(t *testing.T) { checkPut(t, s, widgets, "10", "11") })
		t.Run("delete", func(t *testing.T) { checkDelete(t, s, widgets) })
	})
}

// checkPut checks the write semantics of a packed namespace on two keys
// that do not exist yet.
func checkPut(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace, rawKey, rawAbsent string) {
	t.Helper()
	ctx := testContext(t)
	k, absent := key(t, ns, rawKey), key(t, ns, rawAbsent)

	first, err := s.Put(ctx, ns, k, []byte(`{"b": 1,   "a": [1,2]}`), nil)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if want := `{"a": [1, 2], "b": 1}`; !first.Found || string(first.Value) != want || first.Version <= 0 {
		t.Fatalf("Put = %+v, want found, value %s and a version", first, want)
	}
	got, err := s.Lookup(ctx, ns, k)
	if err != nil || string(got.Value) != string(first.Value) || got.Version != first.Version {
		t.Fatalf("Lookup after Put = %+v, %v; want %+v", got, err, first)
	}

	second, err := s.Put(ctx, ns, k, []byte(`{"a": 2}`), nil)
	if err != nil {
		t.Fatalf("second Put: %v", err)
	}
	if second.Version <= first.Version {
		t.Errorf("second Put version %d, not above the first %d", second.Version, first.Version)
	}

	third, err := s.Put(ctx, ns, k, []byte(`{"a": 3}`), &second.Version)
	if err != nil {
		t.Fatalf("Put with the current version: %v", err)
	}
	if third.Version <= second.Version || string(third.Value) != `{"a": 3}` {
		t.Errorf("Put with the current version = %+v, want value {\"a\": 3} above version %d", third, second.Version)
	}

	if _, err := s.Put(ctx, ns, k, []byte(`{"a": 4}`), &first.Version); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Errorf("Put with a stale version: error %v, want ErrVersionMismatch", err)
	}
	if got, _ := s.Lookup(ctx, ns, k); string(got.Value) != `{"a": 3}` || got.Version != third.Version {
		t.Errorf("after a refused Put the row is %s at %d, want {\"a\": 3} at %d", got.Value, got.Version, third.Version)
	}

	if _, err := s.Put(ctx, ns, absent, []byte(`{}`), &first.Version); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Errorf("Put with a version on an absent key: error %v, want ErrVersionMismatch", err)
	}
	if got, _ := s.Lookup(ctx, ns, absent); got.Found {
		t.Errorf("a refused Put created the key: %+v", got)
	}

	if _, err := s.Put(ctx, ns, absent, []byte(`{"a":`), nil); !errors.Is(err, warmcache.ErrInvalidValue) {
		t.Errorf("Put of broken JSON: error %v, want ErrInvalidValue", err)
	}
}

func TestDelete(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		widgets := widgetsNamespace()
		s := mustOpenStore(t, newDatabase(t, schema), tg, widgets)
		checkDelete(t, s, widgets)
	})
}

// checkDelete checks the delete semantics on keys 1 and 2 of ns, which do
// not exist yet.
func checkDelete(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace) {
	t.Helper()
	ctx := testContext(t)
	one, two := key(t, ns, "1"), key(t, ns, "2")
	put, err := s.Put(ctx, ns, one, []byte(`{"n": 1}`), nil)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	stale := put.Version - 1
	if _, err := s.Delete(ctx, ns, one, &stale); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Errorf("Delete with a stale version: error %v, want ErrVersionMismatch", err)
	}
	if got, _ := s.Lookup(ctx, ns, one); !got.Found {
		t.Fatal("a refused Delete removed the key")
	}

	version, err := s.Delete(ctx, ns, one, nil)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if version <= put.Version {
		t.Errorf("Delete version %d, not above the row's %d", version, put.Version)
	}
	if got, err := s.Lookup(ctx, ns, one); err != nil || got.Found {
		t.Errorf("Lookup after Delete = %+v, %v; want absent", got, err)
	}
	if _, err := s.Delete(ctx, ns, one, nil); !errors.Is(err, warmcache.ErrNotFound) {
		t.Errorf("second Delete: error %v, want ErrNotFound", err)
	}
	if _, err := s.Delete(ctx, ns, two, &put.Version); !errors.Is(err, warmcache.ErrNotFound) {
		t.Errorf("Delete of an absent key with a version: error %v, want ErrNotFound", err)
	}

	put, err = s.Put(ctx, ns, two, []byte(`{"n": 2}`), nil)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if version, err = s.Delete(ctx, ns, two, &put.Version); err != nil || version <= put.Version {
		t.Errorf("Delete with the current version = %d, %v; want a version above %d", version, err, put.Version)
	}
}

func TestColumnsLayout(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		people := peopleNamespace()
		s := mustOpenStore(t, newDatabase(t, schema), tg, people)
		ctx := testContext(t)
		k := key(t, people, "5")

		put, err := s.Put(ctx, people, k, []byte(`{"name": "Cy", "age": 7, "tags": {"k": [1, 2]}}`), nil)
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		if want := `{"name" : "Cy", "age" : 7, "tags" : {"k": [1, 2]}}`; string(put.Value) != want {
			t.Errorf("Put value %s, want %s", put.Value, want)
		}
		got, err := s.Lookup(ctx, people, k)
		if err != nil || string(got.Value) != string(put.Value) || got.Version != put.Version {
			t.Fatalf("Lookup after Put = %+v, %v; want %+v", got, err, put)
		}

		partial, err := s.Put(ctx, people, k, []byte(`{"name": "Cy"}`), &put.Version)
		if err != nil {
			t.Fatalf("Put with the current version: %v", err)
		}
		if want := `{"name" : "Cy", "age" : null, "tags" : null}`; string(partial.Value) != want || partial.Version <= put.Version {
			t.Errorf("Put of a partial object = %s at %d, want %s above %d", partial.Value, partial.Version, want, put.Version)
		}
		if _, err := s.Put(ctx, people, k, []byte(`{"name": "Cy"}`), &put.Version); !errors.Is(err, warmcache.ErrVersionMismatch) {
			t.Errorf("Put with a stale version: error %v, want ErrVersionMismatch", err)
		}

		invalid := []struct {
			name, value, mention string
		}{
			{"wrong type", `{"name": "Cy", "age": "old"}`, "integer"},
			{"out of range", `{"name": "Cy", "age": 99999999999}`, "range"},
			{"missing required field", `{"age": 3}`, `"name"`},
			{"not an object", `[1, 2]`, ""},
		}
		for _, tt := range invalid {
			t.Run(tt.name, func(t *testing.T) {
				_, err := s.Put(ctx, people, k, []byte(tt.value), nil)
				if !errors.Is(err, warmcache.ErrInvalidValue) || !strings.Contains(err.Error(), tt.mention) {
					t.Errorf("Put %s: error %v, want ErrInvalidValue mentioning %q", tt.value, err, tt.mention)
				}
			})
		}
		if got, _ := s.Lookup(ctx, people, k); got.Version != partial.Version {
			t.Errorf("refused Puts changed the row: %+v", got)
		}

		if _, err := s.Delete(ctx, people, k, &partial.Version); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if got, _ := s.Lookup(ctx, people, k); got.Found {
			t.Errorf("Lookup after Delete = %+v", got)
		}
	})
}

// badTables are tables that do not fit the test namespaces.
const badTables = `
CREATE TABLE int_key (key integer PRIMARY KEY, value jsonb, version bigint);
CREATE TABLE text_value (key bigint PRIMARY KEY, value text, version bigint);
CREATE TABLE int_version (key bigint PRIMARY KEY, value jsonb, version integer);
CREATE TABLE no_unique (key bigint, value jsonb, version bigint);
`

func TestOpenRefusesBadTables(t *testing.T) {
	tests := []struct {
		name   string
		ns     func() *warmcache.Namespace
		want   []string
		pgCode string
	}{
		{"missing table", with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.Table = "nosuch" }),
			[]string{`table "nosuch"`, "does not exist"}, ""},
		{"missing schema", with(sessionsNamespace, func(ns *warmcache.Namespace) { ns.Table = "nosuch.sessions" }),
			[]string{`table "nosuch.sessions"`, "does not exist"}, ""},
		{"missing key column", with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.KeyColumn = "id" }),
			[]string{`column "id" does not exist`}, ""},
		{"missing value column", with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.ValueColumn = "doc" }),
			[]string{`column "doc" does not exist`}, ""},
		{"missing version column", with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.VersionColumn = "ver" }),
			[]string{`column "ver" does not exist`}, ""},
		{"integer key", with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.Table = "int_key" }),
			[]string{`table "int_key"`, `column "key" has type integer, want int8`}, ""},
		{"text namespace on a bigint key", with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.KeyType = warmcache.KeyText }),
			[]string{`column "key" has type bigint, want text`}, ""},
		{"text value", with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.Table = "text_value" }),
			[]string{`column "value" has type text, want jsonb or json`}, ""},
		{"integer version", with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.Table = "int_version" }),
			[]string{`column "version" has type integer, want int8`}, ""},
		{"column of another type", with(peopleNamespace, func(ns *warmcache.Namespace) { ns.Columns[1].Type = "text" }),
			[]string{`table "people"`, `column "age" has type integer, want text`}, ""},
		{"missing column", with(peopleNamespace, func(ns *warmcache.Namespace) {
			ns.Columns = append(ns.Columns, warmcache.Column{Name: "email", Type: "text"})
		}), []string{`column "email" does not exist`}, ""},
		{"unknown column type", with(peopleNamespace, func(ns *warmcache.Namespace) { ns.Columns[0].Type = "no_such_type" }),
			[]string{`column "name": unknown type "no_such_type"`}, ""},
		{"writable without a unique key", with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.Table = "no_unique" }),
			[]string{`table "no_unique"`, `no primary key or unique index on column "key"`}, ""},
	}
	eachTarget(t, func(t *testing.T, tg target) {
		dsn := newDatabase(t, schema+badTables)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ns := tt.ns()
				ns.Name = "bad"
				_, err := openStore(t, options(t, dsn, tg), prometheus.NewRegistry(), widgetsNamespace(), ns)
				if err == nil {
					t.Fatal("Open succeeded")
				}
				for _, want := range append(tt.want, `namespace "bad"`) {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Open error %q does not contain %q", err, want)
					}
				}
				var pgErr *pgconn.PgError
				if tt.pgCode != "" && (!errors.As(err, &pgErr) || pgErr.Code != tt.pgCode) {
					t.Errorf("Open error %v does not wrap SQLSTATE %s", err, tt.pgCode)
				}
			})
		}
		t.Run("read-only without a unique key", func(t *testing.T) {
			ns := with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.Table, ns.Writable = "no_unique", false })()
			if _, err := openStore(t, options(t, dsn, tg), prometheus.NewRegistry(), ns); err != nil {
				t.Errorf("Open: %v", err)
			}
		})
	})
}

func TestOpenRefusesMissingSequence(t *testing.T) {
	dsn := newDatabase(t, schema+"DROP SEQUENCE warmcache_version_seq;")
	tg := targets()[0]
	_, err := openStore(t, options(t, dsn, tg), prometheus.NewRegistry(), widgetsNamespace())
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UndefinedTable || !strings.Contains(err.Error(), `namespace "widgets"`) {
		t.Fatalf("Open error = %v, want undefined_table naming the namespace", err)
	}
	readOnly := with(widgetsNamespace, func(ns *warmcache.Namespace) { ns.Writable = false })()
	if _, err := openStore(t, options(t, dsn, tg), prometheus.NewRegistry(), readOnly); err != nil {
		t.Errorf("Open of a read-only namespace without the sequence: %v", err)
	}
}

// with returns a namespace constructor that applies change.
func with(base func() *warmcache.Namespace, change func(*warmcache.Namespace)) func() *warmcache.Namespace {
	return func() *warmcache.Namespace {
		ns := base()
		change(ns)
		return ns
	}
}

// TestPgBouncerConcurrentLookups runs many lookups at once through
// PgBouncer in transaction pooling, where named prepared statements would
// fail with "prepared statement ... already exists".
func TestPgBouncerConcurrentLookups(t *testing.T) {
	const (
		workers = 16
		rounds  = 100
		rows    = 200
	)
	dsn := newDatabase(t, schema+fmt.Sprintf(`INSERT INTO widgets SELECT g, jsonb_build_object('id', g), nextval('warmcache_version_seq')
FROM generate_series(1, %d) g;`, rows))
	widgets := widgetsNamespace()
	s := mustOpenStore(t, dsn, target{name: "pgbouncer/auto", pgbouncer: true, wantMode: "cache_describe"}, widgets)
	ctx := testContext(t)

	start := make(chan struct{})
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			<-start
			for i := range rounds {
				id := (w*rounds+i)%rows + 1
				k := key(t, widgets, fmt.Sprint(id))
				e, err := s.Lookup(ctx, widgets, k)
				if err != nil {
					errs <- fmt.Errorf("Lookup %d: %w", id, err)
					return
				}
				if want := fmt.Sprintf(`{"id": %d}`, id); string(e.Value) != want {
					errs <- fmt.Errorf("Lookup %d = %s, want %s", id, e.Value, want)
					return
				}
				entries, err := s.LookupMany(ctx, widgets, []warmcache.Key{k, key(t, widgets, "0")})
				if err != nil {
					errs <- fmt.Errorf("LookupMany %d: %w", id, err)
					return
				}
				if !entries[0].Found || entries[1].Found {
					errs <- fmt.Errorf("LookupMany %d = %+v", id, entries)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestMetrics(t *testing.T) {
	dsn := newDatabase(t, schema+seed)
	widgets := widgetsNamespace()
	reg := prometheus.NewRegistry()
	opts := options(t, dsn, targets()[0])
	s, err := openStore(t, opts, reg, widgets)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ctx := testContext(t)
	for _, raw := range []string{"1", "404"} {
		if _, err := s.Lookup(ctx, widgets, key(t, widgets, raw)); err != nil {
			t.Fatalf("Lookup: %v", err)
		}
	}
	if _, err := s.Delete(ctx, widgets, key(t, widgets, "404"), nil); !errors.Is(err, warmcache.ErrNotFound) {
		t.Fatalf("Delete of an absent key: %v", err)
	}

	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"warmcache_sql_queries_total", []string{"namespace", "widgets", "op", "lookup", "result", "ok"}, 2},
		{"warmcache_sql_queries_total", []string{"namespace", "widgets", "op", "delete", "result", "ok"}, 1},
		{"warmcache_sql_queries_total", []string{"namespace", "widgets", "op", "put", "result", "error"}, 0},
		{"warmcache_sql_query_duration_seconds", []string{"namespace", "widgets", "op", "lookup"}, 2},
		{"warmcache_sql_pool_max_connections", nil, float64(opts.MaxConns)},
		{"warmcache_sql_pool_connections", []string{"state", "acquired"}, 0},
	}
	for _, c := range checks {
		got, ok := promregtest.Lookup(t, reg, c.name, c.labels...)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if got := promregtest.Value(t, reg, "warmcache_sql_pool_acquires_total"); got < 3 {
		t.Errorf("warmcache_sql_pool_acquires_total = %v, want at least 3", got)
	}
	for _, name := range []string{"warmcache_sql_pool_empty_acquires_total", "warmcache_sql_pool_acquire_wait_seconds_total"} {
		if _, ok := promregtest.Lookup(t, reg, name); !ok {
			t.Errorf("%s is missing", name)
		}
	}

	s.Close()
	if _, err := openStore(t, opts, reg, widgets); err != nil {
		t.Errorf("Open on the registry of a closed store: %v", err)
	}
}

func TestUnknownNamespaceAndPing(t *testing.T) {
	s := mustOpenStore(t, newDatabase(t, schema), targets()[0], widgetsNamespace())
	ctx := testContext(t)
	other := sessionsNamespace()
	if _, err := s.Lookup(ctx, other, key(t, other, "a")); !errors.Is(err, warmcache.ErrUnknownNamespace) {
		t.Errorf("Lookup in a namespace the store was not opened with: error %v, want ErrUnknownNamespace", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
	s.Close()
	if err := s.Ping(ctx); err == nil {
		t.Error("Ping after Close succeeded")
	}
}
