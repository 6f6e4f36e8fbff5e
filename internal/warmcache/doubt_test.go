package warmcache_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// fillFailing is a hot tier whose fills fail while failing is set, as a
// Redis past its deadline does: the update may not land.
type fillFailing struct {
	warmcache.Hot
	failing atomic.Bool
}

var errFill = errors.New("fill failed")

func (h *fillFailing) FillMany(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) error {
	if h.failing.Load() {
		return errFill
	}
	return h.Hot.FillMany(ctx, ns, fills)
}

// TestFailedUpdateReadsWarehouse checks that a key whose write's hot-tier
// update failed is read from the warehouse, never from the hot tier that
// still holds the version the write replaced, until the update's retry
// lands; then it is a hit again.
func TestFailedUpdateReadsWarehouse(t *testing.T) {
	mem := memtier.NewHot(nil)
	hot := &fillFailing{Hot: mem}
	svc := newService(t, hot, memtier.NewWarm())
	ctx := context.Background()
	first, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if it, err := svc.Get(ctx, "widgets", "7"); err != nil || it.Source != warmcache.SourceHot {
		t.Fatalf("get after the first write = %+v, %v; want a hit", it, err)
	}
	hot.failing.Store(true)
	second, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := mem.Peek("widgets", "7"); e.Version != first.Entry.Version {
		t.Fatalf("the hot tier holds version %d, want the replaced %d (the update failed)", e.Version, first.Entry.Version)
	}
	for range 3 {
		it, err := svc.Get(ctx, "widgets", "7")
		if err != nil || it.Entry.Version != second.Entry.Version || it.Source != warmcache.SourceWarm {
			t.Fatalf("get after a write whose update failed = %+v, %v; want version %d from the warehouse", it, err, second.Entry.Version)
		}
	}
	hot.failing.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		it, err := svc.Get(ctx, "widgets", "7")
		if err != nil || it.Entry.Version != second.Entry.Version {
			t.Fatalf("get while the update is repaired = %+v, %v; want version %d", it, err, second.Entry.Version)
		}
		if it.Source == warmcache.SourceHot {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key was still read from the warehouse %v after the hot tier recovered", 10*time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hold makes the first call through it wait, once started is closed,
// until release is closed.
type hold struct {
	started chan struct{}
	release chan struct{}
	n       atomic.Int64
}

func newHold() hold { return hold{started: make(chan struct{}), release: make(chan struct{})} }

func (h *hold) first() {
	if h.n.Add(1) == 1 {
		close(h.started)
		<-h.release
	}
}

// heldWarm is a warehouse whose first lookup reads its rows and then waits
// for release: a query that has read its snapshot and not yet answered.
type heldWarm struct {
	*memtier.Warm
	hold
}

func (w *heldWarm) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, error) {
	es, err := w.Warm.LookupMany(ctx, ns, keys)
	w.first()
	return es, err
}

// TestMissSharesNoReadOlderThanOwnWrite checks that a miss does not share
// a warehouse read that began before a write of its key through the
// instance: the reader who wrote must see its write.
func TestMissSharesNoReadOlderThanOwnWrite(t *testing.T) {
	mem := memtier.NewHot(nil)
	warm := &heldWarm{Warm: memtier.NewWarm(), hold: newHold()}
	svc := newService(t, mem, warm)
	ctx := context.Background()
	if _, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":1}`), nil); err != nil {
		t.Fatal(err)
	}
	mem.Forget()
	first := make(chan warmcache.Item, 1)
	go func() {
		it, _ := svc.Get(ctx, "widgets", "7")
		first <- it
	}()
	<-warm.started // the first read has read version 1 and holds its answer
	mine, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	mem.Forget() // as a Redis restarted empty would
	second := make(chan warmcache.Item, 1)
	go func() {
		it, _ := svc.Get(ctx, "widgets", "7")
		second <- it
	}()
	// Release the held read once the second read has either joined it or
	// queued a read of its own.
	deadline := time.Now().Add(10 * time.Second)
	for warmcache.Waiters(svc, "7") < 2 && warmcache.Queued(svc) == 0 && len(second) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second read neither joined the first nor queued a read of its own")
		}
		time.Sleep(time.Millisecond)
	}
	close(warm.release)
	if it := <-second; it.Entry.Version != mine.Entry.Version {
		t.Fatalf("a read that began after its own write answered version %d (%s), want %d: it shared a read that began before the write",
			it.Entry.Version, it.Source, mine.Entry.Version)
	}
	if it := <-first; !it.Entry.Found {
		t.Fatalf("the first read answered %+v", it)
	}
}

