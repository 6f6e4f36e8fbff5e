package warmcache_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/nearcache"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// ttlFixture is a service over the in-memory tiers and a near cache, all
// on one clock that the test moves, with a namespace whose rows expire.
type ttlFixture struct {
	clock *memtier.Clock
	hot   *memtier.Hot
	warm  *memtier.Warm
	near  *nearcache.Cache
	svc   *warmcache.Service
	reg   *prometheus.Registry
}

func newTTLFixture(t *testing.T) *ttlFixture {
	t.Helper()
	return newTTLFixtureWith(t, nil)
}

// newTTLFixtureWith is newTTLFixture whose service reads the warehouse
// through wrap, when not nil.
func newTTLFixtureWith(t *testing.T, wrap func(warmcache.Warm) warmcache.Warm) *ttlFixture {
	t.Helper()
	f := &ttlFixture{clock: memtier.NewClock(), warm: memtier.NewWarm(), reg: prometheus.NewRegistry()}
	f.hot = memtier.NewHot(f.clock.Now)
	f.warm.SetNow(f.clock.Now)
	near, err := nearcache.New(nearcache.Options{Now: f.clock.Now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns := widgets()
	ns.ExpiresColumn = "expires_at"
	ns.TTL, ns.NearTTL, ns.MaxStale = time.Hour, time.Hour, time.Hour
	plain := widgets()
	plain.Name = "plain"
	var warm warmcache.Warm = f.warm
	if wrap != nil {
		warm = wrap(warm)
	}
	f.near = near
	f.svc, err = warmcache.NewService(f.hot, warm, []*warmcache.Namespace{ns, plain}, f.reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{Near: near, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTTLExpiresOnEveryTier: an item written with a TTL is answered by
// the near cache, then by the hot tier, until its expiry, and from its
// expiry on reads as absent, though the near cache, the hot tier (with an
// hour's freshness and MaxStale) and the warehouse's row still hold it.
func TestTTLExpiresOnEveryTier(t *testing.T) {
	f := newTTLFixture(t)
	ctx := context.Background()
	items, err := f.svc.Transact(ctx, "widgets", []warmcache.Op{{Key: "1", Value: []byte(`{"a":1}`), TTL: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	want := f.clock.Now().Add(10 * time.Second)
	if got := items[0].Entry.ExpiresAt; !got.Equal(want) {
		t.Fatalf("the write's expiry = %v, want %v", got, want)
	}
	if keep := f.hot.Keep("widgets", "1"); keep <= 0 || keep > 10*time.Second {
		t.Errorf("the hot tier keeps the item %v, want at most its TTL", keep)
	}
	it, err := f.svc.Get(ctx, "widgets", "1")
	if err != nil || it.Source != warmcache.SourceNear || !it.Entry.ExpiresAt.Equal(want) {
		t.Fatalf("Get = %+v, %v; want a near-cache hit expiring at %v", it, err, want)
	}
	f.clock.Advance(10*time.Second - time.Millisecond)
	if it, err := f.svc.Get(ctx, "widgets", "1"); err != nil || !it.Entry.Found {
		t.Fatalf("Get a millisecond before the expiry = %+v, %v; want the item", it, err)
	}
	f.clock.Advance(time.Millisecond)
	if it, err := f.svc.Get(ctx, "widgets", "1"); !errors.Is(err, warmcache.ErrNotFound) || it.Entry.Found {
		t.Fatalf("Get at the expiry = %+v, %v; want ErrNotFound", it, err)
	}
	items2, err := f.svc.MGet(ctx, "widgets", []string{"1"})
	if err != nil || items2[0].Entry.Found {
		t.Fatalf("MGet at the expiry = %+v, %v; want the key absent", items2, err)
	}
	if _, err := f.svc.GetLatest(ctx, "widgets", "1"); !errors.Is(err, warmcache.ErrNotFound) {
		t.Fatalf("GetLatest at the expiry: %v, want ErrNotFound", err)
	}
	// A write over the expired row starts afresh.
	if _, err := f.svc.Transact(ctx, "widgets", []warmcache.Op{{Key: "1", Value: []byte(`{"a":2}`), IfAbsent: true}}); err != nil {
		t.Fatalf("a first write over the expired row: %v", err)
	}
	if it, err := f.svc.Get(ctx, "widgets", "1"); err != nil || string(it.Entry.Value) != `{"a":2}` || !it.Entry.ExpiresAt.IsZero() {
		t.Fatalf("Get after the new write = %+v, %v; want the new value without an expiry", it, err)
	}
}

// TestTTLNearHitPastExpiryIsJudgedByTheCore: the near cache keeps an
// entry for the lifetime it is given and carries its expiry; the core does
// not serve it, nor report it held, from that expiry on.
func TestTTLNearHitPastExpiryIsJudgedByTheCore(t *testing.T) {
	f := newTTLFixture(t)
	ctx := context.Background()
	ns, err := f.svc.Namespace("widgets")
	if err != nil {
		t.Fatal(err)
	}
	key := warmcache.Key{Text: "3", Int: 3}
	e := warmcache.Entry{Value: []byte(`{"a":3}`), Version: 1, Found: true, ExpiresAt: f.clock.Now().Add(-time.Millisecond)}
	f.near.Set(ns, key, e, time.Hour)
	if got, hit := f.near.Get(ns, key); !hit || !got.ExpiresAt.Equal(e.ExpiresAt) {
		t.Fatalf("the near cache holds %+v, hit %v; want the entry as set", got, hit)
	}
	if it, err := f.svc.Get(ctx, "widgets", "3"); !errors.Is(err, warmcache.ErrNotFound) || it.Source == warmcache.SourceNear {
		t.Errorf("Get of a near entry past its expiry = %+v, %v; want ErrNotFound, not from the near cache", it, err)
	}
	if a, err := f.svc.Audit(ctx, "widgets", "3"); err != nil || a.NearHit {
		t.Errorf("Audit = %+v, %v; want no near hit past the expiry", a, err)
	}
}

// TestTTLRefused: a negative TTL, one past MaxTTL, and any TTL in a
// namespace without an expiry column are invalid values.
func TestTTLRefused(t *testing.T) {
	f := newTTLFixture(t)
	for _, c := range []struct {
		ns  string
		ttl time.Duration
	}{{"widgets", -time.Second}, {"widgets", warmcache.MaxTTL + time.Second}, {"plain", time.Second}} {
		_, err := f.svc.Transact(context.Background(), c.ns, []warmcache.Op{{Key: "1", Value: []byte(`1`), TTL: c.ttl}})
		if !errors.Is(err, warmcache.ErrInvalidValue) {
			t.Errorf("TTL %v in %s: %v, want ErrInvalidValue", c.ttl, c.ns, err)
		}
	}
}

// TestSweep: Sweep deletes the expired rows in batches, leaves the live
// ones, counts them, and the caches record each key as deleted.
func TestSweep(t *testing.T) {
	f := newTTLFixture(t)
	ctx := context.Background()
	for i := range 1200 {
		ttl := time.Second
		if i%4 == 0 {
			ttl = time.Hour
		}
		if _, err := f.svc.Transact(ctx, "widgets", []warmcache.Op{{Key: strconv.Itoa(i + 1), Value: []byte(`1`), TTL: ttl}}); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(2 * time.Second)
	n, err := f.svc.Sweep(ctx, "widgets")
	if err != nil || n != 900 {
		t.Fatalf("Sweep = %d, %v; want the 900 expired rows", n, err)
	}
	if f.warm.Len() != 300 {
		t.Errorf("the warehouse holds %d rows, want the 300 live ones", f.warm.Len())
	}
	if got := promregtest.Value(t, f.reg, "warmcache_expired_rows_deleted_total"); got != 900 {
		t.Errorf("warmcache_expired_rows_deleted_total = %v, want 900", got)
	}
	entries, hits, err := f.hot.GetMany(ctx, mustNamespace(t, f.svc, "widgets"), []warmcache.Key{{Text: "2", Int: 2}})
	if err != nil || !hits[0] || entries[0].Found || entries[0].Version == 0 {
		t.Errorf("the hot tier holds %+v (hit %v, %v) for a swept key, want the delete's absent entry", entries, hits, err)
	}
	if n, err := f.svc.Sweep(ctx, "widgets"); err != nil || n != 0 {
		t.Errorf("a second Sweep = %d, %v; want nothing left", n, err)
	}
}

func mustNamespace(t *testing.T, svc *warmcache.Service, name string) *warmcache.Namespace {
	t.Helper()
	ns, err := svc.Namespace(name)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func mustKey(t *testing.T, ns *warmcache.Namespace, raw string) warmcache.Key {
	t.Helper()
	k, err := ns.ParseKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestReadAcrossExpiry: a warehouse read that began before an item's
// expiry and ends after it, with the row, does not return the value, nor
// leave a copy that a later read returns.
func TestReadAcrossExpiry(t *testing.T) {
	answered, release := make(chan struct{}), make(chan struct{})
	var gate sync.Once
	f := newTTLFixtureWith(t, func(w warmcache.Warm) warmcache.Warm {
		return &slowWarm{Warm: w, after: func() {
			gate.Do(func() { close(answered); <-release })
		}}
	})
	ctx := context.Background()
	ns := mustNamespace(t, f.svc, "widgets")
	k := warmcache.Key{Text: "7", Int: 7}
	if _, err := f.warm.Write(ctx, ns, []warmcache.Write{{Key: k, Value: []byte(`{"v":7}`), TTL: time.Second}}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		item warmcache.Item
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		it, err := f.svc.Get(ctx, "widgets", "7")
		done <- answer{it, err}
	}()
	<-answered                   // the warehouse answered the live row
	f.clock.Advance(time.Second) // and it expires before the read ends
	close(release)
	a := <-done
	if !errors.Is(a.err, warmcache.ErrNotFound) || a.item.Entry.Found {
		t.Fatalf("a read across the expiry = %+v, %v; want ErrNotFound", a.item, a.err)
	}
	for i := range 3 {
		if it, err := f.svc.Get(ctx, "widgets", "7"); !errors.Is(err, warmcache.ErrNotFound) {
			t.Fatalf("read %d after the expiry = %+v (%s), %v; want ErrNotFound", i, it, it.Source, err)
		}
	}
}

// slowWarm is a warehouse that calls after once a lookup has read its
// rows, before it answers.
type slowWarm struct {
	warmcache.Warm
	after func()
}

func (w *slowWarm) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, error) {
	es, err := w.Warm.LookupMany(ctx, ns, keys)
	if err == nil && len(es) > 0 && es[0].Found {
		w.after()
	}
	return es, err
}
