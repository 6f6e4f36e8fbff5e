package warmcache_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// fillCounting counts the hot tier's fills, behind fillFailing.
type fillCounting struct {
	fillFailing
	fills atomic.Int64
}

func (h *fillCounting) FillMany(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) error {
	h.fills.Add(int64(len(fills)))
	return h.fillFailing.FillMany(ctx, ns, fills)
}

// readCounting counts the warehouse's reads.
type readCounting struct {
	*memtier.Warm
	reads atomic.Int64
}

func (w *readCounting) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, error) {
	w.reads.Add(int64(len(keys)))
	return w.Warm.LookupMany(ctx, ns, keys)
}

// key7 returns svc's namespace widgets and its key 7.
func key7(t *testing.T, svc *warmcache.Service) (*warmcache.Namespace, warmcache.Key) {
	t.Helper()
	ns, err := svc.Namespace("widgets")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ns.ParseKey("7")
	if err != nil {
		t.Fatal(err)
	}
	return ns, key
}

// applied applies one change of key 7 at version, as polling reports it
// (the value unknown), and returns the hot-tier fills and warehouse reads
// it cost.
func applied(t *testing.T, svc *warmcache.Service, hot *fillCounting, warm *readCounting, version int64) (fills, reads int64) {
	t.Helper()
	ns, key := key7(t, svc)
	f0, r0 := hot.fills.Load(), warm.reads.Load()
	change := warmcache.Change{Key: key, Entry: warmcache.Entry{Version: version}, Refresh: true}
	if err := svc.Apply(context.Background(), ns, []warmcache.Change{change}); err != nil {
		t.Fatal(err)
	}
	return hot.fills.Load() - f0, warm.reads.Load() - r0
}

