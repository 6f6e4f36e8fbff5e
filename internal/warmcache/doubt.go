package warmcache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The caches of an instance answer a key only while they are known to hold
// what the warehouse holds as far as this instance's writes go. A key is in
// doubt while a write of it through this instance is under way, and from
// the moment an update of its cached entry (a write's, a change's, a read's
// fill) may not have landed, until a repair lands: an update at the version
// in doubt or above (the write's retry, change capture, the poller), or a
// fill from a warehouse read that began after the doubt arose. Reads of a
// key in doubt go to the warehouse, past the near cache and the hot tier.
// Being in process memory, the doubts outlive Redis's restarts and
// reconnections.

// maxDoubts bounds the keys in doubt. When a key must be doubted beyond
// it, its namespace bypasses the caches (see doubts.bypass).
const maxDoubts = 1 << 16

// doubt is one key in doubt.
type doubt struct {
	// writes counts the writes of the key under way through this
	// instance.
	writes int
	// version, when not zero, is the version that an update of the key's
	// hot-tier entry must reach to clear the doubt.
	version int64
	// since is the doubt sequence when version was last raised: a fill
	// from a warehouse read that began after it clears the doubt too.
	since uint64
}

// doubts is the set of keys in doubt, by flight key, and the namespaces
// that bypass the caches after the set overflowed. It also counts the
// writes that began and ended, in stripes by key, for shared reads (see
// writeStripes). A doubts is safe for concurrent use.
type doubts struct {
	mu     sync.Mutex
	keys   map[string]*doubt
	seq    atomic.Uint64
	bypass map[string]time.Time // namespace → until when
	// active is len(keys) + len(bypass), set under mu: reads skip the
	// lock while nothing is in doubt.
	active atomic.Int64
	// max bounds keys: maxDoubts.
	max int

	stripes writeStripes

	size      prometheus.GaugeFunc
	overflows *prometheus.CounterVec
	bypassed  *prometheus.CounterVec
}

func newDoubts() *doubts {
	d := &doubts{keys: map[string]*doubt{}, bypass: map[string]time.Time{}, max: maxDoubts}
	d.stripes.seed = maphash.MakeSeed()
	d.size = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warmcache_cache_doubtful_keys",
		Help: "Keys whose cached entries this instance does not trust, being written or whose cache update may not have landed; their reads go to the warehouse until a repair lands.",
	}, func() float64 {
		d.mu.Lock()
		defer d.mu.Unlock()
		return float64(len(d.keys))
	})
	d.overflows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_cache_doubt_overflows_total",
		Help: "Times a key could not be put in doubt because the set was full; each makes its namespace bypass the caches for the lifetime of its entries.",
	}, []string{"namespace"})
	d.bypassed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_cache_doubt_reads_total",
		Help: "Key reads answered from the warehouse past the caches, by namespace and reason (key: the key was in doubt, namespace: the namespace bypassed the caches after an overflow).",
	}, []string{"namespace", "reason"})
	return d
}

func (d *doubts) collectors() []prometheus.Collector {
	return []prometheus.Collector{d.size, d.overflows, d.bypassed}
}

// mark returns the doubt sequence, to take before a warehouse read whose
// fill may clear doubts (see settleRead).
func (d *doubts) mark() uint64 { return d.seq.Load() }

// entry returns the doubt of fk, making one if needed; nil when the set
// is full, after making ns bypass the caches. d.mu must be held.
func (d *doubts) entry(ns *Namespace, fk string, now time.Time) *doubt {
	if e := d.keys[fk]; e != nil {
		return e
	}
	if len(d.keys) >= d.max {
		d.overflows.WithLabelValues(ns.Name).Inc()
		// Every entry of ns cached until now may be one whose update was
		// lost: none is trusted until all have expired.
		until := now.Add(entryLife(ns))
		if until.After(d.bypass[ns.Name]) {
			d.bypass[ns.Name] = until
		}
		d.count()
		return nil
	}
	e := &doubt{}
	d.keys[fk] = e
	d.count()
	return e
}

// entryLife is the longest an entry of ns stays in a cache.
func entryLife(ns *Namespace) time.Duration {
	return time.Duration(float64(max(ns.TTL, ns.NegativeTTL))*(1+ns.TTLJitter)) + ns.MaxStale + ns.NearTTL + time.Second
}

// begin records that writes of keys begin, before the warehouse sees
// them.
func (d *doubts) begin(ns *Namespace, keys []Key, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		fk := flightKey(ns, k)
		d.stripes.began(fk)
		if e := d.entry(ns, fk, now); e != nil {
			e.writes++
		}
	}
}

// writing reports whether a write of key of ns may be under way: one of
// its stripe is.
func (d *doubts) writing(ns *Namespace, key Key) bool {
	_, quiet := d.stripes.quiet(flightKey(ns, key))
	return !quiet
}

// end records that writes of keys ended, after their caches were updated
// or their keys put in doubt.
func (d *doubts) end(ns *Namespace, keys []Key) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		fk := flightKey(ns, k)
		d.stripes.ended(fk)
		if e := d.keys[fk]; e != nil {
			e.writes = max(e.writes-1, 0)
			d.drop(fk, e)
		}
	}
}

