package warmcache

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// MaxResponseBytes bounds the values of one MGet answer; an MGet over
	// it fails with ErrTooLarge once the values read so far pass it. Zero
	// means 16 MiB.
	MaxResponseBytes int
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
	// Generations moves a namespace to a new generation, for Invalidate
	// of a whole namespace. Nil means that Invalidate cannot do it.
	Generations Generations
	// MaxBatchFold bounds how many concurrent single-key reads are folded
	// into one Redis pipeline or one warehouse `= ANY($1)` query. Zero means
	// 64; one turns folding off, so that every read makes its own round trip.
	MaxBatchFold int
	// MaxLoads bounds the bulk loads in progress at once, over every
	// transport; a load over the bound fails at once with ErrOverloaded.
	// Zero means 4.
	MaxLoads int
	// MaxLoadWrites bounds the loads writing to the warehouse at once, each
	// on one connection; the others wait without one. Zero means 2.
	MaxLoadWrites int
	// MaxLoadBytes bounds the keys and values of one load, which are
	// spooled to disk before the warehouse sees them. Zero means 64 MiB;
	// negative means no bound.
	MaxLoadBytes int64
	// SpoolDir is where loads are spooled, in unlinked files. Empty means
	// os.TempDir().
	SpoolDir string
	// DirectLoads streams a load into the warehouse as its source is read,
	// holding a connection meanwhile, instead of spooling it first. Only
	// for trusted local sources, such as the load command's file.
	DirectLoads bool
	// CursorKey signs the cursors of Query, so that a client cannot forge
	// one. Instances behind one load balancer need the same key. Nil means
	// a random key per process: a cursor is then valid only on the
	// instance that issued it, until it restarts.
	CursorKey []byte
	// Tracer marks the core's steps in the request's trace. Nil means no
	// tracing, at the cost of one comparison per step.
	Tracer Tracer
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
	def(&o.MaxResponseBytes, 16<<20)
	def(&o.MaxValueDepth, 64)
	def(&o.BreakerThreshold, 5)
	def(&o.MaxRefreshes, 8)
	def(&o.MaxBatchFold, 64)
	def(&o.WarmLanes, 4)
	def(&o.MaxLoads, 4)
	def(&o.MaxLoadWrites, 2)
	if o.MaxLoadBytes == 0 {
		o.MaxLoadBytes = 64 << 20
	}
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
	ready      readiness
	cursorKey  []byte
	loadSlots  chan struct{}
	loadWrites chan struct{}

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
			Help: "Hot-tier updates by namespace, reason (read, write, change: a write that bypassed the service) and result (ok, error).",
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
	s.cursorKey = s.opts.CursorKey
	if len(s.cursorKey) == 0 {
		s.cursorKey = make([]byte, 32)
		if _, err := rand.Read(s.cursorKey); err != nil {
			return nil, fmt.Errorf("warmcache: cursor key: %w", err)
		}
	}
	s.warmSlots = make(chan struct{}, s.opts.MaxWarmInflight)
	s.loadSlots = make(chan struct{}, s.opts.MaxLoads)
	s.loadWrites = make(chan struct{}, s.opts.MaxLoadWrites)
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