// TestDoubtOverflowBypassesNamespace checks that a key that does not fit
// in the set of keys in doubt makes its namespace read from the warehouse,
// past the caches, and says so in a metric.
func TestDoubtOverflowBypassesNamespace(t *testing.T) {
	mem := memtier.NewHot(nil)
	hot := &fillFailing{Hot: mem}
	reg := prometheus.NewRegistry()
	ns := widgets()
	ns.TTL = time.Minute
	svc, err := warmcache.NewService(hot, memtier.NewWarm(), []*warmcache.Namespace{ns}, reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	warmcache.SetMaxDoubts(svc, 2)
	ctx := context.Background()
	if _, err := svc.Put(ctx, "widgets", "100", []byte(`{"v":0}`), nil); err != nil {
		t.Fatal(err)
	}
	if it, err := svc.Get(ctx, "widgets", "100"); err != nil || it.Source != warmcache.SourceHot {
		t.Fatalf("get of a key nobody doubts = %+v, %v; want a hit", it, err)
	}
	hot.failing.Store(true)
	for _, k := range []string{"1", "2", "3"} {
		if _, err := svc.Put(ctx, "widgets", k, []byte(`{"v":1}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	hot.failing.Store(false)
	// Key 3 did not fit: every key of the namespace, 100 included, is
	// read from the warehouse.
	for _, k := range []string{"3", "100"} {
		if it, err := svc.Get(ctx, "widgets", k); err != nil || it.Source != warmcache.SourceWarm {
			t.Fatalf("get of key %s after the set overflowed = %+v, %v; want it from the warehouse", k, it, err)
		}
	}
	got := promregtest.Value(t, reg, "warmcache_cache_doubt_overflows_total")
	if got < 1 {
		t.Fatalf("warmcache_cache_doubt_overflows_total = %v, want at least 1", got)
	}
}

// answerLost is a warehouse whose writes commit, and then, while lost is
// set, answer an error, as a write whose connection broke after its commit
// does: the caller cannot tell whether it took effect.
type answerLost struct {
	*memtier.Warm
	lost atomic.Bool
}

func (w *answerLost) Write(ctx context.Context, ns *warmcache.Namespace, writes []warmcache.Write) ([]warmcache.Entry, error) {
	entries, err := w.Warm.Write(ctx, ns, writes)
	if err == nil && w.lost.Load() {
		return nil, fmt.Errorf("%w: connection reset after the commit", warmcache.ErrUnavailable)
	}
	return entries, err
}

// TestUnknownOutcomeReadsWarehouse checks that after a write whose outcome
// is unknown (it committed, but its answer was lost) the key is read from
// the warehouse, never from the caches that still hold the version before
// it, until a fill from a read that began after it lands.
func TestUnknownOutcomeReadsWarehouse(t *testing.T) {
	warm := &answerLost{Warm: memtier.NewWarm()}
	svc := newService(t, memtier.NewHot(nil), warm)
	ctx := context.Background()
	first, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if it, err := svc.Get(ctx, "widgets", "7"); err != nil || it.Source != warmcache.SourceHot {
		t.Fatalf("get after the first write = %+v, %v; want a hit", it, err)
	}
	warm.lost.Store(true)
	if _, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil); !errors.Is(err, warmcache.ErrUnavailable) {
		t.Fatalf("put whose answer is lost: %v, want ErrUnavailable", err)
	}
	warm.lost.Store(false)
	it, err := svc.Get(ctx, "widgets", "7")
	if err != nil || it.Entry.Version <= first.Entry.Version || it.Source != warmcache.SourceWarm {
		t.Fatalf("get after a write of unknown outcome = %+v, %v; want a version above %d from the warehouse", it, err, first.Entry.Version)
	}
	again, err := svc.Get(ctx, "widgets", "7")
	if err != nil || again.Entry.Version != it.Entry.Version || again.Source != warmcache.SourceHot {
		t.Fatalf("get after the warehouse read's fill = %+v, %v; want version %d from the hot tier", again, err, it.Entry.Version)
	}
}

// restartingHot is the hot tier of one Redis server that restarts empty,
// as its client sees it: the restart empties the tier at once, and the
// client notices it (a connection meets the new server's run id) only when
// some connection reconnects, at any moment. Here that moment is the
// second look at the count of servers after the restart.
type restartingHot struct {
	*memtier.Hot
	servers atomic.Uint64
	notice  atomic.Int64 // looks at the count before the restart is noticed
}

func (h *restartingHot) Servers() uint64 {
	if n := h.notice.Load(); n > 0 && h.notice.Add(-1) == 0 {
		h.servers.Add(1)
	}
	return h.servers.Load()
}

// restart empties the tier; the client notices at the second look.
func (h *restartingHot) restart() {
	h.Forget()
	h.notice.Store(2)
}

// TestFillAfterRestartNoticedLateIsDoubted checks that a miss's fill,
// from a warehouse read that began before a write whose update landed in a
// Redis that then restarted empty, is not trusted when the client notices
// the new server only after the miss's last look before filling: the
// count of servers is the one from before the warehouse read, so the next
// read goes to the warehouse and answers the write, not the older fill.
func TestFillAfterRestartNoticedLateIsDoubted(t *testing.T) {
	hot := &restartingHot{Hot: memtier.NewHot(nil)}
	hot.servers.Store(1)
	warm := &heldWarm{Warm: memtier.NewWarm(), hold: newHold()}
	svc := newService(t, hot, warm)
	ctx := context.Background()
	warm.Set("widgets", "7", []byte(`{"v":1}`), 1)
	first := make(chan warmcache.Item, 1)
	go func() {
		it, _ := svc.Get(ctx, "widgets", "7")
		first <- it
	}()
	<-warm.started // the miss has read version 1 and holds its answer
	mine, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := hot.Peek("widgets", "7"); e.Version != mine.Entry.Version {
		t.Fatalf("the hot tier holds version %d, want the write's %d", e.Version, mine.Entry.Version)
	}
	hot.restart() // the write's update is lost with it
	close(warm.release)
	if it := <-first; it.Entry.Version != 1 {
		t.Fatalf("the miss answered %+v, want version 1", it)
	}
	if e, _ := hot.Peek("widgets", "7"); e.Version != 1 {
		t.Fatalf("the hot tier holds version %d after the miss's fill, want 1 (the fill lands; it is its trust that is at stake)", e.Version)
	}
	for range 3 {
		it, err := svc.Get(ctx, "widgets", "7")
		if err != nil || it.Entry.Version != mine.Entry.Version {
			t.Fatalf("a read after the write answered %+v, %v; want version %d: the fill that a restart noticed late let in was trusted",
				it, err, mine.Entry.Version)
		}
	}
}

// heldWrite is a warehouse whose first write commits and then waits for
// release before it answers: a write whose hot-tier update is late.
type heldWrite struct {
	*memtier.Warm
	hold
}

func (w *heldWrite) Write(ctx context.Context, ns *warmcache.Namespace, writes []warmcache.Write) ([]warmcache.Entry, error) {
	entries, err := w.Warm.Write(ctx, ns, writes)
	w.first()
	return entries, err
}

// TestLateWriteUpdateAfterRestartIsDoubted checks that a write's hot-tier
// update that lands late, in a Redis that restarted empty after a newer
// write's update had landed in it, is not trusted: the next read goes to
// the warehouse and answers the newer write.
func TestLateWriteUpdateAfterRestartIsDoubted(t *testing.T) {
	hot := &restartingHot{Hot: memtier.NewHot(nil)}
	hot.servers.Store(1)
	warm := &heldWrite{Warm: memtier.NewWarm(), hold: newHold()}
	svc := newService(t, hot, warm)
	ctx := context.Background()
	late := make(chan warmcache.Item, 1)
	go func() {
		it, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":1}`), nil)
		if err != nil {
			t.Error(err)
		}
		late <- it
	}()
	<-warm.started // the first write committed; its update has not gone out
	newer, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	hot.Forget() // Redis restarts empty: the newer write's update is lost
	hot.notice.Store(1)
	close(warm.release)
	first := <-late
	if first.Entry.Version >= newer.Entry.Version {
		t.Fatalf("the late write is at version %d, the newer at %d", first.Entry.Version, newer.Entry.Version)
	}
	if e, _ := hot.Peek("widgets", "7"); e.Version != first.Entry.Version {
		t.Fatalf("the hot tier holds version %d, want the late write's %d", e.Version, first.Entry.Version)
	}
	for range 3 {
		it, err := svc.Get(ctx, "widgets", "7")
		if err != nil || it.Entry.Version != newer.Entry.Version {
			t.Fatalf("a read after both writes answered %+v, %v; want version %d: the late update in a restarted Redis was trusted",
				it, err, newer.Entry.Version)
		}
	}
}

// retryHeldHot is a hot tier whose updates can be made to fail, and which holds
// one call, once armed, until release: the next look at its count of
// servers (armedLook), or the next update, which then fails as a Redis
// past its deadline does (armedFill).
type retryHeldHot struct {
	*memtier.Hot
	servers   atomic.Uint64
	fail      atomic.Bool
	armedLook atomic.Bool
	armedFill atomic.Bool
	held      chan struct{} // closed when the held call begins
	release   chan struct{}
}

func newRetryHeldHot() *retryHeldHot {
	h := &retryHeldHot{Hot: memtier.NewHot(nil), held: make(chan struct{}), release: make(chan struct{})}
	h.servers.Store(1)
	return h
}

func (h *retryHeldHot) Servers() uint64 {
	if h.armedLook.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
	}
	return h.servers.Load()
}