// TestOwnWriteComingBackIsNotApplied checks that a change that capture or
// polling brings back from this instance's own write, whose update landed,
// costs neither a warehouse read nor a hot-tier update, and that a change
// above it, from a writer outside the service, is applied.
func TestOwnWriteComingBackIsNotApplied(t *testing.T) {
	hot := &fillCounting{fillFailing: fillFailing{Hot: memtier.NewHot(nil)}}
	warm := &readCounting{Warm: memtier.NewWarm()}
	svc := newService(t, hot, warm)
	first, err := svc.Put(context.Background(), "widgets", "7", []byte(`{"v":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := svc.Put(context.Background(), "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The first write's change, older than the second, then the second's.
	for _, v := range []int64{first.Entry.Version, mine.Entry.Version} {
		if fills, reads := applied(t, svc, hot, warm, v); fills != 0 || reads != 0 {
			t.Errorf("the change at version %d of the write at %d cost %d fills and %d reads, want none", v, mine.Entry.Version, fills, reads)
		}
	}
	outside := mine.Entry.Version + 5
	warm.Set("widgets", "7", []byte(`{"v":"outside"}`), outside)
	if fills, reads := applied(t, svc, hot, warm, outside); fills != 1 || reads != 1 {
		t.Fatalf("a change from outside at version %d cost %d fills and %d reads, want 1 and 1", outside, fills, reads)
	}
	if it, err := svc.Get(context.Background(), "widgets", "7"); err != nil || it.Entry.Version != outside || it.Source != warmcache.SourceHot {
		t.Fatalf("a read after the outside change answered %+v, %v; want a hit at version %d", it, err, outside)
	}
}

// TestOwnWriteWhoseUpdateFailedIsApplied checks that the change of an own
// write whose hot-tier update failed is applied when it comes back: it is
// what brings the hot tier up to the write.
func TestOwnWriteWhoseUpdateFailedIsApplied(t *testing.T) {
	hot := &fillCounting{fillFailing: fillFailing{Hot: memtier.NewHot(nil)}}
	warm := &readCounting{Warm: memtier.NewWarm()}
	svc := newService(t, hot, warm)
	if _, err := svc.Put(context.Background(), "widgets", "7", []byte(`{"v":1}`), nil); err != nil {
		t.Fatal(err)
	}
	hot.failing.Store(true)
	mine, err := svc.Put(context.Background(), "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	hot.failing.Store(false)
	// The write's own retry (see repair) may land meanwhile too.
	if fills, reads := applied(t, svc, hot, warm, mine.Entry.Version); fills < 1 || reads != 1 {
		t.Fatalf("the change of a write whose update failed cost %d fills and %d reads, want 1 read and a fill", fills, reads)
	}
	if e, _ := hot.Hot.(*memtier.Hot).Peek("widgets", "7"); e.Version != mine.Entry.Version {
		t.Fatalf("the hot tier holds version %d, want the write's %d", e.Version, mine.Entry.Version)
	}
}

// publisher is Invalidations over a hot tier's own server (a
// FillPublisher), whose invalidations fail while failing is set.
type publisher struct {
	hot             warmcache.Hot
	failing         atomic.Bool
	together, alone atomic.Int64 // FillPublish and Publish calls
}

var errPublish = errors.New("publish failed")

func (p *publisher) Publish(context.Context, *warmcache.Namespace, warmcache.Key, int64) error {
	p.alone.Add(1)
	return nil
}

func (p *publisher) FillPublish(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) (error, error) {
	p.together.Add(1)
	fillErr := p.hot.FillMany(ctx, ns, fills)
	if p.failing.Load() {
		return fillErr, errPublish
	}
	return fillErr, nil
}

// TestWriteFillsAndPublishesTogether checks that a write in a namespace
// with near caches updates the hot tier and tells the other instances in
// one FillPublish where the invalidations allow it, and that the change of
// a write whose invalidation was not published is applied when it comes
// back, so that the other instances are told then.
func TestWriteFillsAndPublishesTogether(t *testing.T) {
	hot := &fillCounting{fillFailing: fillFailing{Hot: memtier.NewHot(nil)}}
	warm := &readCounting{Warm: memtier.NewWarm()}
	pub := &publisher{hot: hot}
	ns := widgets()
	ns.NearTTL = time.Second
	svc, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{ns}, prometheus.NewRegistry(),
		slog.New(slog.DiscardHandler), warmcache.Options{Invalidations: pub})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mine, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if together, alone := pub.together.Load(), pub.alone.Load(); together != 1 || alone != 0 {
		t.Fatalf("a write made %d FillPublish and %d Publish calls, want 1 and 0", together, alone)
	}
	if fills, reads := applied(t, svc, hot, warm, mine.Entry.Version); fills != 0 || reads != 0 {
		t.Fatalf("the change of a write that told the others cost %d fills and %d reads, want none", fills, reads)
	}
	pub.failing.Store(true)
	untold, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	pub.failing.Store(false)
	before := pub.together.Load()
	if fills, reads := applied(t, svc, hot, warm, untold.Entry.Version); fills != 1 || reads != 1 {
		t.Fatalf("the change of a write whose invalidation failed cost %d fills and %d reads, want 1 and 1", fills, reads)
	}
	if n := pub.together.Load() - before; n != 1 {
		t.Fatalf("applying the change published %d times, want once", n)
	}
}

// TestOwnWriteAfterRestartIsApplied checks that once the hot tier met a new
// server, the change of a write that had landed is applied when it comes
// back: a command sent before the restart and delivered after it may have
// stored an older version there, which the change replaces.
func TestOwnWriteAfterRestartIsApplied(t *testing.T) {
	hot := &restartingHot{Hot: memtier.NewHot(nil)}
	hot.servers.Store(1)
	svc := newService(t, hot, memtier.NewWarm())
	ctx := context.Background()
	older, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	hot.Forget()
	hot.servers.Add(1) // a restart, noticed
	ns, key := key7(t, svc)
	late := warmcache.Fill{Key: key, Entry: older.Entry, Keep: time.Minute}
	if err := hot.FillMany(ctx, ns, []warmcache.Fill{late}); err != nil {
		t.Fatal(err)
	}
	change := warmcache.Change{Key: key, Entry: warmcache.Entry{Version: mine.Entry.Version}, Refresh: true}
	if err := svc.Apply(ctx, ns, []warmcache.Change{change}); err != nil {
		t.Fatal(err)
	}
	if e, _ := hot.Peek("widgets", "7"); e.Version != mine.Entry.Version {
		t.Fatalf("after the restart the hot tier holds version %d, want the write's %d: its change was skipped", e.Version, mine.Entry.Version)
	}
}
