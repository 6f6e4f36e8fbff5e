package nearcache_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/nearcache"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

func newCache(tb testing.TB, opts nearcache.Options, reg prometheus.Registerer) *nearcache.Cache {
	tb.Helper()
	c, err := nearcache.New(opts, reg)
	if err != nil {
		tb.Fatalf("nearcache.New: %v", err)
	}
	tb.Cleanup(c.Clear)
	return c
}

func key(i int) warmcache.Key { return warmcache.Key{Text: strconv.Itoa(i), Int: int64(i)} }

func present(version int64, value string) warmcache.Entry {
	return warmcache.Entry{Value: []byte(value), Version: version, Found: true}
}

func TestByteBoundHoldsUnderFlood(t *testing.T) {
	const maxBytes = 1 << 20
	reg := prometheus.NewRegistry()
	c := newCache(t, nearcache.Options{MaxBytes: maxBytes}, reg)
	ns := &warmcache.Namespace{Name: "flood", NearTTL: time.Hour}
	value := make([]byte, 1000)
	const writers, perWriter = 4, 5000 // 20 MB offered to a 1 MiB cache
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				k := key(w*perWriter + i)
				c.Set(ns, k, present(1, string(value)), ns.NearTTL)
				c.Get(ns, k)
			}
		})
	}
	wg.Wait()
	c.CleanUp()

	if got := c.Bytes(); got > maxBytes {
		t.Errorf("Bytes() = %d after the flood, above the bound %d", got, maxBytes)
	}
	if got := c.Bytes(); got < maxBytes/2 {
		t.Errorf("Bytes() = %d after the flood, want the cache at least half full (%d)", got, maxBytes/2)
	}
	if got := promregtest.Value(t, reg, "warmcache_near_cache_bytes"); got != float64(c.Bytes()) {
		t.Errorf("warmcache_near_cache_bytes = %v, want %d", got, c.Bytes())
	}
	if n := promregtest.Value(t, reg, "warmcache_near_cache_evictions_total", "reason", "size"); n < float64(writers*perWriter)/2 {
		t.Errorf("size evictions = %v, want most of the %d entries stored", n, writers*perWriter)
	}
}

