package warmcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Source says which tier answered a read. Its text is the X-Cache header.
type Source string

// The sources of a read.
const (
	SourceNear  Source = "hit-l1" // the in-process near cache held the entry
	SourceHot   Source = "hit"    // the hot tier held the entry
	SourceWarm  Source = "miss"   // the warehouse answered and the hot tier was filled
	SourceStale Source = "stale"  // the hot tier held an expired entry, served within MaxStale
)

// Item is the answer for one key.
type Item struct {
	Key    Key
	Entry  Entry
	Source Source
}

// Options bound the service's work. The zero value of each field selects the
// default in its comment.
type Options struct {
	// HotTimeout bounds one hot-tier call. Zero means 50ms.
	HotTimeout time.Duration
	// WarmTimeout bounds one warehouse call. Zero means 2s.
	WarmTimeout time.Duration
	// MaxWarmInflight bounds concurrent warehouse reads; a read that cannot
	// start within WarmTimeout fails with ErrOverloaded. Zero means 32.
	MaxWarmInflight int
	// MaxBatchKeys bounds the keys of one MGet. Zero means 1000.
	MaxBatchKeys int
	// MaxValueBytes bounds a stored value. Zero means 1 MiB.
	MaxValueBytes int
	// MaxValueDepth bounds the nesting of a stored value. Zero means 64.
	MaxValueDepth int
	// BreakerThreshold is the number of consecutive warehouse failures that
	// open the circuit breaker. Zero means 5.
	BreakerThreshold int
	// BreakerCooldown is how long an open breaker refuses warehouse calls
	// before it lets one through; it doubles while that call fails, up to
	// 30 times its first value. Zero means 1s.
	BreakerCooldown time.Duration
	// MaxRefreshes bounds concurrent background revalidations of stale
	// entries; a stale entry met while all are busy is served and left for
	// a later request to refresh. Zero means 8.
	MaxRefreshes int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Near is the in-process near cache, used for namespaces whose NearTTL
	// is set. Nil means none.
	Near Near
	// Invalidations carries writes to other instances' near caches. Nil
	// means this instance is alone.
	Invalidations Invalidations
	// MaxBatchFold bounds how many concurrent single-key reads are folded
	// into one Redis pipeline or one warehouse `= ANY($1)` query. Zero means
	// 64; one turns folding off, so that every read makes its own round trip.
	MaxBatchFold int
	// WarmLanes bounds the folded warehouse reads a namespace runs at once;
	// reads that arrive while all lanes are busy wait and go together in the
	// next query. Keep it near the warehouse pool's size. Zero means 4.
	WarmLanes int
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.HotTimeout <= 0 {
		o.HotTimeout = 50 * time.Millisecond
	}
	if o.WarmTimeout <= 0 {
		o.WarmTimeout = 2 * time.Second
	}
	def(&o.MaxWarmInflight, 32)
	def(&o.MaxBatchKeys, 1000)
	def(&o.MaxValueBytes, 1<<20)
	def(&o.MaxValueDepth, 64)
	def(&o.BreakerThreshold, 5)
	def(&o.MaxRefreshes, 8)
	def(&o.MaxBatchFold, 64)
	def(&o.WarmLanes, 4)
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Service answers reads from the hot tier and falls through to the warehouse
// on a miss; it writes to the warehouse first and then updates the hot tier.
// A Service is safe for concurrent use.
type Service struct {
	hot        Hot
	warm       Warm
	namespaces map[string]*Namespace
	opts       Options
	log        *slog.Logger
	flights    flightGroup
	warmSlots  chan struct{}
	breaker    *breaker
	refreshing sync.Map // key -> struct{}: revalidations under way
	refreshes  chan struct{}
	batches    map[string]*nsBatchers

	lookups    *prometheus.CounterVec
	hotWrites  *prometheus.CounterVec
	flightJoin *prometheus.CounterVec
	stale      *prometheus.CounterVec
	batchKeys  *prometheus.HistogramVec
}

// hotResult is one key's answer from the hot tier.
type hotResult struct {
	entry Entry
	hit   bool
}

// nsBatchers fold one namespace's concurrent reads.
type nsBatchers struct {
	hot  *batcher[struct{}, hotResult]
	warm *batcher[struct{}, Entry]
	fill *batcher[Entry, struct{}]
}

// NewService returns a Service over the given tiers and namespaces. It
// registers its metrics with reg and fails if a namespace name repeats.
func NewService(hot Hot, warm Warm, namespaces []*Namespace, reg prometheus.Registerer, log *slog.Logger, opts Options) (*Service, error) {
	s := &Service{
		hot:        hot,
		warm:       warm,
		namespaces: make(map[string]*Namespace, len(namespaces)),
		opts:       opts.withDefaults(),
		log:        log,
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_lookups_total",
			Help: "Key lookups by namespace, tier (near, redis, sql) and result (hit, negative, miss, error).",
		}, []string{"namespace", "tier", "result"}),
		hotWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_cache_fills_total",
			Help: "Hot-tier updates by namespace, reason (read, write) and result (ok, error).",
		}, []string{"namespace", "reason", "result"}),
		flightJoin: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_fill_coalesced_total",
			Help: "Misses that joined a warehouse read already in flight for the same key.",
		}, []string{"namespace"}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_stale_served_total",
			Help: "Expired entries served within MaxStale, by reason: revalidate (a refresh runs) or error (the warehouse is failing).",
		}, []string{"namespace", "reason"}),
	}
	s.batchKeys = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "warmcache_batch_keys",
		Help:    "Keys per folded read, by tier (redis, sql).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	}, []string{"tier"})
	s.warmSlots = make(chan struct{}, s.opts.MaxWarmInflight)
	s.refreshes = make(chan struct{}, s.opts.MaxRefreshes)
	s.breaker = &breaker{threshold: s.opts.BreakerThreshold, cooldown: s.opts.BreakerCooldown,
		maxCooldown: 30 * s.opts.BreakerCooldown, now: s.opts.Now}
	breakerOpen := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warmcache_warehouse_breaker_open",
		Help: "1 while the warehouse circuit breaker refuses calls, else 0.",
	}, func() float64 {
		if s.breaker.open() {
			return 1
		}
		return 0
	})
	for _, ns := range namespaces {
		if _, dup := s.namespaces[ns.Name]; dup {
			return nil, fmt.Errorf("warmcache: namespace %q declared twice", ns.Name)
		}
		s.namespaces[ns.Name] = ns
	}
	s.batches = make(map[string]*nsBatchers, len(namespaces))
	for _, ns := range namespaces {
		s.batches[ns.Name] = s.newBatchers(ns)
	}
	for _, c := range []prometheus.Collector{s.lookups, s.hotWrites, s.flightJoin, s.stale, breakerOpen, s.batchKeys} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("warmcache: register metrics: %w", err)
		}
	}
	return s, nil
}

