package consistency_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/e2e/internal/faultproxy"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
)

// workload is what the clients of a run do.
type workload struct {
	clients int
	keys    int
	d       time.Duration
	// perClient, when positive, also stops each client after that many
	// operations: against a server in memory, time alone would let a fast
	// machine write histories too long to check.
	perClient int
}

// tally counts the answers of a run.
type tally struct {
	mu                      sync.Mutex
	ops, reads, writes      int
	unknown, conflicts      int
	readErrors, nearHits    int
	unexpected              []string
	conditional, preconfail int
}

func (c *tally) count(f func(c *tally)) {
	c.mu.Lock()
	f(c)
	c.mu.Unlock()
}

func (c *tally) String() string {
	return fmt.Sprintf("%d operations: %d reads (%d from the near cache), %d writes (%d conditional, %d answered 412), "+
		"%d writes of unknown outcome, %d answered 409, %d reads without an answer",
		c.ops, c.reads, c.nearHits, c.writes, c.conditional, c.preconfail, c.unknown, c.conflicts, c.readErrors)
}

// runClients runs w.clients clients against the instance for w.d, each
// picking a key and an operation at random: GET, PUT of a value unique to
// the write, PUT with If-Match of the last version the client saw of the
// key, or DELETE. Every answer that tells something goes into rec. It
// returns when the clients stop.
func runClients(in *instance, rec *recorder, w workload, seed uint64) *tally {
	c := &tally{}
	stop := time.Now().Add(w.d)
	var wg sync.WaitGroup
	for id := range w.clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(id)))
			seen := map[int]int64{} // the last version this client saw of each key
			for n := 0; time.Now().Before(stop) && (w.perClient <= 0 || n < w.perClient); n++ {
				req := kvInput{Key: rng.IntN(w.keys), Value: fmt.Sprintf("c%d-%d", id, n)}
				method := http.MethodGet
				switch p := rng.IntN(100); {
				case p < 45:
					req.Kind, req.Value = opGet, ""
				case p < 85:
					req.Kind, method = opPut, http.MethodPut
					if v, ok := seen[req.Key]; ok && p >= 65 {
						req.Kind, req.Match = opCPut, v
					}
				default:
					req.Kind, req.Value, method = opDelete, "", http.MethodDelete
				}
				call := rec.now()
				a := in.do(context.Background(), method, req.Key, req.Value, req.Match)
				ret := rec.now()
				out := kvOutput{Status: a.status, Value: a.value, Version: a.version, Cache: a.cache}
				record := true
				c.count(func(c *tally) {
					c.ops++
					if req.Kind == opGet {
						c.reads++
						if a.cache == "hit-l1" {
							c.nearHits++
						}
					} else {
						c.writes++
					}
					if req.Kind == opCPut {
						c.conditional++
						if a.status == http.StatusPreconditionFailed {
							c.preconfail++
						}
					}
					switch {
					case a.malformed != nil:
						c.unexpected = append(c.unexpected, fmt.Sprintf("%s key %d: %v", method, req.Key, a.malformed))
						record = false
					case !a.decided() && req.Kind == opGet:
						c.readErrors++
						record = false
					case !a.decided():
						c.unknown++
						out = kvOutput{Unknown: true, Status: a.status}
					case a.status == http.StatusConflict:
						// The warehouse rolled the write back: nothing
						// was written.
						c.conflicts++
						record = false
					case !expected(req.Kind, a.status):
						c.unexpected = append(c.unexpected, fmt.Sprintf("%s key %d: %v", method, req.Key, a))
						record = false
					}
				})
				if !record {
					continue
				}
				rec.add(id, req, out, call, ret)
				switch {
				case out.Unknown:
					delete(seen, req.Key)
				case a.status == http.StatusOK:
					seen[req.Key] = a.version
				case a.status == http.StatusNotFound || req.Kind == opDelete:
					delete(seen, req.Key)
				}
			}
		})
	}
	wg.Wait()
	return c
}

// expected reports whether status is a decided answer the model knows for
// kind.
func expected(kind opKind, status int) bool {
	switch kind {
	case opGet:
		return status == http.StatusOK || status == http.StatusNotFound
	case opPut:
		return status == http.StatusOK
	case opCPut:
		return status == http.StatusOK || status == http.StatusPreconditionFailed
	case opDelete:
		return status == http.StatusNoContent || status == http.StatusNotFound
	}
	return false
}