func TestEntriesExpireAfterNearTTL(t *testing.T) {
	clock := memtier.NewClockAt(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	c := newCache(t, nearcache.Options{Now: clock.Now}, reg)
	ns := &warmcache.Namespace{Name: "ttl", NearTTL: time.Second}
	off := &warmcache.Namespace{Name: "off"}

	c.Set(ns, key(1), present(1, `{"a":1}`), ns.NearTTL)
	// An entry the core gives a shorter life (its hot-tier freshness ends
	// first, see warmcache's nearLife) lives only that long.
	c.Set(ns, key(2), present(1, `{}`), 100*time.Millisecond)
	c.Set(off, key(1), present(1, `{}`), off.NearTTL)

	if _, ok := c.Get(off, key(1)); ok {
		t.Error("a namespace without NearTTL was cached")
	}
	clock.Advance(100*time.Millisecond + time.Nanosecond)
	if _, ok := c.Get(ns, key(2)); ok {
		t.Error("key 2 served after the lifetime it was stored for")
	}
	clock.Advance(900*time.Millisecond - 2*time.Nanosecond)
	if e, ok := c.Get(ns, key(1)); !ok || string(e.Value) != `{"a":1}` {
		t.Errorf("just before NearTTL: Get = %+v, %v; want the entry", e, ok)
	}
	clock.Advance(2 * time.Nanosecond)
	if _, ok := c.Get(ns, key(1)); ok {
		t.Error("key 1 served after NearTTL")
	}
	c.CleanUp()
	if n := promregtest.Value(t, reg, "warmcache_near_cache_evictions_total", "reason", "expired"); n < 1 {
		t.Errorf("expired evictions = %v, want at least 1", n)
	}
}

// TestNearTierContract holds the near cache to the near tier's version
// rules: Set, Invalidate and Drop.
func TestNearTierContract(t *testing.T) {
	tiertest.Near(t, func(t *testing.T, markTTL time.Duration) (warmcache.Near, tiertest.Clock) {
		clock := memtier.NewClockAt(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		return newCache(t, nearcache.Options{Now: clock.Now, MarkTTL: markTTL}, nil), clock
	})
}

func TestInvalidationsCountedBySource(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCache(t, nearcache.Options{}, reg)
	ns := &warmcache.Namespace{Name: "m", NearTTL: time.Minute}
	c.Set(ns, key(1), present(1, "1"), ns.NearTTL)
	c.Set(ns, key(2), present(1, "1"), ns.NearTTL)
	c.InvalidateKey("m", "1", 2) // drops key 1
	c.InvalidateKey("m", "9", 2) // nothing cached
	c.Drop("m", "2")             // drops key 2
	c.Drop("m", "2")             // nothing cached any more
	c.InvalidateKey("m", "7", 2) // a mark, which a drop keeps
	c.Drop("m", "7")
	for _, tc := range []struct {
		source, result string
		want           float64
	}{
		{"versioned", "dropped", 1}, {"versioned", "none", 2},
		{"tracking", "dropped", 1}, {"tracking", "none", 2},
	} {
		if got := promregtest.Value(t, reg, "warmcache_near_cache_invalidations_total", "source", tc.source, "result", tc.result); got != tc.want {
			t.Errorf("invalidations{source=%q,result=%q} = %v, want %v", tc.source, tc.result, got, tc.want)
		}
	}
}

// Clear drops every entry but keeps the versions it dropped, and the marks
// already there, as marks: a read that fetched an older version before the
// Clear cannot store it after, and a newer version is admitted at once.
func TestClearDropsEntriesKeepsMarks(t *testing.T) {
	c := newCache(t, nearcache.Options{}, nil)
	ns := &warmcache.Namespace{Name: "c", NearTTL: time.Minute}
	c.Set(ns, key(1), present(4, "4"), ns.NearTTL)
	c.InvalidateKey("c", "2", 5)
	c.Clear()
	if _, ok := c.Get(ns, key(1)); ok {
		t.Error("entry served after Clear")
	}
	c.Set(ns, key(1), present(3, "3"), ns.NearTTL)
	if e, ok := c.Get(ns, key(1)); ok {
		t.Errorf("an older version %d stored after Clear dropped version 4", e.Version)
	}
	c.Set(ns, key(2), present(1, "1"), ns.NearTTL)
	if e, ok := c.Get(ns, key(2)); ok {
		t.Errorf("version %d stored under an invalidation at 5 that Clear should keep", e.Version)
	}
	c.Set(ns, key(1), present(6, "6"), ns.NearTTL)
	if e, ok := c.Get(ns, key(1)); !ok || e.Version != 6 {
		t.Errorf("a newer version after Clear: got %v, %v; want version 6", e, ok)
	}
}

func TestHotSetSurvivesScan(t *testing.T) {
	// Room for about 1,000 entries of 900 bytes. The hot set is 200 keys,
	// and a one-pass scan offers 20,000 cold keys while the hot set stays
	// in use: one hot read every 10 cold keys, so each hot key is read
	// again only after 2,000 cold keys, twice what the cache holds. An LRU
	// cache would lose every hot key; frequency-aware admission keeps them.
	const (
		maxBytes = 1000 * 1024
		hot      = 200
		cold     = 20_000
	)
	c := newCache(t, nearcache.Options{MaxBytes: maxBytes}, nil)
	ns := &warmcache.Namespace{Name: "scan", NearTTL: time.Hour}
	value := string(make([]byte, 900))
	read := func(k warmcache.Key) {
		if _, ok := c.Get(ns, k); !ok {
			c.Set(ns, k, present(1, value), ns.NearTTL)
		}
	}
	for range 20 {
		for i := range hot {
			read(key(i))
		}
	}
	for i := range cold {
		read(key(hot + i))
		if i%10 == 0 {
			read(key(i / 10 % hot))
		}
	}
	c.CleanUp()
	survived, scanned := 0, 0
	for i := range hot {
		if _, ok := c.Get(ns, key(i)); ok {
			survived++
		}
	}
	for i := range cold {
		if _, ok := c.Get(ns, key(hot+i)); ok {
			scanned++
		}
	}
	if survived < hot*9/10 {
		t.Errorf("%d of %d hot keys survived a scan of %d cold keys, want at least 90%%", survived, hot, cold)
	}
	if scanned == 0 {
		t.Error("no scanned key is cached: the cache admitted nothing")
	}
}

func TestMetricsRegisterOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	newCache(t, nearcache.Options{}, reg)
	if _, err := nearcache.New(nearcache.Options{}, reg); err == nil {
		t.Fatal("a second cache on the same registry registered its metrics")
	}
	if _, err := nearcache.New(nearcache.Options{}, prometheus.NewRegistry()); err != nil {
		t.Fatalf("a cache on a fresh registry after a failed one: %v", err)
	}
}

// BenchmarkDrop measures what one key reported by Redis's key tracking
// costs the near cache: a drop of a cached entry (run it with
// -benchtime 65536x, one pass over the keys), and of a key it does not
// hold.
func BenchmarkDrop(b *testing.B) {
	ns := &warmcache.Namespace{Name: "b", NearTTL: time.Minute}
	const keys = 1 << 16
	texts := make([]string, keys)
	for i := range texts {
		texts[i] = strconv.Itoa(i)
	}
	b.Run("cached", func(b *testing.B) {
		// Past the first pass over the keys, a drop finds nothing.
		c := newCache(b, nearcache.Options{MaxBytes: 64 << 20}, nil)
		for k := range keys {
			c.Set(ns, key(k), present(1, "v"), ns.NearTTL)
		}
		for i := 0; b.Loop(); i++ {
			c.Drop(ns.Name, texts[i%keys])
		}
	})
	b.Run("absent", func(b *testing.B) {
		c := newCache(b, nearcache.Options{MaxBytes: 64 << 20}, nil)
		for i := 0; b.Loop(); i++ {
			c.Drop(ns.Name, texts[i%keys])
		}
	})
}
