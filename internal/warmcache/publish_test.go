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
// one FillPublish where the invalidations allow it, and that a namespace
// without near caches publishes nothing.
func TestWriteFillsAndPublishesTogether(t *testing.T) {
	hot := memtier.NewHot(nil)
	pub := &publisher{hot: hot}
	near, far := widgets(), widgets()
	near.NearTTL = time.Second
	far.Name = "far"
	svc, err := warmcache.NewService(hot, memtier.NewWarm(), []*warmcache.Namespace{near, far}, prometheus.NewRegistry(),
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
	if e, _ := hot.Peek("widgets", "7"); e.Version != mine.Entry.Version {
		t.Fatalf("the hot tier holds version %d, want the write's %d", e.Version, mine.Entry.Version)
	}
	pub.failing.Store(true)
	if _, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":2}`), nil); err != nil {
		t.Fatalf("a write whose invalidation failed = %v, want it acknowledged", err)
	}
	if _, err := svc.Put(ctx, "far", "7", []byte(`{"v":1}`), nil); err != nil {
		t.Fatal(err)
	}
	if together, alone := pub.together.Load(), pub.alone.Load(); together != 2 || alone != 0 {
		t.Fatalf("after a write without near caches: %d FillPublish and %d Publish calls, want 2 and 0", together, alone)
	}
}
