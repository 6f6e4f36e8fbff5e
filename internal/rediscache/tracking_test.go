package rediscache_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/testproc"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// dropped is one Drop of a recordingDropper.
type dropped struct{ ns, key string }

// recordingDropper records what tracking asks of the near cache.
type recordingDropper struct {
	drops   chan dropped
	dropAll chan struct{}
}

func (d *recordingDropper) Drop(ns, key string) { d.drops <- dropped{ns, key} }
func (d *recordingDropper) Clear()              { d.dropAll <- struct{}{} }

// track runs tr for the rest of the test and waits until it has
// subscribed.
func track(tb testing.TB, tr *rediscache.Tracking) (*recordingDropper, chan struct{}) {
	tb.Helper()
	d := &recordingDropper{drops: make(chan dropped, 1000), dropAll: make(chan struct{}, 100)}
	subscribed := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { tr.Run(ctx, d, func() { subscribed <- struct{}{} }) })
	tb.Cleanup(func() {
		cancel()
		wg.Wait()
		if err := tr.Close(); err != nil {
			tb.Errorf("close tracking: %v", err)
		}
	})
	waitFor(tb, subscribed, "subscription")
	waitFor(tb, d.dropAll, "Clear of the subscription")
	return d, subscribed
}

func newTracking(tb testing.TB, c *rediscache.Cache, reg prometheus.Registerer, namespaces ...string) *rediscache.Tracking {
	tb.Helper()
	tr, err := rediscache.NewTracking(c, namespaces, reg, nil)
	if err != nil {
		tb.Fatalf("NewTracking: %v", err)
	}
	return tr
}

// waitFor waits for one value on ch.
func waitFor[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		tb.Fatalf("no %s within 10s", what)
		var zero T
		return zero
	}
}

// nextDrop returns the next Drop, failing on a Clear meanwhile.
func (d *recordingDropper) nextDrop(tb testing.TB) dropped {
	tb.Helper()
	select {
	case x := <-d.drops:
		return x
	case <-d.dropAll:
		tb.Fatal("Clear where a Drop was expected")
	case <-time.After(10 * time.Second):
		tb.Fatal("no Drop within 10s")
	}
	return dropped{}
}

