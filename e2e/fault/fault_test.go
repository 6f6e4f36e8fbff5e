package fault_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// The shape of the data and load of every fault test: widgets 1..seedRows;
// keys 1..warmCount are read before the fault, so that Redis holds them;
// keys 1..writeCount are also written; keys from coldFirst on are read once
// each, so that they miss.
const (
	seedRows   = 20000
	warmCount  = 30
	writeCount = 6
	coldFirst  = 1001
	workers    = 4
)

// startFaultLoad prewarms the warm keys and starts the load of a fault test.
func startFaultLoad(t testing.TB, svc *service) *load {
	t.Helper()
	prewarm(t, svc, keyRange(1, warmCount))
	return startLoad(svc, workers, keyRange(1, warmCount), keyRange(1, writeCount), coldFirst, seedRows-coldFirst+1)
}

// timedHot wraps the real hot tier and records how long each call took, to
// check that no request waits on Redis past the hot-tier deadline.
type timedHot struct {
	warmcache.Hot
	mu    sync.Mutex
	calls []hotCall
}

type hotCall struct {
	start time.Time
	took  time.Duration
}

func (h *timedHot) observe(start time.Time) {
	h.mu.Lock()
	h.calls = append(h.calls, hotCall{start, time.Since(start)})
	h.mu.Unlock()
}

// between returns the median and the longest duration of the calls that
// started in [from, to), and their number.
func (h *timedHot) between(from, to time.Time) (median, longest time.Duration, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ds []time.Duration
	for _, c := range h.calls {
		if !c.start.Before(from) && c.start.Before(to) {
			ds = append(ds, c.took)
		}
	}
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)-1], len(ds)
}

func (h *timedHot) GetMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, []bool, error) {
	defer h.observe(time.Now())
	return h.Hot.GetMany(ctx, ns, keys)
}

func (h *timedHot) FillMany(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) error {
	defer h.observe(time.Now())
	return h.Hot.FillMany(ctx, ns, fills)
}

// Bounds on how far past its deadline a hot-tier call may return: the time
// to notice the deadline and unwind. The median must be close to the
// deadline; the longest call may be late by a CPU-starved scheduler (two
// cores shared with compilers and the race detector) but must not wait out
// the Redis client's own dial, read or pool timeouts and their retry.
const (
	hotSlackMedian  = 100 * time.Millisecond
	hotSlackLongest = time.Second
)

// TestFaultRedis takes the service's own Redis away while load runs and
// brings it back: stopped and restarted empty, as after a crash, and frozen
// (SIGSTOP) and resumed, as a Redis that hangs. Reads and writes must go on
// from SQL without a single error, no call may wait on Redis much past the
// hot-tier deadline, and hits must come back by themselves.
func TestFaultRedis(t *testing.T) {
	cases := []struct {
		name        string
		stop, start func(*testproc.Redis, testing.TB)
	}{
		{"stopped and restarted empty", (*testproc.Redis).Stop, (*testproc.Redis).Start},
		{"frozen and resumed", (*testproc.Redis).Freeze, (*testproc.Redis).Thaw},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dsn := testenv.NewDatabase(t)
			migrateAndSeed(t, dsn, seedRows)
			rs := testproc.StartRedis(t)
			hot := &timedHot{}
			svc := startService(t, serviceEnv{
				"WARMCACHE_POSTGRES_DSN": dsn,
				"WARMCACHE_REDIS_ADDRS":  rs.Addr,
				"WARMCACHE_REDIS_PREFIX": redisPrefix(t),
			}, decorators{hot: func(h warmcache.Hot) warmcache.Hot { hot.Hot = h; return hot }})
			l := startFaultLoad(t, svc)
			tl, results := runFault(t, l, fault{
				tier:  "Redis",
				stop:  func(t testing.TB) { c.stop(rs, t) },
				start: func(t testing.TB) { c.start(rs, t) },
				recovered: func(up time.Time) bool {
					return l.hitStart.Load() >= up.UnixNano()
				},
			})
			report(t, "Redis", tl, results)
			median, longest, n := hot.between(tl.stop, tl.up)
			t.Logf("recovery: first hit %v after Redis answered again; %d hot-tier calls during the outage: median %v, longest %v (deadline %v)",
				firstSuccess(tl, results, readWarm, "hit").Round(time.Millisecond), n,
				median.Round(time.Millisecond), longest.Round(time.Millisecond), svc.cfg.Tiers.HotTimeout)

			fromSQL := 0
			for _, o := range results {
				if o.err != nil || o.status != http.StatusOK {
					t.Errorf("%s %s in phase %s: status %d, error %v; want 200 while Redis is away", o.kind, o.key, tl.phase(o), o.status, o.err)
				}
				if tl.phase(o) == "outage" && o.kind == readWarm && o.cache == "miss" {
					fromSQL++
				}
			}
			if fromSQL == 0 {
				t.Error("no warm key was read from SQL during the outage: the load never met it")
			}
			if median > svc.cfg.Tiers.HotTimeout+hotSlackMedian || longest > svc.cfg.Tiers.HotTimeout+hotSlackLongest {
				t.Errorf("hot-tier calls during the outage took %v (median) and %v (longest), past the deadline %v plus %v and %v",
					median, longest, svc.cfg.Tiers.HotTimeout, hotSlackMedian, hotSlackLongest)
			}
			checkWrites(t, svc, connect(t, dsn), keyRange(1, writeCount), results)
		})
	}
}