// NamespaceNames returns the names of the namespaces, sorted.
func (s *Service) NamespaceNames() []string {
	names := make([]string, 0, len(s.namespaces))
	for name := range s.namespaces {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
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
		_, end := s.step(ctx, "near", ns)
		e, ok := near.Get(ns, key)
		if ok {
			end("hit")
			s.lookups.WithLabelValues(ns.Name, "near", nearResult(e)).Inc()
			s.outcome(ctx, ns, string(SourceNear), e.Found)
			return s.answer(ns, Item{Key: key, Entry: e, Source: SourceNear})
		}
		end("miss")
		s.lookups.WithLabelValues(ns.Name, "near", "miss").Inc()
	}
	item := Item{Key: key, Source: SourceHot}
	mark := s.flights.mark()
	e, hit, hotErr := s.hotGet(ctx, ns, key)
	if hit && s.expired(e) {
		if s.servableStale(ns, e) {
			s.serveStale(ns, key, e)
			item.Entry, item.Source = e, SourceStale
			s.outcome(ctx, ns, string(SourceStale), true)
			return item, nil
		}
		hit = false
	}
	if !hit {
		item.Source = SourceWarm
		var shared bool
		fk := flightKey(ns, key)
		fctx, end := s.step(ctx, "flight", ns)
		e, shared, err = s.flights.do(fctx, fk, func(ctx context.Context) (Entry, error) {
			return s.load(ctx, ns, key, hotErr == nil, s.flights.endedSince(fk, mark), Entry{})
		})
		switch {
		case err != nil:
			end("error")
		case shared:
			end("joined")
		default:
			end("led")
		}
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
	s.outcome(ctx, ns, string(item.Source), e.Found)
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
// instance's near cache, and the other instances' near caches. Entries at
// version zero (the delete of a key that was already absent) change
// nothing.
func (s *Service) written(ctx context.Context, ns *Namespace, keys []Key, entries []Entry) {
	var fk []Key
	var fe []Entry
	for i, e := range entries {
		if e.Version != 0 {
			fk, fe = append(fk, keys[i]), append(fe, e)
		}
	}
	if len(fk) == 0 {
		return
	}
	s.fill(ctx, ns, "write", fk, fe)
	near := s.near(ns)
	for i, key := range fk {
		e := fe[i]
		if near != nil {
			near.Invalidate(ns, key, e.Version)
			if e.Found {
				near.Set(ns, key, e)
			}
		}
		if s.opts.Invalidations != nil && ns.NearTTL > 0 {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.HotTimeout)
			err := s.opts.Invalidations.Publish(pctx, ns, key, e.Version)
			cancel()
			if err != nil {
				s.log.LogAttrs(ctx, slog.LevelWarn, "near-cache invalidation not published",
					slog.String("namespace", ns.Name), slog.Any("err", err))
			}
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
			return s.load(ctx, ns, key, true, true, stale)
		})
		if err != nil {
			s.log.LogAttrs(ctx, slog.LevelDebug, "revalidation failed", slog.String("namespace", ns.Name), slog.Any("err", err))
		}
	}()
}