// Namespace returns the namespace called name, or an error that wraps
// ErrUnknownNamespace.
func (s *Service) Namespace(name string) (*Namespace, error) {
	ns, ok := s.namespaces[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNamespace, truncate(name))
	}
	return ns, nil
}

func (s *Service) key(namespace, rawKey string) (*Namespace, Key, error) {
	ns, err := s.Namespace(namespace)
	if err != nil {
		return nil, Key{}, err
	}
	k, err := ns.ParseKey(rawKey)
	return ns, k, err
}

// Get reads one key. An absent key returns an Item with Found false and an
// error that wraps ErrNotFound. Other errors wrap ErrUnknownNamespace,
// ErrInvalidKey, ErrUnavailable or ErrOverloaded.
//
// An entry past its freshness but within the namespace's MaxStale is served
// at once, marked SourceStale, while one background read revalidates it; so
// it is also served while the warehouse is down.
func (s *Service) Get(ctx context.Context, namespace, rawKey string) (Item, error) {
	ns, key, err := s.key(namespace, rawKey)
	if err != nil {
		return Item{}, err
	}
	near := s.near(ns)
	if near != nil {
		if e, ok := near.Get(ns, key); ok {
			s.lookups.WithLabelValues(ns.Name, "near", nearResult(e)).Inc()
			return s.answer(ns, Item{Key: key, Entry: e, Source: SourceNear})
		}
		s.lookups.WithLabelValues(ns.Name, "near", "miss").Inc()
	}
	item := Item{Key: key, Source: SourceHot}
	e, hit, hotErr := s.hotGet(ctx, ns, key)
	if hit && s.expired(e) {
		if s.servableStale(ns, e) {
			s.serveStale(ns, key, e)
			item.Entry, item.Source = e, SourceStale
			return item, nil
		}
		hit = false
	}
	if !hit {
		item.Source = SourceWarm
		var shared bool
		e, shared, err = s.flights.do(ctx, flightKey(ns, key), func(ctx context.Context) (Entry, error) {
			return s.load(ctx, ns, key, hotErr == nil, Entry{})
		})
		if shared {
			s.flightJoin.WithLabelValues(ns.Name).Inc()
		}
		if err != nil {
			return Item{}, err
		}
	}
	item.Entry = e
	if near != nil {
		near.Set(ns, key, e)
	}
	return s.answer(ns, item)
}

