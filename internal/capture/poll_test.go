package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
)

const testOverlap = 10 * time.Second

// testPoller returns a Poller of namespaces over store and apply, on
// clock, with an overlap of testOverlap, and its metrics' registry.
func testPoller(t *testing.T, store PollStore, apply Applier, clock *memtier.Clock, namespaces ...*warmcache.Namespace) (*Poller, *prometheus.Registry) {
	t.Helper()
	m, reg := testMetrics(t)
	p := newPoller(store, apply, namespaces, time.Second, testOverlap, m, testLog(nil))
	p.now = clock.Now
	return p, reg
}

func round(t *testing.T, p *Poller) {
	t.Helper()
	if err := p.Round(context.Background()); err != nil {
		t.Fatalf("Round: %v", err)
	}
}

func TestPollerStartsAtTheNewestVersion(t *testing.T) {
	items, _ := testNamespaces()
	store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
	store.write("items", "1", 10)
	store.write("items", "2", 11)
	store.remove("items", "3", 12)
	p, _ := testPoller(t, store, apply, clock, items)

	round(t, p)
	appliedOnce(t, apply, "items")

	clock.Advance(time.Second)
	store.write("items", "2", 13)
	store.remove("items", "1", 14)
	round(t, p)
	appliedOnce(t, apply, "items", refresh(items, "2", 13), absent(items, "1", 14))
}

func TestPollerAppliesEachChangeOnce(t *testing.T) {
	items, users := testNamespaces()
	store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
	p, reg := testPoller(t, store, apply, clock, items, users)
	round(t, p)

	// Every round of the overlap window reads the same rows again; each
	// is applied once at each of its versions.
	store.write("items", "1", 1)
	store.write("users", "ann", 2)
	for range 3 {
		clock.Advance(time.Second)
		round(t, p)
	}
	store.write("items", "1", 3)
	store.write("items", "2", 4)
	for range 3 {
		clock.Advance(time.Second)
		round(t, p)
	}
	appliedOnce(t, apply, "items", refresh(items, "1", 1), refresh(items, "1", 3), refresh(items, "2", 4))
	appliedOnce(t, apply, "users", refresh(users, "ann", 2))
	if got := promregtest.Value(t, reg, "warmcache_freshness_changes_total", "namespace", "items", "source", "poll", "kind", "upsert"); got != 3 {
		t.Errorf("changes_total{items,poll,upsert} = %v, want 3", got)
	}
	if got := promregtest.Value(t, reg, "warmcache_freshness_changes_total", "namespace", "users", "source", "poll", "kind", "upsert"); got != 1 {
		t.Errorf("changes_total{users,poll,upsert} = %v, want 1", got)
	}
}

// A transaction takes its version before it commits, so it can commit
// after one with a higher version has been polled. The overlap window
// reads it again, from the first poll on.
func TestPollerAppliesLateCommitsWithinTheOverlap(t *testing.T) {
	for _, tc := range []struct {
		name string
		// rounds is the number of rounds, a second apart, before key 2
		// commits; zero means that it commits during the first round,
		// after the poller has read the newest version.
		rounds int
	}{
		{name: "committed during the first poll", rounds: 0},
		{name: "committed in the first window", rounds: 1},
		{name: "committed once the window has passed", rounds: 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items, _ := testNamespaces()
			store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
			store.write("items", "0", 100)
			p, _ := testPoller(t, store, apply, clock, items)
			// Key 1 takes version 101 and key 2 version 102; key 2
			// commits first and is polled.
			if tc.rounds == 0 {
				store.onCall = func(method string) {
					if method == "Changed" {
						store.onCall = nil
						store.write("items", "2", 102)
					}
				}
			}
			for i := range tc.rounds {
				if i > 0 {
					clock.Advance(time.Second)
				}
				round(t, p)
			}
			if tc.rounds > 0 {
				store.write("items", "2", 102)
				clock.Advance(time.Second)
			}
			round(t, p)
			// Key 1 commits a few seconds later, within the window.
			clock.Advance(3 * time.Second)
			store.write("items", "1", 101)
			round(t, p)
			clock.Advance(time.Second)
			round(t, p)
			appliedOnce(t, apply, "items", refresh(items, "1", 101), refresh(items, "2", 102))
		})
	}
}

