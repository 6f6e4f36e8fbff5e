package fault_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// stampedeSize is how many GETs for one key arrive at once.
const stampedeSize = 500

// stampedeHotTimeout and stampedeWarmTimeout are the tier deadlines of the
// stampede tests. A read that misses its hot-tier deadline counts as the hot
// tier failing, and the service then goes on from the warehouse: that is the
// designed fallback (see TestFaultRedis), not what these tests are about. A
// burst of 500 requests on two cores under the race detector misses the
// default 50ms for hundreds of requests, and then the reads that arrive
// after the shared one has finished, with no cache to look in, read again
// (2 to 13 reads were seen); without the race detector 50ms holds. So the
// tests give the hot tier room and check that it never failed. The
// warehouse deadline is long so that a read can be held open while the
// burst gathers behind it.
const (
	stampedeHotTimeout  = 2 * time.Second
	stampedeWarmTimeout = time.Minute
)

// stampede is a service over a fresh database, with the counters of the
// warehouse's own statistics on the widgets table from before the service
// connected.
type stampede struct {
	svc    *service
	stats  *pgx.Conn
	warm   *countingWarm
	before scans
}

// newStampede migrates a fresh database, seeds 100 widgets, reads the scan
// counters, and starts a service over the database whose warehouse is
// wrapped in w (which counts lookups and may hold the first one) and whose
// hot tier is wrapped by hot, if not nil.
func newStampede(t testing.TB, w *countingWarm, hot func(warmcache.Hot) warmcache.Hot) *stampede {
	t.Helper()
	dsn := testenv.NewDatabase(t)
	migrateAndSeed(t, dsn, 100)
	st := &stampede{stats: connect(t, dsn), warm: w}
	st.before = st.flushedScans(t)
	st.svc = startService(t, serviceEnv{
		"WARMCACHE_POSTGRES_DSN": dsn,
		"WARMCACHE_REDIS_ADDRS":  testenv.RedisAddr(t),
		"WARMCACHE_REDIS_PREFIX": redisPrefix(t),
		"WARMCACHE_HOT_TIMEOUT":  stampedeHotTimeout.String(),
		// Under the whole suite, connecting to Redis has taken longer than
		// the default 200ms, and a dial that times out is a hot-tier failure too.
		"WARMCACHE_REDIS_DIAL_TIMEOUT": stampedeHotTimeout.String(),
		"WARMCACHE_WARM_TIMEOUT":       stampedeWarmTimeout.String(),
	}, decorators{hot: hot, warm: func(inner warmcache.Warm) warmcache.Warm {
		w.Warm = inner
		return w
	}})
	// A burst's requests wait on a read held open until the whole burst
	// has gathered behind it, which takes seconds on two busy cores under
	// the race detector: they wait as long as the warehouse deadline.
	st.svc.client.Timeout = stampedeWarmTimeout
	st.warmHotPool()
	return st
}

// warmHotPool opens the service's Redis connections before the burst, with
// concurrent readiness probes (which ping Redis and PostgreSQL but read no
// table), so that the burst does not wait for connections to be dialled.
func (st *stampede) warmHotPool() {
	var wg sync.WaitGroup
	for range 3 {
		for range 32 {
			wg.Go(func() { st.svc.do(context.Background(), http.MethodGet, "/readyz", nil) })
		}
		wg.Wait()
	}
}

// scans are PostgreSQL's own counters of scans on a table and its partitions.
type scans struct{ index, seq int64 }

func (s scans) minus(o scans) scans { return scans{s.index - o.index, s.seq - o.seq} }

// stopAndCount stops the service and returns the scans PostgreSQL counted
// on widgets over the service's whole life, from opening its pool to
// closing it.
func (st *stampede) stopAndCount(t testing.TB) scans {
	t.Helper()
	st.svc.stop()
	return st.flushedScans(t).minus(st.before)
}

// flushedScans waits until no other client is connected to the database and
// returns the scan counters of the widgets table and its partitions. A
// backend sends its counters to the statistics system when it goes idle, but
// at most once a second and otherwise only after 10s (PG15), and always when
// it exits, before it leaves pg_stat_activity. pg_stat_force_next_flush()
// would only flush the calling backend, not the service's pooled ones.
func (st *stampede) flushedScans(t testing.TB) scans {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eventually(t, 20*time.Second, "the database's other clients disconnect", func() bool {
		var n int
		err := st.stats.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n)
		if err != nil {
			t.Fatalf("count clients: %v", err)
		}
		return n == 0
	})
	// Each statement runs in its own transaction; clearing the snapshot
	// also makes sure that no cached statistics are read.
	if _, err := st.stats.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatalf("clear statistics snapshot: %v", err)
	}
	var c scans
	err := st.stats.QueryRow(ctx, `
		SELECT coalesce(sum(idx_scan), 0)::bigint, coalesce(sum(seq_scan), 0)::bigint
		FROM pg_stat_user_tables
		WHERE relid = 'widgets'::regclass
		   OR relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'widgets'::regclass)`).Scan(&c.index, &c.seq)
	if err != nil {
		t.Fatalf("read scan counters: %v", err)
	}
	return c
}