// TestTrackingReportsEveryChange changes keys from a client that is not the
// cache, and from the cache itself, and checks that each change of a key of
// a tracked namespace, in any generation, reaches Drop with the namespace
// and key, and that no other key does.
func TestTrackingReportsEveryChange(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	reg := prometheus.NewRegistry()
	tr := newTracking(t, f.cache, reg, "t", "u")
	if got, want := tr.Prefixes(), []string{f.prefix + "t:", f.prefix + "t@", f.prefix + "u:", f.prefix + "u@"}; !slices.Equal(got, want) {
		t.Fatalf("Prefixes() = %q, want %q", got, want)
	}
	d, _ := track(t, tr)
	ctx := testContext(t)
	untracked := &warmcache.Namespace{Name: "tt"}
	tracked := &warmcache.Namespace{Name: "t"}

	steps := []struct {
		name   string
		change func() error
		want   dropped
	}{
		{"SET by another client", func() error { return f.raw.Set(ctx, f.prefix+"t:1", "x", 0).Err() }, dropped{"t", "1"}},
		{"DEL by another client", func() error { return f.raw.Del(ctx, f.prefix+"t:1").Err() }, dropped{"t", "1"}},
		{"a key of a later generation", func() error { return f.raw.Set(ctx, f.prefix+"u@12:a:b@c", "x", 0).Err() }, dropped{"u", "a:b@c"}},
		{"the cache's own fill", func() error {
			return f.cache.FillMany(ctx, tracked, []warmcache.Fill{{Key: warmcache.Key{Text: "2"}, Entry: warmcache.Entry{Value: []byte(`{}`), Version: 1, Found: true}, Keep: time.Minute}})
		}, dropped{"t", "2"}},
		{"SET with an expiry", func() error { return f.raw.Set(ctx, f.prefix+"u:3", "x", time.Millisecond).Err() }, dropped{"u", "3"}},
	}
	for _, s := range steps {
		// A key of a namespace that is not tracked, whose name starts
		// like a tracked one's, changes first: were it reported, it
		// would come first.
		if err := f.raw.Set(ctx, f.cache.KeyOf(untracked, "1"), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := d.nextDrop(t); got != s.want {
			t.Errorf("%s: Drop%v, want Drop%v", s.name, got, s.want)
		}
	}
	// The key set last expires: reading it once it has expired deletes
	// it, if Redis's own expiry cycle has not yet.
	testproc.Eventually(t, 10*time.Second, "the key to expire", func() bool {
		return errors.Is(f.raw.Get(ctx, f.prefix+"u:3").Err(), redis.Nil)
	})
	if got := d.nextDrop(t); got != (dropped{"u", "3"}) {
		t.Errorf("expiry: Drop%v, want Drop{u 3}", got)
	}
	if got := promregtest.Value(t, reg, "warmcache_redis_tracking_keys_total"); got != float64(len(steps)+1) {
		t.Errorf("warmcache_redis_tracking_keys_total = %v, want %d", got, len(steps)+1)
	}
	if got := promregtest.Value(t, reg, "warmcache_redis_tracking_resyncs_total"); got != 1 {
		t.Errorf("warmcache_redis_tracking_resyncs_total = %v, want 1", got)
	}
}

// TestTrackingReconnectDropsAll kills the tracking connection and checks
// that the near cache is dropped, tracking comes back by itself, and changes
// are reported again.
func TestTrackingReconnectDropsAll(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	reg := prometheus.NewRegistry()
	tr := newTracking(t, f.cache, reg, "t")
	d, subscribed := track(t, tr)
	ctx := testContext(t)

	if err := f.raw.ClientKillByFilter(ctx, "ID", strconv.FormatInt(rediscache.TrackingClientID(tr), 10)).Err(); err != nil {
		t.Fatalf("CLIENT KILL: %v", err)
	}
	waitFor(t, d.dropAll, "Clear after the connection was killed")
	waitFor(t, subscribed, "subscription after the connection was killed")
	if err := f.raw.Set(ctx, f.prefix+"t:9", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case <-d.dropAll: // the resubscription's, and the loss's if it came late
			continue
		case got := <-d.drops:
			if got != (dropped{"t", "9"}) {
				t.Fatalf("after reconnecting: Drop%v, want Drop{t 9}", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no Drop within 10s of reconnecting")
		}
		break
	}
	if got := promregtest.Value(t, reg, "warmcache_redis_tracking_resyncs_total"); got < 2 {
		t.Errorf("warmcache_redis_tracking_resyncs_total = %v, want at least 2", got)
	}
	if got := promregtest.Value(t, reg, "warmcache_redis_tracking_connected"); got != 1 {
		t.Errorf("warmcache_redis_tracking_connected = %v, want 1", got)
	}
}

// TestTrackingFlushAndRestartDropAll runs a Redis of the test's own, since
// it flushes it: a FLUSHDB and a restart each drop the whole near cache, and
// changes are reported after both.
func TestTrackingFlushAndRestartDropAll(t *testing.T) {
	srv := testproc.StartRedis(t)
	reg := prometheus.NewRegistry()
	c, err := rediscache.New(rediscache.Options{Addrs: []string{srv.Addr}, DB: 3}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 3})
	t.Cleanup(func() { _ = raw.Close() })
	tr := newTracking(t, c, reg, "t")
	d, subscribed := track(t, tr)
	ctx := testContext(t)
	ns := &warmcache.Namespace{Name: "t"}
	changeAndWait := func(what, key string) {
		t.Helper()
		if err := raw.Set(ctx, c.KeyOf(ns, key), "x", 0).Err(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := d.nextDrop(t); got != (dropped{"t", key}) {
			t.Fatalf("%s: Drop%v, want Drop{t %s}", what, got, key)
		}
	}
	changeAndWait("before the flush", "1")

	if err := raw.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, d.dropAll, "Clear after FLUSHDB")
	if got := promregtest.Value(t, reg, "warmcache_redis_tracking_flushes_total"); got != 1 {
		t.Errorf("warmcache_redis_tracking_flushes_total = %v, want 1", got)
	}
	changeAndWait("after the flush", "2")

	srv.Stop(t)
	waitFor(t, d.dropAll, "Clear after Redis stopped")
	srv.Start(t)
	waitFor(t, subscribed, "subscription after Redis restarted")
	// The resubscription drops all; a change then reaches Drop.
	for {
		if err := raw.Set(ctx, c.KeyOf(ns, "3"), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-d.dropAll:
			continue
		case got := <-d.drops:
			if got != (dropped{"t", "3"}) {
				t.Fatalf("after the restart: Drop%v, want Drop{t 3}", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no Drop within 10s of the restart")
		}
		break
	}
}

func TestTrackingRefusesCluster(t *testing.T) {
	c, err := rediscache.New(rediscache.Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := rediscache.NewTracking(c, []string{"t"}, nil, nil); !errors.Is(err, rediscache.ErrTrackingUnsupported) {
		t.Errorf("NewTracking on a Cluster: %v, want ErrTrackingUnsupported", err)
	}
}