// The watermark remembers the keys it applied only within the overlap
// window: once the window has passed, its reads start above what it
// applied and it forgets them.
func TestPollerForgetsWhatIsOlderThanTheOverlap(t *testing.T) {
	items, _ := testNamespaces()
	store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
	p, _ := testPoller(t, store, apply, clock, items)
	round(t, p)
	for i := range 5 {
		store.write("items", strconv.Itoa(i), int64(i+1))
	}
	clock.Advance(time.Second)
	round(t, p)
	w := p.marks["items"]
	if len(w.seen) != 5 || w.high != 5 {
		t.Fatalf("after the round: %d keys seen, high %d; want 5 and 5", len(w.seen), w.high)
	}
	for range int(testOverlap/time.Second) + 1 {
		clock.Advance(time.Second)
		round(t, p)
	}
	if len(w.seen) != 0 {
		t.Errorf("%d keys remembered once the window has passed, want 0", len(w.seen))
	}
	if got := store.afters[len(store.afters)-1]; got != 5 {
		t.Errorf("the last poll read above %d, want 5", got)
	}
	if len(w.history) > int(testOverlap/time.Second)+2 {
		t.Errorf("%d marks kept for a window of %v polled every second", len(w.history), testOverlap)
	}
	appliedOnce(t, apply, "items", refresh(items, "0", 1), refresh(items, "1", 2), refresh(items, "2", 3),
		refresh(items, "3", 4), refresh(items, "4", 5))
}

func TestWatermarkBoundsTheKeysItRemembers(t *testing.T) {
	w := newWatermark()
	w.maxSeen = 2
	w.remember("a", 1)
	w.remember("b", 2)
	w.remember("c", 3)
	w.remember("a", 4)
	if len(w.seen) != 2 {
		t.Errorf("%d keys remembered, want at most 2", len(w.seen))
	}
	if w.high != 4 {
		t.Errorf("high = %d, want 4: a key not remembered still moves the watermark", w.high)
	}
	if !w.applied("a", 4) || !w.applied("a", 3) || w.applied("a", 5) {
		t.Errorf("applied(a): want true at or below 4 and false above")
	}
	if w.applied("c", 3) {
		t.Errorf("applied(c, 3) = true for a key over the bound: it would never be applied again")
	}
}

// A failed Apply leaves the watermark where it was: the next round reads
// the same changes again and applies them, and none is lost.
func TestPollerAppliesAgainAfterAFailedApply(t *testing.T) {
	items, _ := testNamespaces()
	store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
	p, reg := testPoller(t, store, apply, clock, items)
	round(t, p)
	store.write("items", "1", 1)
	store.write("items", "2", 2)
	store.remove("items", "3", 3)

	errHot := errors.New("hot tier down")
	apply.setFail(func(int, *warmcache.Namespace, []warmcache.Change) error { return errHot })
	for range 2 {
		clock.Advance(time.Second)
		if err := p.Round(context.Background()); !errors.Is(err, errHot) {
			t.Fatalf("Round = %v, want the Apply error", err)
		}
	}
	if w := p.marks["items"]; w.high != 0 || len(w.seen) != 0 {
		t.Errorf("after failed applies the watermark is at %d with %d keys seen, want 0 and 0", w.high, len(w.seen))
	}
	if got := promregtest.Value(t, reg, "warmcache_freshness_changes_total", "namespace", "items", "source", "poll", "kind", "upsert"); got != 0 {
		t.Errorf("changes_total counts %v changes that were not applied", got)
	}

	apply.setFail(nil)
	clock.Advance(time.Second)
	round(t, p)
	clock.Advance(time.Second)
	round(t, p)
	appliedOnce(t, apply, "items", refresh(items, "1", 1), refresh(items, "2", 2), absent(items, "3", 3))
	if w := p.marks["items"]; w.high != 2 {
		t.Errorf("the watermark is at %d after applying, want 2", w.high)
	}
	if got := promregtest.Value(t, reg, "warmcache_freshness_changes_total", "namespace", "items", "source", "poll", "kind", "delete"); got != 1 {
		t.Errorf("changes_total{delete} = %v, want 1", got)
	}
}