// countingWarm wraps the real warehouse: it counts reads (a single-key
// lookup or a batched one are one query each), and can hold the first read
// before it runs the real one: until release is closed, when hold is set, or
// until together reads have begun (at most 30s), when together is above one.
type countingWarm struct {
	warmcache.Warm
	hold     bool
	started  chan struct{} // closed when the first read begins, if hold
	release  chan struct{}
	together int64
	gathered chan struct{} // closed when together reads have begun
	lookups  atomic.Int64
}

// wait counts a read and holds the first one if asked to.
func (w *countingWarm) wait(ctx context.Context) error {
	n := w.lookups.Add(1)
	if w.together > 1 && n == w.together {
		close(w.gathered)
	}
	if n != 1 {
		return nil
	}
	switch {
	case w.hold:
		close(w.started)
		select {
		case <-w.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	case w.together > 1:
		select {
		case <-w.gathered:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second): // a path that shares reads never gathers
		}
	}
	return nil
}

func (w *countingWarm) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, error) {
	if err := w.wait(ctx); err != nil {
		return nil, err
	}
	return w.Warm.LookupMany(ctx, ns, keys)
}

// forgetfulHot is a hot tier that holds nothing: every read misses and every
// fill is dropped. Behind it, only misses that overlap in time can share a
// warehouse read.
type forgetfulHot struct{ warmcache.Hot }

func (forgetfulHot) GetMany(_ context.Context, _ *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, []bool, error) {
	return make([]warmcache.Entry, len(keys)), make([]bool, len(keys)), nil
}

func (forgetfulHot) FillMany(context.Context, *warmcache.Namespace, []warmcache.Fill) error {
	return nil
}

// burst sends n GETs of path at once: every request waits on one barrier,
// which opens when all n goroutines are ready.
func burst(s *service, path string, n int) []reply {
	return burstOf(s, http.MethodGet, path, nil, n)
}

// burstOf is burst for any request.
func burstOf(s *service, method, path string, body []byte, n int) []reply {
	replies := make([]reply, n)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			replies[i] = s.do(context.Background(), method, path, body)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	return replies
}

// flightWaiters counts the goroutines of this process that wait in the
// service's singleflight for a shared warehouse read, by their stacks.
func flightWaiters() int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	return strings.Count(buf.String(), "warmcache.(*Service).share(")
}

// checkReplies checks that every reply has status want, and for a 200 the
// body of the first one; it returns how many were served from each source.
func checkReplies(t testing.TB, replies []reply, want int) map[string]int {
	t.Helper()
	sources := map[string]int{}
	var first []byte
	for i, r := range replies {
		if r.err != nil || r.status != want {
			t.Fatalf("request %d: status %d, error %v, body %s; want %d", i, r.status, r.err, r.body, want)
		}
		sources[r.header.Get("X-Cache")]++
		if want != http.StatusOK {
			continue
		}
		if first == nil {
			first = r.body
		} else if !bytes.Equal(r.body, first) {
			t.Fatalf("request %d: body %s, others got %s", i, r.body, first)
		}
	}
	return sources
}