// checkWarehouseOutage checks what must hold while the warehouse cannot be
// reached, whichever tier failed: hits go on, misses and writes fail with
// 503 and Retry-After, every request ends within the warehouse deadline,
// and the circuit breaker keeps most of the failing requests from reaching
// the warehouse: sqlErrors, the warehouse calls that failed, must be fewer
// than half of them. A warm key is not a hit only when its hot-tier read
// failed (it missed its deadline on busy cores) or it overlapped a write of
// the key (then it reads the warehouse), so at most hotErrors warm reads
// may miss.
func checkWarehouseOutage(t testing.TB, svc *service, tl timeline, results []outcome, sqlErrors, hotErrors float64) {
	t.Helper()
	limit := svc.cfg.Tiers.WarmTimeout + time.Second
	failedReads, failedWrites, warmMissed := 0, 0, 0
	for _, o := range results {
		switch {
		case o.err != nil:
			t.Errorf("%s %s in phase %s: no answer: %v", o.kind, o.key, tl.phase(o), o.err)
		case o.took > limit:
			t.Errorf("%s %s in phase %s took %v, more than the warehouse deadline %v plus 1s", o.kind, o.key, tl.phase(o), o.took, svc.cfg.Tiers.WarmTimeout)
		case o.status == http.StatusServiceUnavailable && o.retryAfter == "":
			t.Errorf("%s %s in phase %s: 503 without Retry-After", o.kind, o.key, tl.phase(o))
		case o.kind == readWarm && o.status == http.StatusOK && o.cache == "hit":
		case o.kind == readWarm && (o.status == http.StatusOK || o.status == http.StatusServiceUnavailable):
			warmMissed++
			t.Logf("GET of warm key %s in phase %s: %d X-Cache %q, not a hit", o.key, tl.phase(o), o.status, o.cache)
		case o.status == http.StatusServiceUnavailable && o.kind == write:
			failedWrites++
		case o.status == http.StatusServiceUnavailable:
			failedReads++
		case o.status != http.StatusOK:
			t.Errorf("%s %s in phase %s: status %d, want 200 or 503", o.kind, o.key, tl.phase(o), o.status)
		}
	}
	if failedReads == 0 || failedWrites == 0 {
		t.Errorf("%d misses and %d writes failed: the load never met the outage", failedReads, failedWrites)
	}
	if float64(warmMissed) > hotErrors {
		t.Errorf("%d GETs of warm keys were not hits, but the hot tier failed only %.0f reads", warmMissed, hotErrors)
	}
	failed := failedReads + failedWrites
	t.Logf("breaker: %d misses and %d writes failed with 503, %.0f warehouse calls failed", failedReads, failedWrites, sqlErrors)
	if sqlErrors*2 > float64(failed) {
		t.Errorf("%.0f of %d failed requests reached the warehouse; the circuit breaker should have refused most", sqlErrors, failed)
	}
}

// errorCounts are the failed calls to each tier so far.
type errorCounts struct{ sql, hot float64 }