// hotGet reads the hot tier under its own deadline and counts the result. A
// hot-tier error is logged and reported as a miss, so that reads go on from
// the warehouse while the hot tier is down. A folded read spares itself a
// timer of its own: every batch runs under the hot-tier deadline, and a
// read waits for its own batch and for the batches ahead of it on the
// lanes (with up to MaxBatchFold keys each, one batch ahead at most unless
// more than lanes × MaxBatchFold reads wait).
func (s *Service) hotGet(ctx context.Context, ns *Namespace, key Key) (Entry, bool, error) {
	var e Entry
	var hit bool
	var err error
	if s.opts.MaxBatchFold > 1 {
		var r hotResult
		r, err = s.batches[ns.Name].hot.do(ctx, key, struct{}{})
		e, hit = r.entry, r.hit
	} else {
		hctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
		e, hit, err = s.hot.Get(hctx, ns, key)
		cancel()
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

// load is the body of a shared fill: it checks the hot tier again when
// recheck is set (a fill that finished just before this flight started may
// have stored the key), reads the warehouse, and fills the hot tier. A read
// sets recheck only when another flight of the key ended after its own
// hot-tier read began (flightGroup.endedSince): otherwise no fill of this
// instance can have landed since, and the check would cost a Redis round
// trip per miss for nothing. hotOK is false when the hot tier just failed,
// and then it is neither rechecked nor filled. stale is the expired entry
// being revalidated, if any: when the warehouse no longer has the key, the
// absent entry takes the stale entry's version so that it replaces it.
func (s *Service) load(ctx context.Context, ns *Namespace, key Key, hotOK, recheck bool, stale Entry) (Entry, error) {
	if hotOK && recheck {
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
		hot: &batcher[struct{}, hotResult]{lanes: 2, maxBatch: s.opts.MaxBatchFold, traced: s.opts.Tracer != nil,
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
		warm: &batcher[struct{}, Entry]{lanes: s.opts.WarmLanes, maxBatch: s.opts.MaxBatchFold, traced: s.opts.Tracer != nil,
			run: func(ctx context.Context, keys []Key, _ []struct{}) ([]Entry, error) {
				s.batchKeys.WithLabelValues("sql").Observe(float64(len(keys)))
				return s.warmRead(ctx, ns, keys)
			}},
		fill: &batcher[Entry, struct{}]{lanes: 8, maxBatch: s.opts.MaxBatchFold, traced: s.opts.Tracer != nil,
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
	if err := s.warmOutcome(ctx, wctx, err); err != nil {
		return nil, err
	}
	return entries, nil
}

// fill stores entries in the hot tier. A failure is counted and logged but
// not returned: the warehouse already answered, and versions keep a later
// fill from being overtaken by this one.
func (s *Service) fill(ctx context.Context, ns *Namespace, reason string, keys []Key, entries []Entry) {
	var err error
	if len(keys) == 1 && s.opts.MaxBatchFold > 1 {
		// Concurrent fills of single keys ride in one pipeline, under the
		// deadline that the batcher sets for each batch (see hotGet).
		_, err = s.batches[ns.Name].fill.do(context.WithoutCancel(ctx), keys[0], entries[0])
	} else {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.HotTimeout)
		if len(keys) == 1 {
			err = s.hot.Fill(hctx, ns, keys[0], entries[0])
		} else {
			err = s.hot.FillMany(hctx, ns, keys, entries)
		}
		cancel()
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
// ErrInvalidKey, ErrTooLarge (more than MaxBatchKeys keys, or values over
// MaxResponseBytes), ErrUnavailable or ErrOverloaded.
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
	// The hot tier and the warehouse are read mgetChunk keys at a time,
	// so that the answer's bound is checked before more values are read.
	size := 0
	for i := range items {
		size += len(items[i].Entry.Value)
	}
	if err := s.checkAnswerSize(size); err != nil {
		return nil, err
	}
	hotOK := true
	var missed []Key
	var missedAt []int
	read := 0
	for start, n := 0, 0; start < len(probe); start += n {
		n = s.mgetChunk(size, read)
		chunk, chunkAt := probe[start:min(start+n, len(probe))], probeAt[start:min(start+n, len(probe))]
		read += len(chunk)
		hctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
		entries, hits, hotErr := s.hot.GetMany(hctx, ns, chunk)
		cancel()
		if hotErr != nil {
			hotOK = false
		}
		for j, k := range chunk {
			i := chunkAt[j]
			if hotErr == nil && hits[j] {
				e := entries[j]
				switch {
				case !s.expired(e):
					s.countHot(ns, e, true, nil)
					items[i].Entry, items[i].Source = e, SourceHot
					size += len(e.Value)
					if near != nil {
						near.Set(ns, k, e)
					}
					continue
				case s.servableStale(ns, e):
					s.countHot(ns, e, true, nil)
					s.serveStale(ns, k, e)
					items[i].Entry, items[i].Source = e, SourceStale
					size += len(e.Value)
					continue
				}
			}
			s.countHot(ns, Entry{}, false, hotErr)
			missed, missedAt = append(missed, k), append(missedAt, i)
		}
		if err := s.checkAnswerSize(size); err != nil {
			return nil, err
		}
	}
	for start, n := 0, 0; start < len(missed); start += n {
		n = s.mgetChunk(size, read)
		chunk, chunkAt := missed[start:min(start+n, len(missed))], missedAt[start:min(start+n, len(missed))]
		read += len(chunk)
		loaded, err := s.warmRead(ctx, ns, chunk)
		if err != nil {
			return nil, err
		}
		if hotOK {
			s.fill(ctx, ns, "read", chunk, loaded)
		}
		for j, i := range chunkAt {
			items[i].Entry, items[i].Source = loaded[j], SourceWarm
			size += len(loaded[j].Value)
			if near != nil {
				near.Set(ns, chunk[j], loaded[j])
			}
		}
		if err := s.checkAnswerSize(size); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// mgetChunk returns how many keys of an MGet to read from a tier next,
// given the bytes of the read values so far: as many as the rest of
// MaxResponseBytes holds at the average size so far, from 16 (the most
// that can overshoot the bound, by 16 values) to 256.
func (s *Service) mgetChunk(size, read int) int {
	const least, most = 16, 256
	if read == 0 || size == 0 {
		return least
	}
	avg := max(size/read, 1)
	return min(max((s.opts.MaxResponseBytes-size)/avg, least), most)
}

// checkAnswerSize refuses an MGet answer whose values exceed
// MaxResponseBytes.
func (s *Service) checkAnswerSize(size int) error {
	if size > s.opts.MaxResponseBytes {
		return fmt.Errorf("%w: the values of these keys exceed %d bytes, the bound of one answer; ask for fewer keys", ErrTooLarge, s.opts.MaxResponseBytes)
	}
	return nil
}

// MaxBatchKeys returns the bound on the keys of one MGet, for transports
// that check it while they decode a request.
func (s *Service) MaxBatchKeys() int { return s.opts.MaxBatchKeys }

// MaxResponseBytes returns the bound on the values of one MGet answer.
func (s *Service) MaxResponseBytes() int { return s.opts.MaxResponseBytes }

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
	items, err := s.Transact(ctx, namespace, []Op{{Key: rawKey, Value: value, IfMatch: ifMatch}})
	if err != nil {
		return Item{}, err
	}
	return items[0], nil
}

// Delete removes key: first in the warehouse, then, once committed, the hot
// tier records the key as absent at the delete's version. Errors wrap
// ErrNotFound, ErrVersionMismatch and the errors of Put.
func (s *Service) Delete(ctx context.Context, namespace, rawKey string, ifMatch *int64) error {
	_, err := s.Transact(ctx, namespace, []Op{{Key: rawKey, Delete: true, IfMatch: ifMatch}})
	return err
}

// warmWrite runs one warehouse write under the warehouse deadline and the
// circuit breaker (see warmOutcome).
func (s *Service) warmWrite(ctx context.Context, write func(context.Context) error) error {
	if ok, wait := s.breaker.allow(); !ok {
		return fmt.Errorf("%w: warehouse circuit breaker open for %v", ErrUnavailable, wait.Round(time.Millisecond))
	}
	// A write runs to its end even if the client goes away, so that a
	// commit is always followed by its cache update.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.WarmTimeout)
	defer cancel()
	return s.warmOutcome(context.WithoutCancel(ctx), wctx, write(wctx))
}

// warmOutcome tells the circuit breaker how a warehouse call that it let
// through ended, and returns the call's error for the client. The adapter
// has classified err once; this only reads the class:
//   - the caller went away (ctx done): nothing is counted;
//   - the warehouse is failing (err wraps ErrUnavailable) or the warehouse
//     deadline ran out: a failure, answered as ErrUnavailable;
//   - any other answer, a client error or a bug: the warehouse answered,
//     a success; the error passes unchanged.
func (s *Service) warmOutcome(ctx, wctx context.Context, err error) error {
	switch {
	case err == nil:
		s.breaker.done(true)
		return nil
	case ctx.Err() != nil:
		s.breaker.release()
		return ctx.Err()
	case errors.Is(err, ErrUnavailable):
		s.breaker.done(false)
		return err
	case wctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		s.breaker.done(false)
		return fmt.Errorf("%w: the warehouse did not answer within %v: %w", ErrUnavailable, s.opts.WarmTimeout, err)
	}
	s.breaker.done(true)
	return err
}

// TierState is the readiness of one tier.
type TierState struct {
	// Tier is "redis" or "sql".
	Tier string
	// Err is nil when the tier answered.
	Err error
}

// readinessTTL is how long a readiness answer is reused: probes, however
// many, cost at most one ping of each tier per readinessTTL.
const readinessTTL = time.Second

// readiness caches the last answer of Readiness and runs one probe at a
// time.
type readiness struct {
	mu      sync.Mutex
	at      time.Time
	states  []TierState
	running chan struct{} // closed when the probe under way ends; nil if none
}

// Readiness reports each tier's state. It pings both tiers, each under its
// own deadline, at most once per second: callers within a second of the
// last probe get its answer, and callers during a probe wait for it. So a
// flood of readiness probes never takes more than one warehouse connection.
// The probe runs to its end even if its caller goes away.
func (s *Service) Readiness(ctx context.Context) []TierState {
	r := &s.ready
	r.mu.Lock()
	if r.states != nil && s.opts.Now().Sub(r.at) < readinessTTL {
		states := r.states
		r.mu.Unlock()
		return states
	}
	running := r.running
	if running == nil {
		running = make(chan struct{})
		r.running = running
		go s.probe(running)
	}
	r.mu.Unlock()
	select {
	case <-running:
	case <-ctx.Done():
		return []TierState{{Tier: "redis", Err: ctx.Err()}, {Tier: "sql", Err: ctx.Err()}}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states
}

// probe pings both tiers and records the answer.
func (s *Service) probe(done chan struct{}) {
	hctx, cancel := context.WithTimeout(context.Background(), 4*s.opts.HotTimeout)
	defer cancel()
	wctx, wcancel := context.WithTimeout(context.Background(), s.opts.WarmTimeout)
	defer wcancel()
	states := []TierState{
		{Tier: "redis", Err: s.hot.Ping(hctx)},
		{Tier: "sql", Err: s.warm.Ping(wctx)},
	}
	r := &s.ready
	r.mu.Lock()
	r.states, r.at, r.running = states, s.opts.Now(), nil
	r.mu.Unlock()
	close(done)
}