// TestStampede sends 500 concurrent GETs for one cold key and checks, with
// PostgreSQL's own scan counters, that the warehouse was read exactly once.
func TestStampede(t *testing.T) {
	cases := []struct {
		name   string
		key    string
		status int
	}{
		{"present key", "42", http.StatusOK},
		{"absent key is cached as negative", "100042", http.StatusNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStampede(t, &countingWarm{}, nil)
			start := time.Now()
			replies := burst(st.svc, widgetPath(c.key), stampedeSize)
			took := time.Since(start)
			sources := checkReplies(t, replies, c.status)
			hotErrors := promregtest.Value(t, st.svc.reg, "warmcache_lookups_total", "tier", "redis", "result", "error")
			fillErrors := promregtest.Value(t, st.svc.reg, "warmcache_cache_fills_total", "result", "error")
			got := st.stopAndCount(t)
			t.Logf("%d GETs in %v: X-Cache %v; hot-tier read errors %v, fill errors %v; warehouse lookups %d; index scans +%d, seq scans +%d",
				stampedeSize, took.Round(time.Millisecond), sources, hotErrors, fillErrors, st.warm.lookups.Load(), got.index, got.seq)
			if hotErrors != 0 || fillErrors != 0 {
				t.Errorf("the hot tier failed %v reads and %v fills; the test needs it healthy", hotErrors, fillErrors)
			}
			if got.index != 1 {
				t.Errorf("PostgreSQL counted %d index scans on widgets for %d concurrent GETs of one cold key, want exactly 1", got.index, stampedeSize)
			}
			if got.seq != 0 {
				t.Errorf("PostgreSQL counted %d sequential scans on widgets, want 0", got.seq)
			}
			if got := st.warm.lookups.Load(); got != 1 {
				t.Errorf("the service looked the key up %d times, want 1", got)
			}
		})
	}

	// The first requester starts the shared read and then goes away while
	// everyone else waits on it: the read must run on, once, for them.
	t.Run("first requester cancels", func(t *testing.T) {
		w := &countingWarm{hold: true, started: make(chan struct{}), release: make(chan struct{})}
		st := newStampede(t, w, nil)
		released := false
		defer func() {
			if !released {
				close(w.release)
			}
		}()
		path := widgetPath("7")

		firstCtx, cancelFirst := context.WithCancel(context.Background())
		defer cancelFirst()
		first := make(chan reply, 1)
		go func() { first <- st.svc.do(firstCtx, http.MethodGet, path, nil) }()
		select {
		case <-w.started:
		case <-time.After(10 * time.Second):
			t.Fatal("the first GET did not start a warehouse read within 10s")
		}
		others := make(chan []reply, 1)
		go func() { others <- burst(st.svc, path, stampedeSize-1) }()
		eventually(t, 30*time.Second, "every GET waits on the shared read", func() bool {
			return flightWaiters() == stampedeSize
		})
		cancelFirst()
		eventually(t, 10*time.Second, "the first GET leaves the shared read", func() bool {
			return flightWaiters() == stampedeSize-1
		})
		if r := <-first; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("first GET: status %d, error %v; want it cancelled", r.status, r.err)
		}
		close(w.release)
		released = true
		replies := <-others
		sources := checkReplies(t, replies, http.StatusOK)
		got := st.stopAndCount(t)
		t.Logf("%d GETs after the first left: X-Cache %v; warehouse lookups %d; index scans +%d",
			len(replies), sources, w.lookups.Load(), got.index)
		if got := w.lookups.Load(); got != 1 {
			t.Errorf("the service looked the key up %d times, want 1: the shared read did not survive its first caller", got)
		}
		if got.index != 1 {
			t.Errorf("PostgreSQL counted %d index scans on widgets, want exactly 1", got.index)
		}
	})

	// The control: the same requests behind a hot tier that holds nothing,
	// so that requests arriving after a read has finished cannot find its
	// result and read again. They go as two bursts, the second after the
	// first is answered, so that some surely arrive after a read finished
	// (within one burst that depends on timing). The counters must then see
	// more than one scan, exactly as many as the service made, or they could
	// not have caught a stampede above.
	t.Run("control without a cache to recheck", func(t *testing.T) {
		st := newStampede(t, &countingWarm{}, func(h warmcache.Hot) warmcache.Hot { return forgetfulHot{h} })
		replies := burst(st.svc, widgetPath("42"), stampedeSize/2)
		replies = append(replies, burst(st.svc, widgetPath("42"), stampedeSize-stampedeSize/2)...)
		checkReplies(t, replies, http.StatusOK)
		got := st.stopAndCount(t).index
		lookups := st.warm.lookups.Load()
		t.Logf("%d GETs without a cache: warehouse lookups %d; index scans +%d", stampedeSize, lookups, got)
		if got <= 1 {
			t.Errorf("PostgreSQL counted %d index scans without a cache, want more than 1", got)
		}
		if got != lookups {
			t.Errorf("PostgreSQL counted %d index scans, the service made %d lookups; the counters must agree", got, lookups)
		}
	})

	// _mget takes the same read path as GET: the same burst as one-key
	// _mget requests shares one warehouse read too.
	t.Run("mget shares reads", func(t *testing.T) {
		st := newStampede(t, &countingWarm{}, nil)
		replies := burstOf(st.svc, http.MethodPost, "/v1/kv/widgets/_mget", []byte(`{"keys":[42]}`), stampedeSize)
		checkReplies(t, replies, http.StatusOK)
		got := st.stopAndCount(t)
		lookups := st.warm.lookups.Load()
		t.Logf("%d one-key _mget requests: warehouse reads %d; index scans +%d", stampedeSize, lookups, got.index)
		if got.index != 1 || lookups != 1 {
			t.Errorf("PostgreSQL counted %d index scans and the service made %d reads for %d concurrent _mget requests of one cold key, want exactly 1", got.index, lookups, stampedeSize)
		}
		if got.seq != 0 {
			t.Errorf("PostgreSQL counted %d sequential scans on widgets, want 0", got.seq)
		}
	})
}