// raise puts the fills' keys in doubt: their update may not have landed,
// or may have landed where a newer one was lost. A fill's doubt is at its
// version, or above it when above is true (the restart rule, see stamp).
func (d *doubts) raise(ns *Namespace, fills []Fill, above bool, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	seq := d.seq.Add(1)
	for _, f := range fills {
		e := d.entry(ns, flightKey(ns, f.Key), now)
		if e == nil {
			continue
		}
		v := max(f.Entry.Version, 1)
		if above {
			v++
		}
		e.version, e.since = max(e.version, v), seq
	}
}

// unknownVersion is the version a write of unknown outcome is in doubt
// at: above any a row can have, so that no update clears it, only a fill
// from a warehouse read that began after it (see settle).
const unknownVersion = 1 << 62

// unknown puts keys in doubt after a write of them whose outcome is
// unknown: it may have committed at a version this instance never learnt.
func (d *doubts) unknown(ns *Namespace, keys []Key, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	seq := d.seq.Add(1)
	for _, k := range keys {
		if e := d.entry(ns, flightKey(ns, k), now); e != nil {
			e.version, e.since = unknownVersion, seq
		}
	}
}

// settle records that the fills' updates landed: a doubt at their version
// or below is cleared; so is any doubt older than readMark, the doubt
// sequence taken before the warehouse read that the fills come from (zero
// for the updates of writes and changes).
func (d *doubts) settle(ns *Namespace, fills []Fill, readMark uint64) {
	if d.active.Load() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.keys) == 0 {
		return
	}
	for _, f := range fills {
		fk := flightKey(ns, f.Key)
		e := d.keys[fk]
		if e == nil || e.version == 0 {
			continue
		}
		// An absent entry at version zero is stored only where nothing is
		// cached: its landing proves nothing.
		proves := f.Entry.Found || f.Entry.Version > 0
		if f.Entry.Version >= e.version || (proves && readMark > 0 && e.since < readMark) {
			e.version, e.since = 0, 0
		}
		d.drop(fk, e)
	}
}

// drop forgets e once nothing keeps it in doubt. d.mu must be held.
func (d *doubts) drop(fk string, e *doubt) {
	if e.writes == 0 && e.version == 0 {
		delete(d.keys, fk)
		d.count()
	}
}

// count sets active. d.mu must be held.
func (d *doubts) count() { d.active.Store(int64(len(d.keys) + len(d.bypass))) }

// version returns the version key is in doubt at, zero when none.
func (d *doubts) version(ns *Namespace, key Key) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.keys[flightKey(ns, key)]; e != nil {
		return e.version
	}
	return 0
}

// pending reports whether a hot-tier update at version still has a doubt
// to clear: the key is in doubt at a version no newer.
func (d *doubts) pending(ns *Namespace, key Key, version int64) bool {
	if d.active.Load() == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.keys[flightKey(ns, key)]
	return e != nil && e.version != 0 && e.version <= version
}

// check marks, in skip, the items whose key is in doubt, or all of them
// when their namespace bypasses the caches (bypass), and counts them; it
// reports whether any is marked.
func (d *doubts) check(ns *Namespace, items []Item, skip []bool, now time.Time) (doubted, bypass bool) {
	if d.active.Load() == 0 {
		return false, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if until, ok := d.bypass[ns.Name]; ok {
		if now.Before(until) {
			for i := range skip {
				skip[i] = true
			}
			d.bypassed.WithLabelValues(ns.Name, "namespace").Add(float64(len(items)))
			return len(items) > 0, true
		}
		delete(d.bypass, ns.Name)
		d.count()
	}
	if len(d.keys) == 0 {
		return false, false
	}
	n := 0
	for i := range items {
		if d.keys[flightKey(ns, items[i].Key)] != nil {
			skip[i] = true
			n++
		}
	}
	if n > 0 {
		d.bypassed.WithLabelValues(ns.Name, "key").Add(float64(n))
	}
	return n > 0, false
}

// has reports whether key is in doubt or its namespace bypasses the caches.
func (d *doubts) has(ns *Namespace, key Key, now time.Time) bool {
	if d.active.Load() == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if until, ok := d.bypass[ns.Name]; ok && now.Before(until) {
		return true
	}
	return d.keys[flightKey(ns, key)] != nil
}

// writeStripes count the writes through this instance that began and
// ended, in stripes by key: a warehouse read of a key that began while no
// write of its stripe was under way, and before which no write of it has
// begun since, read what a read beginning now would (as far as this
// instance's writes go), so a new miss may share it.
type writeStripes struct {
	seed   maphash.Seed
	begins [writeStripeCount]atomic.Uint64
	ends   [writeStripeCount]atomic.Uint64
}

const writeStripeCount = 1024

func (w *writeStripes) stripe(fk string) int {
	return int(maphash.String(w.seed, fk) % writeStripeCount)
}

func (w *writeStripes) began(fk string) { w.begins[w.stripe(fk)].Add(1) }
func (w *writeStripes) ended(fk string) { w.ends[w.stripe(fk)].Add(1) }

// quiet returns the writes begun in fk's stripe, and whether none was
// under way. Ends are read first, so a write between the two loads reads
// as under way.
func (w *writeStripes) quiet(fk string) (uint64, bool) {
	i := w.stripe(fk)
	ended := w.ends[i].Load()
	began := w.begins[i].Load()
	return began, began == ended
}

// since reports whether a write of fk's stripe began after quiet returned
// began.
func (w *writeStripes) since(fk string, began uint64) bool {
	return w.begins[w.stripe(fk)].Load() != began
}
