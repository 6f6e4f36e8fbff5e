package warmcache_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// heldHot counts the hot tier's reads and, when armed, holds the next
// read's answer (taken before it waits) until release is closed.
type heldHot struct {
	*memtier.Hot
	reads   atomic.Int64
	armed   atomic.Bool
	holding chan struct{} // closed when the armed read has its answer
	release chan struct{}
}

func (h *heldHot) GetMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, []bool, error) {
	h.reads.Add(int64(len(keys)))
	es, hits, err := h.Hot.GetMany(ctx, ns, keys)
	if h.armed.CompareAndSwap(true, false) {
		close(h.holding)
		<-h.release
	}
	return es, hits, err
}

// newPatientService is a service whose hot-tier deadline no test machine
// can miss, so that a held read is not counted as a hot-tier failure.
func newPatientService(tb testing.TB, hot warmcache.Hot, warm warmcache.Warm) *warmcache.Service {
	tb.Helper()
	s, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{widgets()}, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{HotTimeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestMissReadsTheHotTierOnce: a miss that no other read of its key
// overlapped reads the hot tier once, the warehouse once, and fills.
func TestMissReadsTheHotTierOnce(t *testing.T) {
	hot, warm := &heldHot{Hot: memtier.NewHot(nil)}, memtier.NewWarm()
	warm.Set("widgets", "7", []byte(`7`), 3)
	svc := newPatientService(t, hot, warm)
	item, err := svc.Get(context.Background(), "widgets", "7")
	if err != nil || item.Source != warmcache.SourceWarm || string(item.Entry.Value) != "7" {
		t.Fatalf("Get = %+v, %v; want a miss answered from the warehouse", item, err)
	}
	if n := hot.reads.Load(); n != 1 {
		t.Errorf("hot-tier reads = %d, want 1", n)
	}
	if n := warm.Lookups(); n != 1 {
		t.Errorf("warehouse lookups = %d, want 1", n)
	}
	if e, hit := hot.Peek("widgets", "7"); !hit || e.Version != 3 {
		t.Errorf("hot tier after the miss: %+v, hit %v; want version 3", e, hit)
	}
}

// TestMissAfterAnotherFlightEndedRechecks: a read whose hot-tier miss was
// taken before another read of the same key ended (and filled) reads the
// hot tier again instead of the warehouse.
func TestMissAfterAnotherFlightEndedRechecks(t *testing.T) {
	hot, warm := &heldHot{Hot: memtier.NewHot(nil), holding: make(chan struct{}), release: make(chan struct{})}, memtier.NewWarm()
	warm.Set("widgets", "9", []byte(`9`), 4)
	svc := newPatientService(t, hot, warm)
	hot.armed.Store(true)

	var wg sync.WaitGroup
	var late warmcache.Item
	var lateErr error
	wg.Add(1)
	go func() { // its hot-tier read misses and is held
		defer wg.Done()
		late, lateErr = svc.Get(context.Background(), "widgets", "9")
	}()
	<-hot.holding
	first, err := svc.Get(context.Background(), "widgets", "9")
	if err != nil || first.Source != warmcache.SourceWarm {
		t.Fatalf("first Get = %+v, %v; want a miss", first, err)
	}
	close(hot.release) // the held read now answers its miss, after the first read's fill
	wg.Wait()
	if lateErr != nil || string(late.Entry.Value) != "9" || late.Entry.Version != 4 {
		t.Fatalf("late Get = %+v, %v; want version 4", late, lateErr)
	}
	if n := warm.Lookups(); n != 1 {
		t.Errorf("warehouse lookups = %d, want 1: the late read should have found the first read's fill", n)
	}
	if n := hot.reads.Load(); n != 3 {
		t.Errorf("hot-tier reads = %d, want 3 (two misses and one recheck)", n)
	}
}