// More changes than one poll query reads are read in pages, each above
// the last version of the one before; a failure on a later page keeps the
// pages applied and applies the rest in the next round.
func TestPollerReadsChangesInPages(t *testing.T) {
	items, _ := testNamespaces()
	store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
	p, _ := testPoller(t, store, apply, clock, items)
	round(t, p)
	n := 2*pollBatch + 10
	var want []warmcache.Change
	for i := range n {
		store.write("items", strconv.Itoa(i), int64(i+1))
		want = append(want, refresh(items, strconv.Itoa(i), int64(i+1)))
	}
	errHot := errors.New("hot tier down")
	failed := false
	apply.setFail(func(_ int, _ *warmcache.Namespace, changes []warmcache.Change) error {
		if !failed && len(changes) > 0 && changes[0].Entry.Version == pollBatch+1 { // the second page
			failed = true
			return errHot
		}
		return nil
	})
	store.afters = nil
	clock.Advance(time.Second)
	if err := p.Round(context.Background()); !errors.Is(err, errHot) {
		t.Fatalf("Round = %v, want the Apply error", err)
	}
	if want := []int64{0, pollBatch}; !slices.Equal(store.afters, want) {
		t.Errorf("pages read above %v, want %v", store.afters, want)
	}
	if got := len(apply.applied("items")); got != pollBatch {
		t.Errorf("%d changes applied before the failure, want the first page's %d", got, pollBatch)
	}
	clock.Advance(time.Second)
	round(t, p)
	appliedOnce(t, apply, "items", want...)
	for _, c := range apply.calls {
		if len(c.changes) > pollBatch {
			t.Errorf("one Apply of %d changes, want at most %d", len(c.changes), pollBatch)
		}
	}
}

func TestPollerSkipsKeysItCannotParse(t *testing.T) {
	items, users := testNamespaces()
	store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
	p, reg := testPoller(t, store, apply, clock, items, users)
	round(t, p)
	store.write("items", "x1", 1)
	store.write("items", "007", 2)
	store.write("users", "bad\x01key", 3)
	store.write("users", "bob", 4)
	store.remove("items", "not a number", 5)
	store.remove("elsewhere", "1", 6)
	store.remove("items", "8", 7)
	store.remove("users", "carl", 8)
	clock.Advance(time.Second)
	round(t, p)
	appliedOnce(t, apply, "items", refresh(items, "7", 2), absent(items, "8", 7))
	appliedOnce(t, apply, "users", refresh(users, "bob", 4), absent(users, "carl", 8))
	for _, ns := range []string{"items", "users"} {
		if got := promregtest.Value(t, reg, "warmcache_freshness_changes_total", "namespace", ns, "source", "poll", "kind", "delete"); got != 1 {
			t.Errorf("changes_total{%s,poll,delete} = %v, want 1", ns, got)
		}
	}
	if w := p.marks["items"]; w.high != 2 {
		t.Errorf("items watermark at %d, want 2: a key that cannot be parsed is passed over", w.high)
	}
	if w := p.marks[""]; w.high != 8 {
		t.Errorf("delete log watermark at %d, want 8", w.high)
	}
}

// An error of the warehouse stops the round and returns; the next round
// reads again what the failed one did not apply.
func TestPollerSourceErrors(t *testing.T) {
	for _, method := range []string{"Newest", "Changed", "NewestDeleted", "Deleted"} {
		t.Run(method, func(t *testing.T) {
			items, _ := testNamespaces()
			store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
			store.write("items", "1", 1)
			store.remove("items", "2", 2)
			p, _ := testPoller(t, store, apply, clock, items)
			round(t, p)

			errWarehouse := fmt.Errorf("%s: connection refused", method)
			store.setErr(method, errWarehouse)
			store.write("items", "1", 3)
			store.remove("items", "2", 4)
			clock.Advance(time.Second)
			err := p.Round(context.Background())
			if method == "Newest" || method == "NewestDeleted" {
				// Only the first round asks for the newest versions.
				if err != nil {
					t.Fatalf("Round = %v; the newest versions are read once", err)
				}
				appliedOnce(t, apply, "items", refresh(items, "1", 3), absent(items, "2", 4))
				return
			}
			if !errors.Is(err, errWarehouse) {
				t.Fatalf("Round = %v, want the warehouse error", err)
			}
			store.setErr(method, nil)
			clock.Advance(time.Second)
			round(t, p)
			appliedOnce(t, apply, "items", refresh(items, "1", 3), absent(items, "2", 4))
		})
	}
	for _, method := range []string{"Newest", "NewestDeleted"} {
		t.Run(method+" at the start", func(t *testing.T) {
			items, _ := testNamespaces()
			store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
			store.write("items", "1", 1)
			store.remove("items", "2", 2)
			p, _ := testPoller(t, store, apply, clock, items)
			errWarehouse := errors.New("connection refused")
			store.setErr(method, errWarehouse)
			if err := p.Round(context.Background()); !errors.Is(err, errWarehouse) {
				t.Fatalf("Round = %v, want the warehouse error", err)
			}
			store.setErr(method, nil)
			clock.Advance(time.Second)
			round(t, p)
			store.write("items", "3", 3)
			store.remove("items", "1", 4)
			clock.Advance(time.Second)
			round(t, p)
			appliedOnce(t, apply, "items", refresh(items, "3", 3), absent(items, "1", 4))
			if got := store.count(method); got != 2 {
				t.Errorf("%s called %d times, want 2: once failed, once to start", method, got)
			}
		})
	}
}

