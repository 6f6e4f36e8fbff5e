package nearcache

import (
	"fmt"
	"math"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/promreg"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// coarseTick is how often the near cache's clock reads the system clock,
// and so how long an entry may outlive its TTL. Each tick wakes a
// goroutine, idle or not: at 1 ms an idle instance spent about 25 ms of
// CPU a second on it (docs/performance.md, "The fleet on Redis Cluster").
const coarseTick = 10 * time.Millisecond

var _ warmcache.Near = (*Cache)(nil)

// Options configure a Cache. The zero value of each field selects the default
// in its comment.
type Options struct {
	// MaxBytes bounds the weight of all entries: each weighs its namespace
	// name, key and value plus a fixed overhead for the bookkeeping. Zero
	// means 64 MiB.
	MaxBytes uint64
	// MarkTTL is how long an invalidation is remembered after the entry it
	// dropped, so that a read which began before the write cannot cache the
	// replaced version when it ends. It should exceed the longest read, that
	// is the service's hot-tier plus warehouse timeouts. Zero means 5s.
	MarkTTL time.Duration
	// Now is the clock. Nil means the system clock.
	Now func() time.Time
}

const (
	defaultMaxBytes = 64 << 20
	defaultMarkTTL  = 5 * time.Second
	// entryOverhead approximates what an entry costs beyond its bytes: the
	// cache's node, the hash-table slot, the item and the key's string
	// header. make bench-scale's near-cache curve measured 204 to 216 bytes
	// of live heap per entry beyond the value, its namespace and its key,
	// from 1,000 to 100,000 entries, so that the byte bound is the heap the
	// entries hold (it was 128: the heap then ran 32% over the bound with
	// values of 100 bytes).
	entryOverhead = 204
)

// mapKey is an entry's key: a namespace name and a canonical key text.
type mapKey struct {
	ns  string
	key string
}

// item is what the cache holds for a key: an entry, or a mark left by an
// invalidation that only refuses older versions and is never served.
type item struct {
	value   []byte
	version int64
	ttl     time.Duration
	found   bool
	mark    bool
	// expires is the row's expiry (a writer's TTL), zero for never. The
	// cache carries it; the core judges it, and gives no longer a ttl.
	expires time.Time
	// gone marks the drop of an absent entry: at its version, only another
	// absent entry is admitted, as a delete wins at its version.
	gone bool
}

// Cache is the in-process near cache (L1): a W-TinyLFU cache bounded by bytes
// whose entries live as long as Set is told. It implements warmcache.Near
// and is safe for concurrent use; no call blocks on I/O or returns an error.
//
// Entries are ordered by version: Set never replaces a newer version, and
// Invalidate leaves a mark at the written version for MarkTTL, so that a read
// which fetched the replaced version before the write cannot cache it after
// the invalidation. Drop, for a change reported without a version, leaves
// a mark at the version it dropped. Cached values are shared, not copied: callers must not modify a
// value after Set or after Get returned it.
type Cache struct {
	cache   *otter.Cache[mapKey, item]
	markTTL time.Duration

	evictions *prometheus.CounterVec
	refused   prometheus.Counter
	// invalidations counts Invalidate/InvalidateKey and Drop calls by
	// source and by whether they dropped an entry.
	versionedDropped, versionedNone prometheus.Counter
	trackingDropped, trackingNone   prometheus.Counter
}

// New returns an empty Cache and registers its metrics on reg (when reg is
// not nil). The error reports metrics that cannot be registered.
func New(opts Options, reg prometheus.Registerer) (*Cache, error) {
	if opts.MaxBytes == 0 {
		opts.MaxBytes = defaultMaxBytes
	}
	if opts.MarkTTL <= 0 {
		opts.MarkTTL = defaultMarkTTL
	}
	invalidations := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_near_cache_invalidations_total",
		Help: "Invalidations the near cache received, by source (versioned: a write, this instance's or another's over pub/sub; tracking: Redis reported the key changed) and result (dropped: an entry was removed; none: no older entry was cached).",
	}, []string{"source", "result"})
	c := &Cache{
		markTTL:          opts.MarkTTL,
		versionedDropped: invalidations.WithLabelValues("versioned", "dropped"),
		versionedNone:    invalidations.WithLabelValues("versioned", "none"),
		trackingDropped:  invalidations.WithLabelValues("tracking", "dropped"),
		trackingNone:     invalidations.WithLabelValues("tracking", "none"),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_near_cache_evictions_total",
			Help: "Near-cache entries removed by the cache itself, by reason: size (the byte bound) or expired (the lifetime it was stored for).",
		}, []string{"reason"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmcache_near_cache_refused_total",
			Help: "Near-cache stores refused because a newer version, or an invalidation at a newer version, was cached.",
		}),
	}
	cache, err := otter.New(c.otterOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("nearcache: %w", err)
	}
	c.cache = cache
	if err := c.register(reg, invalidations); err != nil {
		return nil, err
	}
	return c, nil
}