// answer returns item, with ErrNotFound when its entry is absent.
func (s *Service) answer(ns *Namespace, item Item) (Item, error) {
	if !item.Entry.Found {
		return item, fmt.Errorf("%w: key %q in namespace %q", ErrNotFound, truncate(item.Key.Text), ns.Name)
	}
	return item, nil
}

// near returns the near cache if ns uses one.
func (s *Service) near(ns *Namespace) Near {
	if s.opts.Near == nil || ns.NearTTL <= 0 {
		return nil
	}
	return s.opts.Near
}

// written updates the caches after a committed write: the hot tier, this
// instance's near cache, and the other instances' near caches.
func (s *Service) written(ctx context.Context, ns *Namespace, key Key, e Entry) {
	s.fill(ctx, ns, "write", []Key{key}, []Entry{e})
	if near := s.near(ns); near != nil {
		near.Invalidate(ns, key, e.Version)
		if e.Found {
			near.Set(ns, key, e)
		}
	}
	if s.opts.Invalidations != nil && ns.NearTTL > 0 {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.HotTimeout)
		defer cancel()
		if err := s.opts.Invalidations.Publish(pctx, ns, key, e.Version); err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "near-cache invalidation not published",
				slog.String("namespace", ns.Name), slog.Any("err", err))
		}
	}
}

func flightKey(ns *Namespace, key Key) string { return ns.Name + "\x00" + key.Text }

// expired reports whether a cached entry is past its freshness.
func (s *Service) expired(e Entry) bool {
	return !e.FreshUntil.IsZero() && s.opts.Now().After(e.FreshUntil)
}

// servableStale reports whether an expired entry may still be served: it is
// present and within the namespace's MaxStale of its freshness.
func (s *Service) servableStale(ns *Namespace, e Entry) bool {
	return e.Found && !s.opts.Now().After(e.FreshUntil.Add(ns.MaxStale))
}

// serveStale accounts for serving the expired entry e of key: it starts
// its revalidation unless the warehouse's breaker is open, and counts the
// stale answer by that reason.
func (s *Service) serveStale(ns *Namespace, key Key, e Entry) {
	reason := "revalidate"
	if s.breaker.open() {
		reason = "error"
	} else {
		s.revalidate(ns, key, e)
	}
	s.stale.WithLabelValues(ns.Name, reason).Inc()
}

// revalidate starts one background read of key, unless one is under way or
// all refresh slots are busy. stale is the entry being served meanwhile.
func (s *Service) revalidate(ns *Namespace, key Key, stale Entry) {
	fk := flightKey(ns, key)
	if _, busy := s.refreshing.LoadOrStore(fk, struct{}{}); busy {
		return
	}
	select {
	case s.refreshes <- struct{}{}:
	default:
		s.refreshing.Delete(fk)
		return
	}
	go func() {
		defer func() { <-s.refreshes; s.refreshing.Delete(fk) }()
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.WarmTimeout)
		defer cancel()
		_, _, err := s.flights.do(ctx, fk, func(ctx context.Context) (Entry, error) {
			return s.load(ctx, ns, key, true, stale)
		})
		if err != nil {
			s.log.LogAttrs(ctx, slog.LevelDebug, "revalidation failed", slog.String("namespace", ns.Name), slog.Any("err", err))
		}
	}()
}

// hotGet reads the hot tier under its own deadline and counts the result. A
// hot-tier error is logged and reported as a miss, so that reads go on from
// the warehouse while the hot tier is down.
func (s *Service) hotGet(ctx context.Context, ns *Namespace, key Key) (Entry, bool, error) {
	hctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
	defer cancel()
	var e Entry
	var hit bool
	var err error
	if s.opts.MaxBatchFold > 1 {
		var r hotResult
		r, err = s.batches[ns.Name].hot.do(hctx, key, struct{}{})
		e, hit = r.entry, r.hit
	} else {
		e, hit, err = s.hot.Get(hctx, ns, key)
	}
	s.countHot(ns, e, hit, err)
	if err != nil {
		return Entry{}, false, err
	}
	return e, hit, nil
}

