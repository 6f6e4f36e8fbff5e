package warmcache_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestChangeEchoOfOwnWrite checks that change capture's report of a row
// this instance wrote, at the version it wrote, does not update the hot
// tier a second time, and is counted as an echo; that an echo is skipped
// once; that a change at another version of the same key is applied; and
// that the echo of a write whose update failed is applied.
func TestChangeEchoOfOwnWrite(t *testing.T) {
	mem := memtier.NewHot(nil)
	hot := &fillFailing{Hot: mem}
	reg := prometheus.NewRegistry()
	svc, err := warmcache.NewService(hot, memtier.NewWarm(), []*warmcache.Namespace{widgets()}, reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := mustNamespace(t, svc, "widgets")
	key := mustKey(t, ns, "7")
	it, err := svc.Put(ctx, "widgets", "7", []byte(`{"v":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	echoes := func() float64 {
		return promregtest.Value(t, reg, "warmcache_cache_fills_total", "reason", "change", "result", "echo")
	}
	apply := func(c warmcache.Change) int64 {
		t.Helper()
		before := mem.Fills()
		if err := svc.Apply(ctx, ns, []warmcache.Change{c}); err != nil {
			t.Fatal(err)
		}
		return mem.Fills() - before
	}
	if n := apply(warmcache.Change{Key: key, Entry: it.Entry}); n != 0 || echoes() != 1 {
		t.Errorf("the echo of the service's own write filled %d keys and counted %v echoes; want 0 and 1", n, echoes())
	}
	if n := apply(warmcache.Change{Key: key, Entry: it.Entry}); n != 1 || echoes() != 1 {
		t.Errorf("the same change again filled %d keys and counted %v echoes; want 1 and 1", n, echoes())
	}
	newer := warmcache.Entry{Value: []byte(`{"v":2}`), Version: it.Entry.Version + 10, Found: true}
	if n := apply(warmcache.Change{Key: key, Entry: newer}); n != 1 {
		t.Errorf("a change at a newer version filled %d keys, want 1", n)
	}
	if e, ok := mem.Peek("widgets", "7"); !ok || e.Version != newer.Version {
		t.Errorf("after a newer change the hot tier holds %+v (%v), want version %d", e, ok, newer.Version)
	}

	if _, err := svc.Put(ctx, "widgets", "8", []byte(`{"v":0}`), nil); err != nil {
		t.Fatal(err)
	}
	hot.failing.Store(true)
	failed, err := svc.Put(ctx, "widgets", "8", []byte(`{"v":1}`), nil)
	hot.failing.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	apply(warmcache.Change{Key: mustKey(t, ns, "8"), Entry: failed.Entry})
	if echoes() != 1 {
		t.Errorf("the echo of a write whose update failed was skipped: %v echoes, want 1", echoes())
	}
	if e, ok := mem.Peek("widgets", "8"); !ok || e.Version != failed.Entry.Version {
		t.Errorf("after the echo of a write whose update failed the hot tier holds %+v (%v), want version %d", e, ok, failed.Entry.Version)
	}
}

// TestChangeEchoWaitsForTheWrite checks that the echo of a write that
// committed but has not yet answered the service (capture is often that
// fast) is recognized: Apply waits for the write's version, then skips it.
func TestChangeEchoWaitsForTheWrite(t *testing.T) {
	mem := memtier.NewHot(nil)
	warm := &heldWrite{Warm: memtier.NewWarm(), hold: newHold()}
	reg := prometheus.NewRegistry()
	svc, err := warmcache.NewService(mem, warm, []*warmcache.Namespace{widgets()}, reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	warmcache.SetEchoWait(svc, time.Minute)
	ctx := context.Background()
	ns := mustNamespace(t, svc, "widgets")
	key := mustKey(t, ns, "9")
	done := make(chan error, 1)
	go func() {
		_, err := svc.Put(ctx, "widgets", "9", []byte(`{"v":1}`), nil)
		done <- err
	}()
	<-warm.started // committed; the service has not seen the answer
	committed, err := warm.Warm.LookupMany(ctx, ns, []warmcache.Key{key})
	if err != nil || !committed[0].Found {
		t.Fatalf("the committed row: %+v, %v", committed, err)
	}
	go func() {
		time.Sleep(time.Millisecond)
		close(warm.release)
	}()
	before := mem.Fills()
	if err := svc.Apply(ctx, ns, []warmcache.Change{{Key: key, Entry: committed[0]}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := promregtest.Value(t, reg, "warmcache_cache_fills_total", "reason", "change", "result", "echo"); got != 1 {
		t.Errorf("the echo of a write under way counted %v echoes, want 1", got)
	}
	if n := mem.Fills() - before; n != 1 {
		t.Errorf("the write and its echo filled %d keys, want 1 (the write's own)", n)
	}
}
