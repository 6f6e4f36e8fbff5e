package warmcache_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

func newClockedService(t *testing.T, hot *memtier.Hot, warm *memtier.Warm, clk *memtier.Clock) *warmcache.Service {
	t.Helper()
	ns := widgets()
	ns.TTL, ns.MaxStale = time.Minute, time.Minute
	s, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{ns}, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)),
		warmcache.Options{Now: clk.Now, BreakerThreshold: 3, BreakerCooldown: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStaleWhileRevalidate(t *testing.T) {
	clk := memtier.NewClock()
	hot, warm := memtier.NewHot(clk.Now), memtier.NewWarm()
	svc := newClockedService(t, hot, warm, clk)
	ctx := context.Background()
	if _, err := svc.Put(ctx, "widgets", "1", []byte(`"v1"`), nil); err != nil {
		t.Fatal(err)
	}
	// The row changes behind the cache's back, as a nightly load would do.
	warm.Set("widgets", "1", []byte(`"v2"`), 99)

	clk.Advance(2 * time.Minute) // past the TTL
	started := make(chan struct{}, 1)
	warm.SetLookupHook(memtier.Gate(started, nil))
	item, err := svc.Get(ctx, "widgets", "1")
	if err != nil || item.Source != warmcache.SourceStale || string(item.Entry.Value) != `"v1"` {
		t.Fatalf("get past the TTL = %+v, %v; want the old value marked stale", item, err)
	}
	select { // the one background refresh reaches the warehouse
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("no background refresh started")
	}
	waitFor(t, func() bool {
		it, err := svc.Get(ctx, "widgets", "1")
		return err == nil && it.Source == warmcache.SourceHot && string(it.Entry.Value) == `"v2"`
	})
	if n := warm.Lookups(); n != 1 {
		t.Fatalf("warehouse lookups = %d, want the one refresh", n)
	}
}

func TestStaleIfErrorAndBreaker(t *testing.T) {
	clk := memtier.NewClock()
	hot, warm := memtier.NewHot(clk.Now), memtier.NewWarm()
	svc := newClockedService(t, hot, warm, clk)
	ctx := context.Background()
	if _, err := svc.Put(ctx, "widgets", "1", []byte(`"v1"`), nil); err != nil {
		t.Fatal(err)
	}
	if it, err := svc.Get(ctx, "widgets", "1"); err != nil || it.Source != warmcache.SourceHot {
		t.Fatalf("hit = %+v, %v", it, err)
	}
	clk.Advance(2 * time.Minute) // key 1 is now past its TTL
	warm.SetFailing(true)
	for i := 0; i < 3; i++ { // misses fail and open the breaker
		if _, err := svc.Get(ctx, "widgets", "404"); !errors.Is(err, warmcache.ErrUnavailable) {
			t.Fatalf("miss %d with the warehouse down: err = %v, want ErrUnavailable", i, err)
		}
	}
	before := warm.Lookups()
	if _, err := svc.Get(ctx, "widgets", "405"); !errors.Is(err, warmcache.ErrUnavailable) {
		t.Fatalf("miss with the breaker open: err = %v, want ErrUnavailable", err)
	}
	if _, err := svc.Put(ctx, "widgets", "2", []byte(`1`), nil); !errors.Is(err, warmcache.ErrUnavailable) {
		t.Fatalf("write with the breaker open: err = %v, want ErrUnavailable", err)
	}
	if got := warm.Lookups(); got != before {
		t.Fatalf("the open breaker let %d calls through", got-before)
	}
	// An expired entry is served stale while the warehouse is down, and
	// the open breaker keeps its revalidation from reaching the warehouse.
	if it, err := svc.Get(ctx, "widgets", "1"); err != nil || it.Source != warmcache.SourceStale {
		t.Fatalf("expired hit with the warehouse down = %+v, %v; want stale", it, err)
	}
	if got := warm.Lookups(); got != before {
		t.Fatalf("a stale hit with the breaker open reached the warehouse %d times", got-before)
	}
	// After the cooldown one probe goes through; it succeeds and closes the breaker.
	warm.SetFailing(false)
	clk.Advance(10 * time.Second)
	if _, err := svc.Get(ctx, "widgets", "406"); !errors.Is(err, warmcache.ErrNotFound) {
		t.Fatalf("probe after the cooldown: err = %v, want ErrNotFound from the warehouse", err)
	}
	if _, err := svc.Put(ctx, "widgets", "2", []byte(`1`), nil); err != nil {
		t.Fatalf("write after the breaker closed: %v", err)
	}
}

// waitFor polls cond until it holds, failing the test after 5s. It is for
// work the service does in the background, which no channel exposes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