func (s *Service) countHot(ns *Namespace, e Entry, hit bool, err error) {
	result := "miss"
	switch {
	case err != nil:
		result = "error"
	case hit && e.Found:
		result = "hit"
	case hit:
		result = "negative"
	}
	s.lookups.WithLabelValues(ns.Name, "redis", result).Inc()
}

// load is the body of a shared fill: it checks the hot tier again (a fill
// that finished just before this flight started may have stored the key),
// reads the warehouse, and fills the hot tier. hotOK is false when the hot
// tier just failed, and then it is neither rechecked nor filled. stale is
// the expired entry being revalidated, if any: when the warehouse no longer
// has the key, the absent entry takes the stale entry's version so that it
// replaces it.
func (s *Service) load(ctx context.Context, ns *Namespace, key Key, hotOK bool, stale Entry) (Entry, error) {
	if hotOK {
		// A revalidation checks too: the request that saw the stale entry
		// may have come just after another revalidation refilled it.
		if e, hit, err := s.hotGet(ctx, ns, key); err == nil && hit && !s.expired(e) {
			return e, nil
		}
	}
	var e Entry
	var err error
	if s.opts.MaxBatchFold > 1 {
		e, err = s.batches[ns.Name].warm.do(ctx, key, struct{}{})
	} else {
		var entries []Entry
		if entries, err = s.warmRead(ctx, ns, []Key{key}); err == nil {
			e = entries[0]
		}
	}
	if err != nil {
		return Entry{}, err
	}
	if !e.Found && stale.Found {
		e.Version = stale.Version
	}
	if hotOK {
		s.fill(ctx, ns, "read", []Key{key}, []Entry{e})
	}
	return e, nil
}

// newBatchers returns the folding readers of ns. The hot tier's batches run
// under the hot-tier deadline; the warehouse's under warmRead's bounds.
func (s *Service) newBatchers(ns *Namespace) *nsBatchers {
	return &nsBatchers{
		hot: &batcher[struct{}, hotResult]{lanes: 2, maxBatch: s.opts.MaxBatchFold,
			run: func(ctx context.Context, keys []Key, _ []struct{}) ([]hotResult, error) {
				s.batchKeys.WithLabelValues("redis").Observe(float64(len(keys)))
				ctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
				defer cancel()
				var entries []Entry
				var hits []bool
				var err error
				if len(keys) == 1 {
					entries, hits = make([]Entry, 1), make([]bool, 1)
					entries[0], hits[0], err = s.hot.Get(ctx, ns, keys[0])
				} else {
					entries, hits, err = s.hot.GetMany(ctx, ns, keys)
				}
				if err != nil {
					return nil, err
				}
				out := make([]hotResult, len(keys))
				for i := range keys {
					out[i] = hotResult{entry: entries[i], hit: hits[i]}
				}
				return out, nil
			}},
		warm: &batcher[struct{}, Entry]{lanes: s.opts.WarmLanes, maxBatch: s.opts.MaxBatchFold,
			run: func(ctx context.Context, keys []Key, _ []struct{}) ([]Entry, error) {
				s.batchKeys.WithLabelValues("sql").Observe(float64(len(keys)))
				return s.warmRead(ctx, ns, keys)
			}},
		fill: &batcher[Entry, struct{}]{lanes: 8, maxBatch: s.opts.MaxBatchFold,
			run: func(ctx context.Context, keys []Key, entries []Entry) ([]struct{}, error) {
				ctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
				defer cancel()
				var err error
				if len(keys) == 1 {
					err = s.hot.Fill(ctx, ns, keys[0], entries[0])
				} else {
					err = s.hot.FillMany(ctx, ns, keys, entries)
				}
				return make([]struct{}, len(keys)), err
			}},
	}
}

