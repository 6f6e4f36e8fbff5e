package pgstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// The sweep benchmark's table: sweepExpiredRows rows past their expiry,
// and sweepLiveRows live ones that the lookups read.
const (
	sweepExpiredRows = 100_000
	sweepLiveRows    = 10_000
	sweepBatch       = 500
	sweepClients     = 2
	sweepLookups     = 4_000 // per phase
)

// BenchmarkLookupDuringSweep measures whether deleting expired rows slows
// key lookups, on PostgreSQL and on Greenplum, in one run per dialect: on
// a managed heap table holding 100k rows past their expiry and 10k live
// rows, it times single-key lookups of random live keys by two clients,
// first with no sweep (baseline), then while the service's sweep
// (warmcache.Service.Sweep over this store, with an in-memory hot tier)
// deletes the 100k expired rows in batches of 500, resting between
// batches as the sweeper does. It reports the median and 99th-percentile lookup
// latency of each phase, their ratios (sweep / baseline; 1 means no
// slowdown), and the rows the sweep deleted per second. Only the ratios
// carry to another machine. The results are in docs/warehouse.md, with
// the command.
func BenchmarkLookupDuringSweep(b *testing.B) {
	for _, w := range testenv.Warehouses() {
		b.Run(w.Name, func(b *testing.B) {
			tables := packedLaneTables()[:1] // heap_packed
			dsn := migrated(b, w, tables)
			ns := tables[0].Namespace
			execSQL(b, dsn, fmt.Sprintf(`INSERT INTO %[1]s (key, value, version, expires_at)
SELECT g, jsonb_build_object('n', g, 'note', repeat('x', 40 + g %% 100)), g, CASE WHEN g > %[2]d THEN now() - interval '1 second' END
FROM generate_series(1, %[3]d) g;
ANALYZE %[1]s;`, ns.Table, sweepLiveRows, sweepLiveRows+sweepExpiredRows))
			s, err := openStore(b, pgstore.Options{DSN: dsn, MaxConns: 4}, prometheus.NewRegistry(), ns)
			if err != nil {
				b.Fatalf("Open: %v", err)
			}
			ctx := context.Background()
			svc, err := warmcache.NewService(memtier.NewHot(time.Now), s, []*warmcache.Namespace{ns}, prometheus.NewRegistry(),
				slog.New(slog.DiscardHandler), warmcache.Options{SweepBatch: sweepBatch})
			if err != nil {
				b.Fatalf("NewService: %v", err)
			}
			for b.Loop() {
				// One measurement per run: the sweep empties the table
				// of expired rows.
				base := lookupLatencies(b, func(stop func() bool) []time.Duration {
					return lookups(ctx, b, s, ns, stop)
				}, func() func() bool {
					n := 0
					var mu sync.Mutex
					return func() bool { mu.Lock(); defer mu.Unlock(); n++; return n > sweepLookups }
				}())
				done := make(chan struct{})
				var deleted int
				var sweepErr error
				start := time.Now()
				go func() {
					defer close(done)
					// The service's own sweep, as RunSweeper calls it,
					// rests and all, until the backlog is gone.
					for deleted < sweepExpiredRows && sweepErr == nil {
						var n int
						n, sweepErr = svc.Sweep(ctx, ns.Name)
						deleted += n
						if n == 0 {
							return
						}
					}
				}()
				during := lookupLatencies(b, func(stop func() bool) []time.Duration {
					return lookups(ctx, b, s, ns, stop)
				}, func() bool {
					select {
					case <-done:
						return true
					default:
						return false
					}
				})
				<-done
				took := time.Since(start)
				if sweepErr != nil {
					b.Fatalf("Sweep: %v", sweepErr)
				}
				if deleted != sweepExpiredRows {
					b.Fatalf("the sweep deleted %d rows, want %d", deleted, sweepExpiredRows)
				}
				p50b, p99b := percentile(base, 50), percentile(base, 99)
				p50s, p99s := percentile(during, 50), percentile(during, 99)
				b.ReportMetric(float64(p50b.Microseconds()), "base-p50-µs")
				b.ReportMetric(float64(p99b.Microseconds()), "base-p99-µs")
				b.ReportMetric(float64(p50s.Microseconds()), "sweep-p50-µs")
				b.ReportMetric(float64(p99s.Microseconds()), "sweep-p99-µs")
				b.ReportMetric(float64(p50s)/float64(p50b), "p50-ratio")
				b.ReportMetric(float64(p99s)/float64(p99b), "p99-ratio")
				b.ReportMetric(float64(len(during)), "lookups-during-sweep")
				b.ReportMetric(float64(deleted)/took.Seconds(), "swept-rows/s")
			}
		})
	}
}

// lookupLatencies runs sweepClients clients of run until stop says so,
// and returns all their latencies.
func lookupLatencies(b *testing.B, run func(stop func() bool) []time.Duration, stop func() bool) []time.Duration {
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	for range sweepClients {
		wg.Go(func() {
			got := run(stop)
			mu.Lock()
			all = append(all, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(all) == 0 {
		b.Fatal("no lookups ran")
	}
	return all
}

// lookups reads random live keys one at a time until stop, and returns
// each lookup's latency. A failed lookup fails the benchmark.
func lookups(ctx context.Context, b *testing.B, s interface {
	LookupMany(context.Context, *warmcache.Namespace, []warmcache.Key) ([]warmcache.Entry, error)
}, ns *warmcache.Namespace, stop func() bool) []time.Duration {
	var out []time.Duration
	for !stop() {
		n := rand.Int64N(sweepLiveRows) + 1
		start := time.Now()
		es, err := s.LookupMany(ctx, ns, []warmcache.Key{{Text: fmt.Sprint(n), Int: n}})
		out = append(out, time.Since(start))
		if err != nil || !es[0].Found {
			b.Errorf("lookup of live key %d = %+v, %v", n, es, err)
			return out
		}
	}
	return out
}

// percentile returns the p-th percentile of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
