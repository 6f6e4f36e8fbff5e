package fault_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// opKind is what one request of the load does.
type opKind int

const (
	readWarm opKind = iota // GET of a key read before the fault: a hot-tier hit while Redis is up
	readCold               // GET of a key nobody read before: a miss that needs the warehouse
	write                  // PUT of one of a few keys
	numKinds
)

func (k opKind) String() string {
	return [...]string{"GET warm", "GET cold", "PUT"}[k]
}

// outcome is one request of the load.
type outcome struct {
	kind       opKind
	key        string
	start      time.Time
	took       time.Duration
	status     int // zero when no answer came
	cache      string
	retryAfter string
	sent       []byte // the body of a PUT
	version    int64  // the ETag of an acknowledged PUT
	err        error
}

// load runs GETs and PUTs through the service's REST API from a few
// goroutines until it is stopped.
type load struct {
	svc       *service
	warmKeys  []string
	writeKeys []string
	coldFirst int
	coldCount int
	coldNext  atomic.Int64

	done     atomic.Int64           // requests answered or failed
	okStart  [numKinds]atomic.Int64 // latest start (Unix ns) of a success, per kind
	hitStart atomic.Int64           // latest start (Unix ns) of a GET answered from Redis
	results  [][]outcome            // per worker; read after stop
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// startLoad starts workers goroutines. Each cycles through a GET of one of
// warmKeys, a GET of a fresh key among coldCount keys from coldFirst, and a
// PUT of one of writeKeys.
func startLoad(svc *service, workers int, warmKeys, writeKeys []string, coldFirst, coldCount int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{svc: svc, warmKeys: warmKeys, writeKeys: writeKeys, coldFirst: coldFirst, coldCount: coldCount,
		results: make([][]outcome, workers), cancel: cancel}
	for w := range workers {
		l.wg.Go(func() { l.work(ctx, w) })
	}
	return l
}

// stop stops the workers after their current request and returns every
// outcome by start time.
func (l *load) stop() []outcome {
	l.cancel()
	l.wg.Wait()
	var all []outcome
	for _, r := range l.results {
		all = append(all, r...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].start.Before(all[j].start) })
	return all
}

func (l *load) work(ctx context.Context, w int) {
	var n [numKinds]int // requests of each kind so far
	for i := 0; ctx.Err() == nil; i++ {
		kind := opKind((w + i) % int(numKinds))
		seq := w + workers*n[kind] // spreads the workers over the keys
		n[kind]++
		o := outcome{kind: kind}
		var r reply
		switch kind {
		case readWarm:
			o.key = l.warmKeys[seq%len(l.warmKeys)]
			r = l.svc.do(context.Background(), http.MethodGet, widgetPath(o.key), nil)
		case readCold:
			o.key = strconv.Itoa(l.coldFirst + int(l.coldNext.Add(1)-1)%l.coldCount)
			r = l.svc.do(context.Background(), http.MethodGet, widgetPath(o.key), nil)
		case write:
			o.key = l.writeKeys[seq%len(l.writeKeys)]
			o.sent = fmt.Appendf(nil, `{"worker":%d,"seq":%d,"note":"fault load"}`, w, i)
			r = l.svc.do(context.Background(), http.MethodPut, widgetPath(o.key), o.sent)
		}
		o.start, o.took, o.status, o.err = r.start, r.took, r.status, r.err
		if r.header != nil {
			o.cache, o.retryAfter = r.header.Get("X-Cache"), r.header.Get("Retry-After")
		}
		if kind == write && r.status == http.StatusOK {
			v, err := etagVersion(r.header)
			if err != nil {
				o.err = fmt.Errorf("acknowledged PUT without a version ETag: %w", err)
			}
			o.version = v
		}
		if o.err == nil && r.status == http.StatusOK {
			storeMax(&l.okStart[kind], o.start.UnixNano())
			if kind != write && o.cache == "hit" {
				storeMax(&l.hitStart, o.start.UnixNano())
			}
		}
		l.results[w] = append(l.results[w], o)
		l.done.Add(1)
	}
}