// otterOptions returns the options of the map under a Cache of opts:
// bounded by bytes, each entry expiring after the lifetime it was stored
// for, its evictions counted on c.
func (c *Cache) otterOptions(opts Options) *otter.Options[mapKey, item] {
	// The two series exist from the start, and an eviction counts without
	// looking its label up.
	sizeEvictions, expiredEvictions := c.evictions.WithLabelValues("size"), c.evictions.WithLabelValues("expired")
	oo := &otter.Options[mapKey, item]{
		MaximumWeight: opts.MaxBytes,
		Weigher:       weigh,
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[mapKey, item]) time.Duration {
			return e.Value.ttl
		}),
		OnAtomicDeletion: func(e otter.DeletionEvent[mapKey, item]) {
			switch e.Cause {
			case otter.CauseOverflow:
				sizeEvictions.Inc()
			case otter.CauseExpiration:
				expiredEvictions.Inc()
			}
		},
	}
	if opts.Now != nil {
		oo.Clock = clock{opts.Now}
	} else {
		// Reading the system clock on every Get costs a quarter of a hit;
		// a clock that ticks every coarseTick is as good for TTLs of a
		// second. Its goroutine ends when the cache is collected.
		oo.Clock = otter.NewCoarseClock(coarseTick)
	}
	return oo
}

// register registers c's metrics, invalidations among them, on reg, when
// reg is not nil.
func (c *Cache) register(reg prometheus.Registerer, invalidations *prometheus.CounterVec) error {
	if reg == nil {
		return nil
	}
	collectors := []prometheus.Collector{
		c.evictions, c.refused, invalidations,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warmcache_near_cache_bytes",
			Help: "Weight of the near cache's entries in bytes (values, keys and a fixed overhead each).",
		}, func() float64 { return float64(c.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warmcache_near_cache_entries",
			Help: "Entries in the near cache, including invalidation marks; an estimate.",
		}, func() float64 { return float64(c.cache.EstimatedSize()) }),
	}
	return promreg.Register(reg, "nearcache", collectors...)
}

// weigh is an entry's weight in bytes, saturated at the largest uint32.
func weigh(k mapKey, it item) uint32 {
	n := uint64(len(k.ns)) + uint64(len(k.key)) + uint64(len(it.value)) + entryOverhead
	return uint32(min(n, math.MaxUint32))
}

// Get returns the entry cached for key in ns, if one is cached and the
// lifetime it was stored for has not ended. The entry carries its row's
// expiry (Entry.ExpiresAt), which the core judges; its FreshUntil is zero.
func (c *Cache) Get(ns *warmcache.Namespace, key warmcache.Key) (warmcache.Entry, bool) {
	it, ok := c.cache.GetIfPresent(mapKey{ns.Name, key.Text})
	if !ok || it.mark {
		return warmcache.Entry{}, false
	}
	return warmcache.Entry{Value: it.value, Version: it.version, Found: it.found, ExpiresAt: it.expires}, true
}

// Set caches e for key in ns for ttl, as the core decides it (the near
// cache keeps what it is told for as long as it is told). It does nothing
// when ttl is not positive, and it refuses e when the cache holds a newer
// version, an absent entry at the same version, or an invalidation at a
// newer version; an absent e of version zero (a key never written) is
// cached only when nothing is.
func (c *Cache) Set(ns *warmcache.Namespace, key warmcache.Key, e warmcache.Entry, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	next := item{value: e.Value, version: e.Version, ttl: ttl, found: e.Found}
	if e.Found {
		next.expires = e.ExpiresAt
	}
	refused := false
	c.cache.Compute(mapKey{ns.Name, key.Text}, func(cur item, ok bool) (item, otter.ComputeOp) {
		if ok && !newer(next, cur) {
			refused = true
			return cur, otter.CancelOp
		}
		return next, otter.WriteOp
	})
	if refused {
		c.refused.Inc()
	}
}