func tierErrors(t testing.TB, svc *service) errorCounts {
	t.Helper()
	return errorCounts{
		sql: promregtest.Value(t, svc.reg, "warmcache_sql_queries_total", "result", "error"),
		// A read that overlaps a write of its key through the instance
		// goes to the warehouse past the caches, as one whose hot-tier
		// read failed does.
		hot: promregtest.Value(t, svc.reg, "warmcache_lookups_total", "tier", "redis", "result", "error") +
			promregtest.Value(t, svc.reg, "warmcache_cache_doubt_reads_total"),
	}
}

// breakerOpens waits, while the warehouse is down, until the service's
// circuit breaker is open.
func breakerOpens(svc *service) func(t testing.TB) {
	return func(t testing.TB) {
		t.Helper()
		eventually(t, 15*time.Second, "the warehouse circuit breaker opens", func() bool {
			return promregtest.Value(t, svc.reg, "warmcache_warehouse_breaker_open") == 1
		})
	}
}

// warehouseRecovered reports whether a miss and a write that started at or
// after up have succeeded.
func warehouseRecovered(l *load) func(time.Time) bool {
	return func(up time.Time) bool { return l.succeededSince(up, readCold, write) }
}

// TestFaultPgBouncer stops the PgBouncer between the service and its own
// PostgreSQL while load runs (an immediate shutdown, which drops every
// client and server connection), and starts it again. No request may hang,
// errors must be 503 with Retry-After, and the pool must recover by itself.
func TestFaultPgBouncer(t *testing.T) {
	pg := testproc.StartPostgres(t)
	dsn := pg.CreateDatabase(t, "warmcache")
	migrateAndSeed(t, dsn, seedRows)
	pb := testproc.StartPgBouncer(t, pg)
	svc := startService(t, serviceEnv{
		"WARMCACHE_POSTGRES_DSN": pb.DSN("warmcache"),
		"WARMCACHE_PG_POOLER":    "pgbouncer",
		"WARMCACHE_REDIS_ADDRS":  testproc.StartRedis(t).Addr,
		"WARMCACHE_REDIS_PREFIX": redisPrefix(t),
	}, decorators{})
	warehouseFault(t, svc, dsn, "PgBouncer", pb.Stop, pb.Start)
}

// TestFaultPostgres stops the service's own PostgreSQL (pg_ctl stop -m fast)
// while load runs, and starts it again. Hits must go on; misses and writes
// must fail fast with 503 and Retry-After while the circuit breaker keeps
// most of them from reaching the warehouse; the service must recover by
// itself.
func TestFaultPostgres(t *testing.T) {
	pg := testproc.StartPostgres(t)
	dsn := pg.CreateDatabase(t, "warmcache")
	migrateAndSeed(t, dsn, seedRows)
	svc := startService(t, serviceEnv{
		"WARMCACHE_POSTGRES_DSN": dsn,
		"WARMCACHE_REDIS_ADDRS":  testproc.StartRedis(t).Addr,
		"WARMCACHE_REDIS_PREFIX": redisPrefix(t),
	}, decorators{})
	warehouseFault(t, svc, dsn, "PostgreSQL", pg.Stop, pg.Start)
}

// warehouseFault runs the load against svc, takes tier away with stop and
// brings it back with start, and checks the outage (checkWarehouseOutage)
// and the writes (checkWrites, on the direct connection dsn).
func warehouseFault(t testing.TB, svc *service, dsn, tier string, stop, start func(testing.TB)) {
	t.Helper()
	l := startFaultLoad(t, svc)
	errorsBefore := tierErrors(t, svc)
	tl, results := runFault(t, l, fault{
		tier:      tier,
		stop:      stop,
		start:     start,
		whileDown: breakerOpens(svc),
		recovered: warehouseRecovered(l),
	})
	errorsAfter := tierErrors(t, svc)
	report(t, tier, tl, results)
	t.Logf("recovery after %s answered again: first miss served in %v, first write in %v", tier,
		firstSuccess(tl, results, readCold, "miss").Round(time.Millisecond), firstSuccess(tl, results, write, "").Round(time.Millisecond))
	checkWarehouseOutage(t, svc, tl, results, errorsAfter.sql-errorsBefore.sql, errorsAfter.hot-errorsBefore.hot)
	checkWrites(t, svc, connect(t, dsn), keyRange(1, writeCount), results)
}