// succeededSince reports whether a request of each kind that started at or
// after t has succeeded.
func (l *load) succeededSince(t time.Time, kinds ...opKind) bool {
	for _, k := range kinds {
		if l.okStart[k].Load() < t.UnixNano() {
			return false
		}
	}
	return true
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// timeline is when a fault began and ended.
type timeline struct {
	stop      time.Time // the tier is told to stop
	down      time.Time // it has stopped
	restart   time.Time // it is started again
	up        time.Time // it answers again
	recovered time.Time // the service answered as before the fault
}

// phase names the part of the timeline in which a request started.
func (tl timeline) phase(o outcome) string {
	switch {
	case o.start.Before(tl.stop):
		return "before"
	case o.start.Before(tl.up):
		return "outage"
	default:
		return "after"
	}
}

// fault is one tier outage.
type fault struct {
	tier      string
	stop      func(t testing.TB)
	start     func(t testing.TB)      // returns when the tier answers again
	whileDown func(t testing.TB)      // optional: waits for the service to react to the outage
	recovered func(up time.Time) bool // the service works as before the fault
}

// minOutage is how long a tier stays down at least: longer than the
// warehouse circuit breaker's first cooldown (1s), so that the breaker
// lets a probe through during the outage and backs off when it fails.
const minOutage = 1500 * time.Millisecond

// runFault lets the load run, stops the tier, keeps it down for minOutage
// and until the load has sent at least 100 requests into the outage (and
// whileDown returned), starts it again, waits until the service has
// recovered, and lets 200 more requests run. It returns the timeline and
// every request's outcome.
func runFault(t testing.TB, l *load, f fault) (timeline, []outcome) {
	t.Helper()
	var tl timeline
	defer func() {
		if tl.recovered.IsZero() { // failed half-way: stop the load anyway
			l.stop()
		}
	}()
	eventually(t, 15*time.Second, "the load gets going", func() bool { return l.done.Load() >= 100 })
	tl.stop = time.Now()
	f.stop(t)
	tl.down = time.Now()
	since := l.done.Load()
	eventually(t, 30*time.Second, "the load meets the outage", func() bool {
		return l.done.Load() >= since+100 && time.Since(tl.down) >= minOutage
	})
	if f.whileDown != nil {
		f.whileDown(t)
	}
	tl.restart = time.Now()
	f.start(t)
	tl.up = time.Now()
	eventually(t, 45*time.Second, "the service recovers after "+f.tier+" returns", func() bool { return f.recovered(tl.up) })
	// Some more load after the recovery, to see it hold.
	since = l.done.Load()
	eventually(t, 15*time.Second, "the load goes on after the recovery", func() bool { return l.done.Load() >= since+200 })
	tl.recovered = time.Now()
	return tl, l.stop()
}

// report logs the timeline and the outcomes by phase, kind, status and
// X-Cache, with the slowest request of each.
func report(t testing.TB, tier string, tl timeline, results []outcome) {
	t.Helper()
	t.Logf("%s stopped in %v, down for %v, restarted in %v; load ran %v, %d requests",
		tier, tl.down.Sub(tl.stop).Round(time.Millisecond), tl.restart.Sub(tl.down).Round(time.Millisecond),
		tl.up.Sub(tl.restart).Round(time.Millisecond), tl.recovered.Sub(results[0].start).Round(time.Millisecond), len(results))
	type group struct {
		phase string
		kind  opKind
	}
	counts := map[group]map[string]int{}
	slowest := map[group]time.Duration{}
	for _, o := range results {
		g := group{tl.phase(o), o.kind}
		if counts[g] == nil {
			counts[g] = map[string]int{}
		}
		label := strconv.Itoa(o.status)
		if o.err != nil {
			label = "error"
		} else if o.cache != "" {
			label += " " + o.cache
		}
		counts[g][label]++
		slowest[g] = max(slowest[g], o.took)
	}
	for _, phase := range []string{"before", "outage", "after"} {
		for k := range numKinds {
			g := group{phase, k}
			if counts[g] == nil {
				continue
			}
			labels := make([]string, 0, len(counts[g]))
			for label, n := range counts[g] {
				labels = append(labels, fmt.Sprintf("%s x%d", label, n))
			}
			slices.Sort(labels)
			t.Logf("  %-6s %-8s %s; slowest %v", phase, k, strings.Join(labels, ", "), slowest[g].Round(time.Millisecond))
		}
	}
}

// firstSuccess returns how long after tl.up the first request of kind that
// started then succeeded (and, if cache is not empty, was answered with that
// X-Cache) was answered.
func firstSuccess(tl timeline, results []outcome, kind opKind, cache string) time.Duration {
	for _, o := range results {
		if o.kind == kind && !o.start.Before(tl.up) && o.err == nil && o.status == http.StatusOK &&
			(cache == "" || o.cache == cache) {
			return o.start.Add(o.took).Sub(tl.up)
		}
	}
	return -1
}

// checkWrites checks that no acknowledged write was lost: every key that a
// PUT wrote is in SQL at a version at least that of its last acknowledged
// PUT (with that PUT's value when the versions are equal), and the service
// now serves exactly what SQL holds. conn is a direct connection to the
// warehouse.
func checkWrites(t testing.TB, svc *service, conn *pgx.Conn, keys []string, results []outcome) {
	t.Helper()
	acked := map[string]outcome{}
	ackedCount := 0
	for _, o := range results {
		if o.kind == write && o.status == http.StatusOK && o.err == nil {
			ackedCount++
			if o.version > acked[o.key].version {
				acked[o.key] = o
			}
		}
	}
	if ackedCount == 0 {
		t.Fatal("no PUT was acknowledged")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type row struct {
		value   []byte
		version int64
	}
	inSQL := map[string]row{}
	rows, err := conn.Query(ctx, `SELECT key::text, value::text, version FROM widgets WHERE key::text = ANY($1)`, keys)
	if err != nil {
		t.Fatalf("read written keys: %v", err)
	}
	for rows.Next() {
		var k string
		var r row
		if err := rows.Scan(&k, &r.value, &r.version); err != nil {
			t.Fatalf("read written keys: %v", err)
		}
		inSQL[k] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read written keys: %v", err)
	}
	lost, unacked := 0, 0
	for _, k := range keys {
		r, ok := inSQL[k]
		a, wasAcked := acked[k]
		switch {
		case !ok:
			t.Errorf("key %s: not in SQL", k)
			continue
		case wasAcked && r.version < a.version:
			lost++
			t.Errorf("key %s: SQL holds version %d, older than the acknowledged version %d", k, r.version, a.version)
		case wasAcked && r.version == a.version && !jsonEqual(r.value, a.sent):
			lost++
			t.Errorf("key %s: SQL holds %s at version %d, the acknowledged PUT sent %s", k, r.value, r.version, a.sent)
		case wasAcked && r.version > a.version:
			// A PUT that failed or timed out on the client's side may
			// still have committed; that is allowed, losing one is not.
			unacked++
		}
		got := svc.do(ctx, http.MethodGet, widgetPath(k), nil)
		v, _ := etagVersion(got.header)
		if got.err != nil || got.status != http.StatusOK || v != r.version || !jsonEqual(got.body, r.value) {
			t.Errorf("key %s: the service answers %d %s (ETag %d, X-Cache %q, error %v), SQL holds version %d %s",
				k, got.status, got.body, v, got.header.Get("X-Cache"), got.err, r.version, r.value)
		}
	}
	t.Logf("writes: %d acknowledged over %d keys, %d lost; %d keys hold a later write whose answer was an error",
		ackedCount, len(acked), lost, unacked)
}

// prewarm reads every key twice and checks that the second read is a hit,
// so that the keys are in the hot tier before a fault.
func prewarm(t testing.TB, svc *service, keys []string) {
	t.Helper()
	for _, k := range keys {
		for i := range 2 {
			r := svc.do(context.Background(), http.MethodGet, widgetPath(k), nil)
			if r.err != nil || r.status != http.StatusOK {
				t.Fatalf("prewarm GET %s: status %d, error %v, body %s", k, r.status, r.err, r.body)
			}
			if i == 1 && r.header.Get("X-Cache") != "hit" {
				t.Fatalf("prewarm GET %s: X-Cache %q on the second read, want hit", k, r.header.Get("X-Cache"))
			}
		}
	}
}

// keyRange returns the keys first..first+n-1 as text.
func keyRange(first, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strconv.Itoa(first + i)
	}
	return keys
}