// warmRead reads keys from the warehouse within the concurrency bound.
func (s *Service) warmRead(ctx context.Context, ns *Namespace, keys []Key) ([]Entry, error) {
	wctx, cancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
	defer cancel()
	select {
	case s.warmSlots <- struct{}{}:
	case <-wctx.Done():
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: too many warehouse reads in flight", ErrOverloaded)
	}
	defer func() { <-s.warmSlots }()
	if ok, wait := s.breaker.allow(); !ok {
		return nil, fmt.Errorf("%w: warehouse circuit breaker open for %v", ErrUnavailable, wait.Round(time.Millisecond))
	}

	var entries []Entry
	var err error
	if len(keys) == 1 {
		var e Entry
		e, err = s.warm.Lookup(wctx, ns, keys[0])
		entries = []Entry{e}
	} else {
		entries, err = s.warm.LookupMany(wctx, ns, keys)
	}
	for _, e := range entries {
		result := "miss"
		if err != nil {
			result = "error"
		} else if e.Found {
			result = "hit"
		}
		s.lookups.WithLabelValues(ns.Name, "sql", result).Inc()
		if err != nil {
			break
		}
	}
	if err != nil && ctx.Err() != nil {
		// The caller went away; that says nothing about the warehouse.
		s.breaker.done(true)
		return nil, ctx.Err()
	}
	s.breaker.done(err == nil)
	if err != nil {
		return nil, fmt.Errorf("%w: warehouse read: %w", ErrUnavailable, err)
	}
	return entries, nil
}

// fill stores entries in the hot tier. A failure is counted and logged but
// not returned: the warehouse already answered, and versions keep a later
// fill from being overtaken by this one.
func (s *Service) fill(ctx context.Context, ns *Namespace, reason string, keys []Key, entries []Entry) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.HotTimeout)
	defer cancel()
	var err error
	switch {
	case len(keys) == 1 && s.opts.MaxBatchFold > 1:
		// Concurrent fills of single keys ride in one pipeline.
		_, err = s.batches[ns.Name].fill.do(hctx, keys[0], entries[0])
	case len(keys) == 1:
		err = s.hot.Fill(hctx, ns, keys[0], entries[0])
	default:
		err = s.hot.FillMany(hctx, ns, keys, entries)
	}
	result := "ok"
	if err != nil {
		result = "error"
		s.log.LogAttrs(ctx, slog.LevelWarn, "hot tier fill failed",
			slog.String("namespace", ns.Name), slog.String("reason", reason), slog.Any("err", err))
	}
	s.hotWrites.WithLabelValues(ns.Name, reason, result).Add(float64(len(keys)))
}

// MGet reads several keys. The items follow the order of the distinct keys
// in rawKeys; absent keys have Found false. Errors wrap ErrUnknownNamespace,
// ErrInvalidKey, ErrTooLarge, ErrUnavailable or ErrOverloaded.
func (s *Service) MGet(ctx context.Context, namespace string, rawKeys []string) ([]Item, error) {
	ns, err := s.Namespace(namespace)
	if err != nil {
		return nil, err
	}
	if len(rawKeys) > s.opts.MaxBatchKeys {
		return nil, fmt.Errorf("%w: %d keys in one request, at most %d", ErrTooLarge, len(rawKeys), s.opts.MaxBatchKeys)
	}
	keys := make([]Key, 0, len(rawKeys))
	seen := make(map[string]bool, len(rawKeys))
	for _, raw := range rawKeys {
		k, err := ns.ParseKey(raw)
		if err != nil {
			return nil, err
		}
		if !seen[k.Text] {
			seen[k.Text] = true
			keys = append(keys, k)
		}
	}
	items := make([]Item, len(keys))
	near := s.near(ns)
	var probe []Key // the keys the near cache did not answer
	var probeAt []int
	for i, k := range keys {
		items[i].Key = k
		if near != nil {
			if e, ok := near.Get(ns, k); ok {
				s.lookups.WithLabelValues(ns.Name, "near", nearResult(e)).Inc()
				items[i].Entry, items[i].Source = e, SourceNear
				continue
			}
			s.lookups.WithLabelValues(ns.Name, "near", "miss").Inc()
		}
		probe, probeAt = append(probe, k), append(probeAt, i)
	}
	if len(probe) == 0 {
		return items, nil
	}
	hctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
	entries, hits, hotErr := s.hot.GetMany(hctx, ns, probe)
	cancel()
	var missed []Key
	var missedAt []int
	for j, k := range probe {
		i := probeAt[j]
		if hotErr == nil && hits[j] {
			e := entries[j]
			switch {
			case !s.expired(e):
				s.countHot(ns, e, true, nil)
				items[i].Entry, items[i].Source = e, SourceHot
				if near != nil {
					near.Set(ns, k, e)
				}
				continue
			case s.servableStale(ns, e):
				s.countHot(ns, e, true, nil)
				s.serveStale(ns, k, e)
				items[i].Entry, items[i].Source = e, SourceStale
				continue
			}
		}
		s.countHot(ns, Entry{}, false, hotErr)
		missed, missedAt = append(missed, k), append(missedAt, i)
	}
	if len(missed) == 0 {
		return items, nil
	}
	loaded, err := s.warmRead(ctx, ns, missed)
	if err != nil {
		return nil, err
	}
	if hotErr == nil {
		s.fill(ctx, ns, "read", missed, loaded)
	}
	for j, i := range missedAt {
		items[i].Entry, items[i].Source = loaded[j], SourceWarm
		if near != nil {
			near.Set(ns, missed[j], loaded[j])
		}
	}
	return items, nil
}