// checkRun fails the test on answers outside the model, and checks the
// history.
func checkRun(t *testing.T, label string, rec *recorder, c *tally) {
	t.Helper()
	checkAnswers(t, label, c)
	start := time.Now()
	v := checkLinearizable(t, label, rec)
	t.Logf("%s: %v; %d keys checked in %v: %d not linearizable, %d without verdict",
		label, c, v.keys, time.Since(start).Round(time.Millisecond), v.illegal, v.unknown)
	if v.illegal > 0 {
		t.Logf("%s: reads that contradict an acknowledged write: %s", label, summarize(v.witnesses))
	}
}

// checkAnswers fails the test on answers outside the model, and on a run
// too short to check anything.
func checkAnswers(t *testing.T, label string, c *tally) {
	t.Helper()
	for i, u := range c.unexpected {
		if i == 10 {
			t.Errorf("%s: ... and %d more unexpected answers", label, len(c.unexpected)-i)
			break
		}
		t.Errorf("%s: unexpected answer: %s", label, u)
	}
	if c.reads == 0 || c.writes == 0 {
		t.Fatalf("%s: %v: too few to check anything", label, c)
	}
}

// TestLinearizable holds the service, the real binary on a PostgreSQL and a
// Redis of the test's own, to linearizability: 12 clients write, write
// conditionally, delete and read 6 keys through one instance, and every
// history, key by key, must be one that a single register could produce
// with each operation taking effect between its request and its answer
// (porcupine decides it). It runs with change capture on and off and the
// near cache on and off, then again under faults (see testFaults and
// testSoak), then measures how long a second instance's near cache lags a write, and, with
// WARMCACHE_TEST_GREENPLUM_DSN, runs on Greenplum.
func TestLinearizable(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	w := workload{clients: 12, keys: 6, d: 3 * time.Second}
	for _, cfg := range []runConfig{{}, {near: true}, {capture: true}, {capture: true, near: true}} {
		t.Run(cfg.String(), func(t *testing.T) {
			d := c.newDatabase(t, cfg.near)
			r := testproc.StartRedis(t)
			in := startInstance(t, "warmcache", d, r.Addr, "lin-"+testenv.RandomSuffix(t)+":", cfg)
			rec := newRecorder()
			tl := runClients(in, rec, w, 1)
			checkRun(t, cfg.String(), rec, tl)
		})
	}
	testFaults(t, c, w)
	testSoak(t, c, w)
	t.Run("two-instances", func(t *testing.T) { testAcrossInstances(t, c, nil) })
	for _, sc := range faultScenarios {
		t.Run("two-instances/faults/"+sc.name, func(t *testing.T) { testAcrossInstances(t, c, &sc) })
	}
	t.Run("greenplum", func(t *testing.T) {
		d := newGreenplumDatabase(t, false)
		r := testproc.StartRedis(t)
		in := startInstance(t, "warmcache", d, r.Addr, "lin-"+testenv.RandomSuffix(t)+":", runConfig{})
		rec := newRecorder()
		tl := runClients(in, rec, workload{clients: 6, keys: 4, d: 2 * time.Second}, 2)
		checkRun(t, "greenplum", rec, tl)
	})
}

