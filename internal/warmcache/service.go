package warmcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Source says which tier answered a read. Its text is the X-Cache header.
type Source string

// The sources of a read.
const (
	SourceHot  Source = "hit"  // the hot tier held the entry
	SourceWarm Source = "miss" // the warehouse answered and the hot tier was filled
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

	lookups    *prometheus.CounterVec
	hotWrites  *prometheus.CounterVec
	flightJoin *prometheus.CounterVec
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
			Help: "Key lookups by namespace, tier (redis, sql) and result (hit, negative, miss, error).",
		}, []string{"namespace", "tier", "result"}),
		hotWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_cache_fills_total",
			Help: "Hot-tier updates by namespace, reason (read, write) and result (ok, error).",
		}, []string{"namespace", "reason", "result"}),
		flightJoin: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_fill_coalesced_total",
			Help: "Misses that joined a warehouse read already in flight for the same key.",
		}, []string{"namespace"}),
	}
	s.warmSlots = make(chan struct{}, s.opts.MaxWarmInflight)
	for _, ns := range namespaces {
		if _, dup := s.namespaces[ns.Name]; dup {
			return nil, fmt.Errorf("warmcache: namespace %q declared twice", ns.Name)
		}
		s.namespaces[ns.Name] = ns
	}
	for _, c := range []prometheus.Collector{s.lookups, s.hotWrites, s.flightJoin} {
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
func (s *Service) Get(ctx context.Context, namespace, rawKey string) (Item, error) {
	ns, key, err := s.key(namespace, rawKey)
	if err != nil {
		return Item{}, err
	}
	item := Item{Key: key, Source: SourceHot}
	e, hit, hotErr := s.hotGet(ctx, ns, key)
	if !hit {
		item.Source = SourceWarm
		var shared bool
		e, shared, err = s.flights.do(ctx, ns.Name+"\x00"+key.Text, func(ctx context.Context) (Entry, error) {
			return s.load(ctx, ns, key, hotErr == nil)
		})
		if shared {
			s.flightJoin.WithLabelValues(ns.Name).Inc()
		}
		if err != nil {
			return Item{}, err
		}
	}
	item.Entry = e
	if !e.Found {
		return item, fmt.Errorf("%w: key %q in namespace %q", ErrNotFound, truncate(key.Text), ns.Name)
	}
	return item, nil
}

// hotGet reads the hot tier under its own deadline and counts the result. A
// hot-tier error is logged and reported as a miss, so that reads go on from
// the warehouse while the hot tier is down.
func (s *Service) hotGet(ctx context.Context, ns *Namespace, key Key) (Entry, bool, error) {
	hctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
	defer cancel()
	e, hit, err := s.hot.Get(hctx, ns, key)
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
// reads the warehouse, and fills the hot tier.
func (s *Service) load(ctx context.Context, ns *Namespace, key Key, recheck bool) (Entry, error) {
	if recheck {
		if e, hit, err := s.hotGet(ctx, ns, key); err == nil && hit {
			return e, nil
		}
	}
	entries, err := s.warmRead(ctx, ns, []Key{key})
	if err != nil {
		return Entry{}, err
	}
	s.fill(ctx, ns, "read", []Key{key}, entries)
	return entries[0], nil
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
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
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
	if len(keys) == 1 {
		err = s.hot.Fill(hctx, ns, keys[0], entries[0])
	} else {
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
	if len(keys) == 0 {
		return items, nil
	}
	hctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
	entries, hits, hotErr := s.hot.GetMany(hctx, ns, keys)
	cancel()
	var missed []Key
	var missedAt []int
	for i, k := range keys {
		items[i].Key = k
		if hotErr == nil && hits[i] {
			s.countHot(ns, entries[i], true, nil)
			items[i].Entry, items[i].Source = entries[i], SourceHot
			continue
		}
		s.countHot(ns, Entry{}, false, hotErr)
		missed = append(missed, k)
		missedAt = append(missedAt, i)
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
	}
	return items, nil
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
	wctx, cancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
	defer cancel()
	e, err := s.warm.Put(wctx, ns, key, value, ifMatch)
	if err != nil {
		return Item{}, s.writeErr(err)
	}
	s.fill(ctx, ns, "write", []Key{key}, []Entry{e})
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
	wctx, cancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
	defer cancel()
	version, err := s.warm.Delete(wctx, ns, key, ifMatch)
	if err != nil {
		return s.writeErr(err)
	}
	s.fill(ctx, ns, "write", []Key{key}, []Entry{{Version: version}})
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

// writeErr keeps the client errors of a write and marks the rest as the
// warehouse being unavailable.
func (s *Service) writeErr(err error) error {
	for _, client := range []error{ErrNotFound, ErrVersionMismatch, ErrInvalidValue} {
		if errors.Is(err, client) {
			return err
		}
	}
	return fmt.Errorf("%w: warehouse write: %w", ErrUnavailable, err)
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