// nearResult is the lookup result of a near-cache entry.
func nearResult(e Entry) string {
	if e.Found {
		return "hit"
	}
	return "negative"
}

// Put stores value under key: first in the warehouse, then, once committed,
// in the hot tier. ifMatch, when not nil, is the version the row must have.
// Errors wrap ErrUnknownNamespace, ErrInvalidKey, ErrInvalidValue,
// ErrTooLarge, ErrReadOnly, ErrVersionMismatch or ErrUnavailable.
func (s *Service) Put(ctx context.Context, namespace, rawKey string, value []byte, ifMatch *int64) (Item, error) {
	ns, key, err := s.writable(namespace, rawKey)
	if err != nil {
		return Item{}, err
	}
	if err := checkValue(ns, value, s.opts.MaxValueBytes, s.opts.MaxValueDepth); err != nil {
		return Item{}, err
	}
	var e Entry
	err = s.warmWrite(ctx, func(ctx context.Context) (err error) {
		e, err = s.warm.Put(ctx, ns, key, value, ifMatch)
		return err
	})
	if err != nil {
		return Item{}, err
	}
	s.written(ctx, ns, key, e)
	return Item{Key: key, Entry: e, Source: SourceWarm}, nil
}

// Delete removes key: first in the warehouse, then, once committed, the hot
// tier records the key as absent at the delete's version. Errors wrap
// ErrNotFound, ErrVersionMismatch and the errors of Put.
func (s *Service) Delete(ctx context.Context, namespace, rawKey string, ifMatch *int64) error {
	ns, key, err := s.writable(namespace, rawKey)
	if err != nil {
		return err
	}
	var version int64
	err = s.warmWrite(ctx, func(ctx context.Context) (err error) {
		version, err = s.warm.Delete(ctx, ns, key, ifMatch)
		return err
	})
	if err != nil {
		return err
	}
	s.written(ctx, ns, key, Entry{Version: version})
	return nil
}

func (s *Service) writable(namespace, rawKey string) (*Namespace, Key, error) {
	ns, key, err := s.key(namespace, rawKey)
	if err != nil {
		return nil, Key{}, err
	}
	if !ns.Writable {
		return nil, Key{}, fmt.Errorf("%w: %q", ErrReadOnly, ns.Name)
	}
	return ns, key, nil
}

// warmWrite runs one warehouse write under the warehouse deadline and the
// circuit breaker. It keeps the client errors of a write and marks the rest
// as the warehouse being unavailable.
func (s *Service) warmWrite(ctx context.Context, write func(context.Context) error) error {
	if ok, wait := s.breaker.allow(); !ok {
		return fmt.Errorf("%w: warehouse circuit breaker open for %v", ErrUnavailable, wait.Round(time.Millisecond))
	}
	// A write runs to its end even if the client goes away, so that a
	// commit is always followed by its cache update.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.WarmTimeout)
	defer cancel()
	err := write(wctx)
	for _, client := range []error{ErrNotFound, ErrVersionMismatch, ErrInvalidValue} {
		if errors.Is(err, client) {
			s.breaker.done(true)
			return err
		}
	}
	s.breaker.done(err == nil)
	if err != nil {
		return fmt.Errorf("%w: warehouse write: %w", ErrUnavailable, err)
	}
	return nil
}

// TierState is the readiness of one tier.
type TierState struct {
	// Tier is "redis" or "sql".
	Tier string
	// Err is nil when the tier answered.
	Err error
}

// Readiness pings both tiers, each under its own deadline, and reports
// each one's state.
func (s *Service) Readiness(ctx context.Context) []TierState {
	hctx, cancel := context.WithTimeout(ctx, 4*s.opts.HotTimeout)
	defer cancel()
	wctx, wcancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
	defer wcancel()
	return []TierState{
		{Tier: "redis", Err: s.hot.Ping(hctx)},
		{Tier: "sql", Err: s.warm.Ping(wctx)},
	}
}
