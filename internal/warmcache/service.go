package warmcache

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/promreg"
)

// Service answers reads from the hot tier and falls through to the warehouse
// on a miss; it writes to the warehouse first and then updates the hot tier.
// A Service is safe for concurrent use.
type Service struct {
	hot        Hot
	warm       Warm
	namespaces map[string]*Namespace
	opts       Options
	log        *slog.Logger
	breaker    *breaker
	ready      readiness
	cursorKey  []byte

	// Reads: the shared warehouse reads, the lanes that fold them, their
	// bound, and the revalidations under way.
	flights    flightGroup
	lanes      map[string]*nsLanes
	warmSlots  chan struct{}
	refreshing sync.Map // key -> struct{}: revalidations under way
	refreshes  chan struct{}

	trust   trust
	loads   loadLimits
	sweep   sweeper
	metrics serviceMetrics
}

// loadLimits bound the bulk loads under way and their writes.
type loadLimits struct {
	slots  chan struct{}
	writes chan struct{}
}

// sweeper is the state of RunSweeper: wake tells it that a write set an
// expiry; due holds, by namespace, the earliest instant such a write's
// row expires (at most one entry per namespace), under mu.
type sweeper struct {
	wake    chan struct{}
	mu      sync.Mutex
	due     map[string]time.Time
	metrics sweepMetrics
}

// serviceMetrics are the metrics of the read and write paths.
type serviceMetrics struct {
	lookups    *prometheus.CounterVec
	hotWrites  *prometheus.CounterVec
	flightJoin *prometheus.CounterVec
	stale      *prometheus.CounterVec
	batchKeys  *prometheus.HistogramVec
	// batchRedis and batchSQL return batchKeys' series, taken once.
	batchRedis func() prometheus.Observer
	batchSQL   func() prometheus.Observer
	foldWrites prometheus.Histogram
	laneSpills *prometheus.CounterVec
}

// NewService returns a Service over the given tiers and namespaces. It
// registers its metrics with reg and fails if a namespace name repeats.
func NewService(hot Hot, warm Warm, namespaces []*Namespace, reg prometheus.Registerer, log *slog.Logger, opts Options) (*Service, error) {
	s := &Service{
		hot:        hot,
		warm:       warm,
		namespaces: make(map[string]*Namespace, len(namespaces)),
		lanes:      make(map[string]*nsLanes, len(namespaces)),
		opts:       opts.withDefaults(),
		log:        log,
	}
	s.trust.doubts = newDoubts()
	s.cursorKey = s.opts.CursorKey
	if len(s.cursorKey) == 0 {
		s.cursorKey = make([]byte, 32)
		if _, err := rand.Read(s.cursorKey); err != nil {
			return nil, fmt.Errorf("warmcache: cursor key: %w", err)
		}
	}
	s.warmSlots = make(chan struct{}, s.opts.MaxWarmInflight)
	s.loads.slots = make(chan struct{}, s.opts.MaxLoads)
	s.loads.writes = make(chan struct{}, s.opts.MaxLoadWrites)
	s.trust.repairs = make(chan struct{}, maxRepairs)
	s.refreshes = make(chan struct{}, s.opts.MaxRefreshes)
	s.sweep.wake = make(chan struct{}, 1)
	s.sweep.due = make(map[string]time.Time)
	s.breaker = &breaker{threshold: s.opts.BreakerThreshold, cooldown: s.opts.BreakerCooldown,
		maxCooldown: 30 * s.opts.BreakerCooldown, now: s.opts.Now}
	for _, ns := range namespaces {
		if _, dup := s.namespaces[ns.Name]; dup {
			return nil, fmt.Errorf("warmcache: namespace %q declared twice", ns.Name)
		}
		s.namespaces[ns.Name] = ns
	}
	if err := s.registerMetrics(reg); err != nil {
		return nil, err
	}
	for _, ns := range namespaces {
		s.lanes[ns.Name] = s.newLanes(ns)
	}
	s.metrics.batchRedis = sync.OnceValue(func() prometheus.Observer { return s.metrics.batchKeys.WithLabelValues("redis") })
	s.metrics.batchSQL = sync.OnceValue(func() prometheus.Observer { return s.metrics.batchKeys.WithLabelValues("sql") })
	return s, nil
}

