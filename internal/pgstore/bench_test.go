package pgstore_test

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// BenchmarkLookup measures one client's point lookups on a 10,000-row
// packed table in each exec mode, directly and through PgBouncer. Only the
// ratios between the sub-benchmarks carry to another machine.
func BenchmarkLookup(b *testing.B) {
	const rows = 10_000
	dsn := newDatabase(b, schema+`
INSERT INTO widgets SELECT g, jsonb_build_object('id', g, 'name', 'widget ' || g, 'price', g * 1.5, 'tags', jsonb_build_array('a', 'b')),
	nextval('warmcache_version_seq') FROM generate_series(1, 10000) g;
ANALYZE widgets;`)
	widgets := widgetsNamespace()
	keys := make([]warmcache.Key, rows)
	for i := range keys {
		keys[i] = warmcache.Key{Text: strconv.Itoa(i + 1), Int: int64(i + 1)}
	}
	benchmarks := []struct {
		name      string
		pgbouncer bool
		execMode  string
	}{
		{"direct/cache_statement", false, "cache_statement"},
		{"direct/cache_describe", false, "cache_describe"},
		{"direct/exec", false, "exec"},
		{"direct/simple_protocol", false, "simple_protocol"},
		{"pgbouncer/cache_describe", true, "cache_describe"},
		{"pgbouncer/exec", true, "exec"},
		{"pgbouncer/simple_protocol", true, "simple_protocol"},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			opts := options(b, dsn, target{pgbouncer: bm.pgbouncer, execMode: bm.execMode})
			s, err := openStore(b, opts, prometheus.NewRegistry(), widgets)
			if err != nil {
				b.Fatalf("Open: %v", err)
			}
			ctx := testContext(b)
			if _, err := s.Lookup(ctx, widgets, keys[0]); err != nil {
				b.Fatalf("warm-up Lookup: %v", err)
			}
			for i := 0; b.Loop(); i++ {
				e, err := s.Lookup(ctx, widgets, keys[i%rows])
				if err != nil || !e.Found {
					b.Fatalf("Lookup %d = %+v, %v", i%rows+1, e, err)
				}
			}
		})
	}
}

// BenchmarkPut measures one client's upserts of random keys of a
// 10,000-key packed table, on PostgreSQL directly and through PgBouncer,
// with the table's write function (one round trip: the locks, the version
// and the upsert in one statement) and without it (/statements: the locks
// and the version in one round trip, then the upsert with its commit), and
// on Greenplum, both ways on its heap table (its append-optimized tables
// have no write function).
// Only ratios between builds or sub-benchmarks measured in the same run
// carry to another machine.
func BenchmarkPut(b *testing.B) {
	for _, w := range testenv.Warehouses() {
		b.Run(w.Name, func(b *testing.B) {
			tables := packedLaneTables()
			dsn := migrated(b, w, tables)
			if !w.Greenplum {
				tables = tables[:1] // PostgreSQL creates heap tables whatever the storage
			}
			for _, tb := range tables {
				for _, pgbouncer := range []bool{false, true} {
					for _, fn := range []pgstore.FunctionMode{pgstore.FunctionAuto, pgstore.FunctionOff} {
						if w.Greenplum && (pgbouncer || (fn == pgstore.FunctionOff && tb.Storage.AppendOptimized)) {
							continue
						}
						name := tb.Namespace.Name
						if pgbouncer {
							name += "/pgbouncer"
						}
						if fn == pgstore.FunctionOff {
							name += "/statements"
						}
						b.Run(name, func(b *testing.B) {
							opts := pgstore.Options{DSN: dsn, MaxConns: 2}
							if pgbouncer {
								opts = options(b, dsn, target{pgbouncer: true})
							}
							opts.WriteFunction = fn
							s, err := openStore(b, opts, prometheus.NewRegistry(), tb.Namespace)
							if err != nil {
								b.Fatalf("Open: %v", err)
							}
							ctx := testContext(b)
							for i := 0; b.Loop(); i++ {
								k := warmcache.Key{Text: strconv.Itoa(i%10_000 + 1), Int: int64(i%10_000 + 1)}
								if _, err := s.Put(ctx, tb.Namespace, k, value(tb.Namespace, i, "bench"), nil); err != nil {
									b.Fatalf("Put %s: %v", k.Text, err)
								}
							}
						})
					}
				}
			}
		})
	}
}