func (h *retryHeldHot) FillMany(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) error {
	if h.armedFill.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
		return errors.New("hot tier: i/o timeout")
	}
	if h.fail.Load() {
		return errors.New("hot tier: connection reset")
	}
	return h.Hot.FillMany(ctx, ns, fills)
}

// restart empties the tier and counts a new server, noticed at once.
func (h *retryHeldHot) restart() {
	h.Forget()
	h.servers.Add(1)
}

// expectNewerAfterRetry gives a write's retry the time to land, if it is
// to land at all, and then expects reads of widgets/7 to answer newer, not
// the retried first; why says what it means if they do not.
func expectNewerAfterRetry(t *testing.T, svc *warmcache.Service, hot *retryHeldHot, first, newer warmcache.Item, why string) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, ok := hot.Peek("widgets", "7"); ok {
			break
		}
	}
	for range 3 {
		it, err := svc.Get(ctx, "widgets", "7")
		if err != nil || it.Entry.Version != newer.Entry.Version {
			t.Fatalf("a read after both writes answered %+v, %v; want version %d, not the retried version %d: %s",
				it, err, newer.Entry.Version, first.Entry.Version, why)
		}
	}
}

// TestRepairAfterNewerWriteAndRestartIsDropped checks that the retry of a
// write's failed hot-tier update cannot land, trusted, in a Redis that
// restarted empty after a newer write's update landed: the retry takes
// the count of servers before it looks at the key's doubt, so a newer
// write and a restart that come between the two leave the next reads to
// the warehouse, which answers the newer write.
func TestRepairAfterNewerWriteAndRestartIsDropped(t *testing.T) {
	hot := newRetryHeldHot()
	svc := newService(t, hot, memtier.NewWarm())
	ctx := context.Background()
	hot.fail.Store(true)
	first, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	hot.fail.Store(false)
	hot.armedLook.Store(true) // the retry's next look waits
	<-hot.held
	newer, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	hot.restart() // the newer write's update is lost
	close(hot.release)
	expectNewerAfterRetry(t, svc, hot, first, newer, "the retry in a restarted Redis was trusted")
}

// TestRepairCreatesNothingInARestartedRedis checks that the retry of a
// write's failed hot-tier update only replaces what Redis holds: a newer
// write lands while a retry is under way, the retry fails (putting the
// key back in doubt at the old version), Redis restarts empty and the
// restart is noticed; the next retry must not store the old version in
// the empty Redis, where reads would take it for the latest.
func TestRepairCreatesNothingInARestartedRedis(t *testing.T) {
	hot := newRetryHeldHot()
	svc := newService(t, hot, memtier.NewWarm())
	ctx := context.Background()
	hot.fail.Store(true)
	first, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	hot.armedFill.Store(true) // the first retry waits, then fails
	hot.fail.Store(false)
	<-hot.held
	newer, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	close(hot.release)
	hot.restart() // the newer write's update is lost
	expectNewerAfterRetry(t, svc, hot, first, newer, "the retry created an entry in a restarted Redis")
}