// registerMetrics builds the service's metrics and registers them on reg.
func (s *Service) registerMetrics(reg prometheus.Registerer) error {
	s.metrics.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_lookups_total",
		Help: "Key lookups by namespace, tier (near, redis, sql) and result (hit, negative, miss, error).",
	}, []string{"namespace", "tier", "result"})
	s.metrics.hotWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_cache_fills_total",
		Help: "Hot-tier updates by namespace, reason (read, write, change: a write that bypassed the service, invalidate, load, repair: a retried update of a write, expire: rows the sweeper deleted) and result (ok, error, echo: a captured change that was this instance's own write at the version it already applied, skipped).",
	}, []string{"namespace", "reason", "result"})
	s.metrics.flightJoin = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_fill_coalesced_total",
		Help: "Misses that joined a warehouse read already in flight for the same key.",
	}, []string{"namespace"})
	s.metrics.stale = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_stale_served_total",
		Help: "Expired entries served within MaxStale, by reason: revalidate (a refresh runs) or error (the warehouse is failing).",
	}, []string{"namespace", "reason"})
	s.metrics.batchKeys = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "warmcache_batch_keys",
		Help:    "Keys per folded read, by tier (redis, sql).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	}, []string{"tier"})
	s.metrics.laneSpills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_hot_lane_spills_total",
		Help: "Redis read lanes opened beyond --hot-lanes, by namespace: a read found every lane busy, their last pipeline sent more than --hot-lane-spill ago, while Redis was slow to answer (even its shortest recent pipeline took longer).",
	}, []string{"namespace"})
	s.metrics.foldWrites = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "warmcache_write_fold_size",
		Help:    "Writes per folded warehouse write (one round trip and one commit).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})
	breakerOpen := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warmcache_warehouse_breaker_open",
		Help: "1 while the warehouse circuit breaker refuses calls, else 0.",
	}, func() float64 {
		if s.breaker.open() {
			return 1
		}
		return 0
	})
	s.sweep.metrics = newSweepMetrics()
	return promreg.Register(reg, "warmcache", append([]prometheus.Collector{s.metrics.lookups, s.metrics.hotWrites, s.metrics.flightJoin, s.metrics.stale, breakerOpen, s.metrics.batchKeys, s.metrics.laneSpills, s.metrics.foldWrites}, append(s.sweep.metrics.collectors(), s.trust.doubts.collectors()...)...)...)
}

// nsLanes fold one namespace's concurrent reads: hot-tier lookups into
// pipelines, and warehouse reads (with their fills) into `= ANY($1)`
// queries. They also hold the namespace's read counters, each taken from
// its vector once, when first counted (so that /metrics shows only the
// series that counted something, as with WithLabelValues): a read then
// counts its lookups without looking their labels up.
type nsLanes struct {
	hot  *batcher[*hotCall]
	warm *batcher[*loadGroup]
	// write folds single writes (see Folder); nil when they do not fold.
	write *batcher[*writeCall]
	// lookups are the namespace's warmcache_lookups_total series, by
	// tier and result.
	lookups [numLookupTiers][numLookupResults]atomic.Pointer[counter]
}

type counter struct{ prometheus.Counter }

// The tiers and results of warmcache_lookups_total, which index
// nsLanes.lookups.
type (
	lookupTier   int
	lookupResult int
)

const (
	tierNear lookupTier = iota
	tierRedis
	tierSQL
	numLookupTiers
)

const (
	resultHit lookupResult = iota
	resultNegative
	resultMiss
	resultError
	numLookupResults
)

var (
	lookupTierLabels   = [numLookupTiers]string{"near", "redis", "sql"}
	lookupResultLabels = [numLookupResults]string{"hit", "negative", "miss", "error"}
)

// lookup returns the counter of ns's lookups in tier with result.
func (s *Service) lookup(ns *Namespace, tier lookupTier, result lookupResult) prometheus.Counter {
	cell := &s.lanes[ns.Name].lookups[tier][result]
	if c := cell.Load(); c != nil {
		return c.Counter
	}
	// Two first lookups may both take the series: they get the same child
	// of the vector.
	c := &counter{s.metrics.lookups.WithLabelValues(ns.Name, lookupTierLabels[tier], lookupResultLabels[result])}
	cell.Store(c)
	return c.Counter
}

// newLanes returns the lanes of ns: HotLanes for the hot tier (two keep
// Redis busy while one pipeline is on the wire; more while the pipelines
// wait on a slow round trip, see HotLaneSpill) and WarmLanes for the
// warehouse (one folds the misses that arrive during a query into the
// next). With folding off (MaxBatchFold 1) every read goes at once on its
// own.
func (s *Service) newLanes(ns *Namespace) *nsLanes {
	return &nsLanes{
		hot: &batcher[*hotCall]{lanes: s.opts.HotLanes, maxBatch: s.opts.MaxBatchFold,
			spill: s.opts.HotLaneSpill, spillLanes: hotSpillLanesPerLane * s.opts.HotLanes,
			spilled: s.metrics.laneSpills.WithLabelValues(ns.Name).Inc,
			size:    func(c *hotCall) int { return len(c.keys) },
			run:     func(calls []*hotCall) { s.runHotReads(ns, calls) }},
		warm: &batcher[*loadGroup]{lanes: s.opts.WarmLanes, maxBatch: s.opts.MaxBatchFold,
			size: func(g *loadGroup) int { return len(g.flights) },
			run:  func(groups []*loadGroup) { s.runLoads(ns, groups) }},
		write: s.newWriteLane(ns),
	}
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

// MaxBatchKeys returns the bound on the keys of one MGet, for transports
// that check it while they decode a request.
func (s *Service) MaxBatchKeys() int { return s.opts.MaxBatchKeys }

// MaxResponseBytes returns the bound on the values of one MGet answer.
func (s *Service) MaxResponseBytes() int { return s.opts.MaxResponseBytes }