// checkConverged waits for the retried Redis updates of writes (at most
// repairBudget, 10 s) and then checks that every key reads back as the
// warehouse holds it, twice, a second apart: no acknowledged write stays
// hidden and no replaced value comes back.
func checkConverged(t *testing.T, label string, in *instance, admin *pgx.Conn, keys int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(12 * time.Second)
	for pass := 0; pass < 2; pass++ {
		for key := range keys {
			for {
				value, version, present, err := row(ctx, admin, key)
				if err != nil {
					t.Fatalf("%s: read key %d from the warehouse: %v", label, key, err)
				}
				a := in.do(ctx, http.MethodGet, key, "", 0)
				ok := (present && a.status == http.StatusOK && a.value == value && a.version == version) ||
					(!present && a.status == http.StatusNotFound)
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("%s: key %d reads %v, the warehouse holds %q@%d (present %v)", label, key, a, value, version, present)
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		time.Sleep(time.Second)
	}
}

// testAcrossInstances runs two instances with near caches on one database
// and one Redis: writers write through A and readers read through B, and
// every read of B that returns a version older than one A acknowledged
// before the read began is stale by the time since that acknowledgement.
// docs/consistency.md bounds it: an entry lags a write by the pub/sub or
// tracking delivery, and never by more than near_ttl. Under a fault
// scenario, A reaches Redis and PostgreSQL through fault proxies that the
// scenario acts on (a restart of Redis restarts B's too), so some of A's
// updates and invalidations do not land: B may then serve the replaced
// entry from Redis until A's retry lands, a bound of A's retry budget
// (10 s) and near_ttl.
func testAcrossInstances(t *testing.T, c *cluster, sc *faultScenario) {
	const keys = 4
	d := c.newDatabase(t, true)
	r := testproc.StartRedis(t)
	prefix := "lin-" + testenv.RandomSuffix(t) + ":"
	cfg := runConfig{near: true}
	aAddr, aDB, bound := r.Addr, d, nearTTL
	var rig *faultRig
	if sc != nil {
		rig = &faultRig{t: t, redis: r, rp: faultproxy.Start(t, r.Addr), rec: newRecorder()}
		u, err := url.Parse(d.dsn)
		if err != nil {
			t.Fatal(err)
		}
		rig.pp = faultproxy.Start(t, u.Host)
		proxied, pu := *d, *u
		pu.Host = rig.pp.Addr()
		proxied.dsn = pu.String()
		aAddr, aDB, bound = rig.rp.Addr(), &proxied, 10*time.Second+nearTTL
		cfg.env = map[string]string{"WARMCACHE_HOT_TIMEOUT": "50ms", "WARMCACHE_BREAKER_THRESHOLD": "1000000"}
	}
	a := startInstance(t, "A", aDB, aAddr, prefix, cfg)
	b := startInstance(t, "B", d, r.Addr, prefix, runConfig{near: true})
	ctx := context.Background()

	type write struct {
		version int64
		acked   time.Time
	}
	type read struct {
		key     int
		version int64
		start   time.Time
		cache   string
	}
	var mu sync.Mutex
	writes := map[int][]write{}
	var reads []read
	for k := range keys {
		ans := a.do(ctx, http.MethodPut, k, fmt.Sprintf("seed-%d", k), 0)
		if ans.status != http.StatusOK {
			t.Fatalf("seed key %d: %v", k, ans)
		}
		writes[k] = append(writes[k], write{ans.version, time.Now()})
	}
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	if rig != nil {
		rig.rec = newRecorder()
		wg.Go(func() {
			sc.run(rig, 3*time.Second)
			rig.calm()
		})
	}
	for id := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(4, uint64(id)))
			for n := 0; time.Now().Before(stop); n++ {
				k := rng.IntN(keys)
				ans := a.do(ctx, http.MethodPut, k, fmt.Sprintf("w%d-%d", id, n), 0)
				acked := time.Now()
				if ans.status == http.StatusOK {
					mu.Lock()
					writes[k] = append(writes[k], write{ans.version, acked})
					mu.Unlock()
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			}
		})
	}
	for id := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(5, uint64(id)))
			var mine []read
			for time.Now().Before(stop) {
				k := rng.IntN(keys)
				start := time.Now()
				ans := b.do(ctx, http.MethodGet, k, "", 0)
				if ans.status == http.StatusOK {
					mine = append(mine, read{k, ans.version, start, ans.cache})
				}
			}
			mu.Lock()
			reads = append(reads, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()

	var lags []time.Duration
	stale, nearHits := 0, 0
	staleBy := map[string]int{}
	for _, rd := range reads {
		if rd.cache == "hit-l1" {
			nearHits++
		}
		// The read is stale by the time since the earliest write above
		// its version that was acknowledged before it began.
		var first time.Time
		for _, w := range writes[rd.key] {
			if w.version > rd.version && w.acked.Before(rd.start) && (first.IsZero() || w.acked.Before(first)) {
				first = w.acked
			}
		}
		if first.IsZero() {
			continue
		}
		stale++
		staleBy[rd.cache]++
		lags = append(lags, rd.start.Sub(first))
	}
	if len(reads) == 0 || nearHits == 0 {
		t.Fatalf("%d reads through B, %d from its near cache: too few to measure", len(reads), nearHits)
	}
	slices.Sort(lags)
	var p50, p99, worst time.Duration
	if n := len(lags); n > 0 {
		p50, p99, worst = lags[n/2], lags[n*99/100], lags[n-1]
	}
	nw := 0
	for _, ws := range writes {
		nw += len(ws)
	}
	label := "two instances"
	if sc != nil {
		label += fmt.Sprintf(" under %s (%s; %.0f of A's Redis updates and fills failed)", sc.name, sc.desc, failedUpdates(t, a))
	}
	t.Logf("%s: %d writes through A, %d reads through B (%d from its near cache); %d reads stale "+
		"(by source %v): lag p50 %v, p99 %v, max %v (bound %v)",
		label, nw, len(reads), nearHits, stale, staleBy, p50.Round(time.Microsecond), p99.Round(time.Microsecond),
		worst.Round(time.Microsecond), bound)
	if worst > bound {
		t.Errorf("B served a version older than an acknowledged write %v after the acknowledgement, beyond its bound %v", worst, bound)
	}
}