// newer reports whether next may replace cur.
func newer(next, cur item) bool {
	switch {
	case cur.mark && cur.gone && next.version == cur.version:
		return !next.found
	case cur.mark:
		return next.version >= cur.version
	case !next.found && next.version == 0:
		return false
	case next.version != cur.version:
		return next.version > cur.version
	default:
		// At the same version, an absent entry (a delete) wins.
		return next.found == cur.found || !next.found
	}
}

// Invalidate drops the entry for key in ns unless it is at least version, and
// leaves a mark that refuses older versions for the cache's MarkTTL.
func (c *Cache) Invalidate(ns *warmcache.Namespace, key warmcache.Key, version int64) {
	c.InvalidateKey(ns.Name, key.Text, version)
}

// InvalidateKey is Invalidate for a namespace and key given by name and
// canonical text, as they arrive from other instances.
func (c *Cache) InvalidateKey(namespace, key string, version int64) {
	dropped := false
	c.cache.Compute(mapKey{namespace, key}, func(cur item, ok bool) (item, otter.ComputeOp) {
		if ok && cur.version >= version {
			return cur, otter.CancelOp
		}
		dropped = ok && !cur.mark
		return item{version: version, ttl: c.markTTL, mark: true}, otter.WriteOp
	})
	if dropped {
		c.versionedDropped.Inc()
	} else {
		c.versionedNone.Inc()
	}
}

// Drop drops the entry for key in namespace whatever its version, for a
// change that Redis reported without one (key tracking: a write by any
// client, an expiry, an eviction). Like an invalidation, it leaves a mark
// at the dropped entry's version for MarkTTL, so that a store of an older
// version (a slower write, or a read that fetched the value before the
// entry was cached) cannot take the emptied place; an invalidation's mark
// stays as it is. A key with nothing cached is left alone: a read that
// fetched a value before an unversioned change and stores it after the
// report lives at most its NearTTL.
func (c *Cache) Drop(namespace, key string) {
	if c.mark(mapKey{namespace, key}) {
		c.trackingDropped.Inc()
	} else {
		c.trackingNone.Inc()
	}
}

// mark replaces the entry of k, if one is cached, with a mark at its
// version for MarkTTL, and reports whether it did; a mark stays as it is.
func (c *Cache) mark(k mapKey) bool {
	dropped := false
	c.cache.Compute(k, func(cur item, ok bool) (item, otter.ComputeOp) {
		if !ok || cur.mark {
			return cur, otter.CancelOp
		}
		dropped = true
		return item{version: cur.version, ttl: c.markTTL, mark: true, gone: !cur.found}, otter.WriteOp
	})
	return dropped
}

// Clear drops every entry, as Drop drops one: it is how the cache recovers
// after invalidations may have been missed (key tracking lost or
// resubscribed, Redis flushed). Each entry leaves a mark at its version,
// and the marks already there stay, so that a read which fetched a version
// before the Clear cannot store it once the entry that would refuse it is
// gone; newer versions are admitted at once.
func (c *Cache) Clear() {
	for k := range c.cache.Keys() {
		c.mark(k)
	}
}

// Bytes returns the weight of the cached entries and marks. It may exceed
// MaxBytes for a moment while evictions catch up with stores.
func (c *Cache) Bytes() uint64 {
	return c.cache.WeightedSize()
}

// CleanUp performs pending maintenance now: evictions over the byte bound and
// removal of expired entries. The cache does this by itself as it is used.
func (c *Cache) CleanUp() {
	c.cache.CleanUp()
}

// clock adapts a time function to otter's clock. It never ticks, so expired
// entries are removed as the cache is used rather than periodically.
type clock struct{ now func() time.Time }

func (c clock) NowNano() int64                      { return c.now().UnixNano() }
func (c clock) Tick(time.Duration) <-chan time.Time { return nil }