func TestPollerPrunesTheDeleteLog(t *testing.T) {
	items, _ := testNamespaces()
	store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
	p, _ := testPoller(t, store, apply, clock, items)
	round(t, p)
	if !slices.Equal(store.prunes, []time.Duration{deleteLogAge}) {
		t.Fatalf("prunes after the first round: %v, want one of %v", store.prunes, deleteLogAge)
	}
	clock.Advance(pruneEvery / 2)
	round(t, p)
	if len(store.prunes) != 1 {
		t.Errorf("pruned again within %v", pruneEvery)
	}
	// A failed prune does not fail the round; it is tried again a prune
	// interval later.
	store.setErr("PruneDeleted", errors.New("lock timeout"))
	clock.Advance(pruneEvery)
	store.remove("items", "5", 1)
	round(t, p)
	appliedOnce(t, apply, "items", absent(items, "5", 1))
	store.setErr("PruneDeleted", nil)
	clock.Advance(pruneEvery + time.Second)
	round(t, p)
	if got := store.count("PruneDeleted"); got != 3 {
		t.Errorf("PruneDeleted called %d times, want 3", got)
	}
}

// Run polls every interval. The poll age counts from the start of the
// last round that completed: a failed round does not reset it.
func TestPollerRunReportsThePollAge(t *testing.T) {
	items, _ := testNamespaces()
	store, apply, clock := newFakePollStore(), &fakeApplier{}, memtier.NewClockAt(time.Now())
	m, reg := testMetrics(t)
	p := newPoller(store, apply, []*warmcache.Namespace{items}, time.Millisecond, testOverlap, m, testLog(nil))
	p.now = clock.Now

	if got := promregtest.Value(t, reg, "warmcache_poll_age_seconds"); got != 0 {
		t.Errorf("poll age before polling = %v, want 0", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls, release := make(chan struct{}), make(chan struct{})
	store.onCall = func(method string) {
		if method != "Changed" {
			return
		}
		select {
		case calls <- struct{}{}:
			<-release
		case <-ctx.Done():
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	next := func() { // wait until a round is inside Changed
		t.Helper()
		select {
		case <-calls:
		case <-done:
			t.Fatal("Run returned")
		}
	}

	store.setErr("Changed", errors.New("connection refused"))
	next() // round 1, which fails
	clock.Advance(5 * time.Second)
	release <- struct{}{}
	next() // round 2
	if got := promregtest.Value(t, reg, "warmcache_poll_age_seconds"); got != 5 {
		t.Errorf("poll age after a failed round = %v, want 5", got)
	}
	store.setErr("Changed", nil)
	release <- struct{}{}
	next() // round 3
	if got := promregtest.Value(t, reg, "warmcache_poll_age_seconds"); got != 0 {
		t.Errorf("poll age after a complete round = %v, want 0", got)
	}
	clock.Advance(2 * time.Second)
	if got := promregtest.Value(t, reg, "warmcache_poll_age_seconds"); got != 2 {
		t.Errorf("poll age 2s after a complete round = %v, want 2", got)
	}
	cancel()
	release <- struct{}{}
	<-done
}
