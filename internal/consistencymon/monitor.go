// Package consistencymon is the service's online consistency monitor, in
// the manner of Meta's Polaris for TAO: it samples a fraction of the
// hot-tier updates that land (writes, reads' fills, captured changes,
// repairs), and after each of a few delays (1 s, 10 s and 60 s by default)
// compares what Redis and the near cache hold for the key with the
// warehouse's version. It counts consistent and inconsistent entries by
// age as warmcache_consistency_* series, logs each inconsistent key once,
// and repairs it by reading it from the warehouse into both caches.
// docs/consistency.md shows how to read the series as nines.
package consistencymon

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/promreg"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Auditor reads a key from the warehouse and the caches, and repairs it.
// *warmcache.Service is one.
type Auditor interface {
	Audit(ctx context.Context, namespace, rawKey string) (warmcache.Audit, error)
	GetLatest(ctx context.Context, namespace, rawKey string) (warmcache.Item, error)
}

var _ Auditor = (*warmcache.Service)(nil)

// Options configure a Monitor. The zero value of each field selects the
// default in its comment.
type Options struct {
	// Rate is the fraction of hot-tier updates sampled, in [0, 1]. Zero
	// means 0.001; negative turns sampling off.
	Rate float64
	// Delays are the ages at which a sampled key is checked. Nil means
	// 1s, 10s and 60s.
	Delays []time.Duration
	// MaxPending bounds the checks waiting for their time, over every
	// delay; a sample beyond it is dropped and counted. Zero means 10000.
	MaxPending int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Rate == 0 {
		o.Rate = 0.001
	}
	if o.Delays == nil {
		o.Delays = []time.Duration{time.Second, 10 * time.Second, time.Minute}
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 10000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// check is one sampled key, due at a time.
type check struct {
	ns  string
	key string
	due time.Time
}

// Monitor samples updates and checks them later. Sample is safe for
// concurrent use and never blocks; Run does the checks.
type Monitor struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	queues  [][]check // one FIFO per delay, in due order
	pending int
	wake    chan struct{}
	logged  map[string]bool // keys logged inconsistent, bounded by MaxPending

	samples *prometheus.CounterVec
	dropped prometheus.Counter
	checks  *prometheus.CounterVec
	repairs *prometheus.CounterVec
	repairT prometheus.Histogram
}

// New returns a Monitor and registers its metrics on reg.
func New(opts Options, reg prometheus.Registerer, log *slog.Logger) (*Monitor, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Monitor{opts: opts.withDefaults(), log: log, wake: make(chan struct{}, 1), logged: map[string]bool{}}
	m.queues = make([][]check, len(m.opts.Delays))
	m.samples = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_consistency_samples_total",
		Help: "Hot-tier updates sampled for the consistency monitor, by reason (write, read, change, repair, ...).",
	}, []string{"reason"})
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "warmcache_consistency_dropped_total",
		Help: "Sampled checks dropped because too many were waiting.",
	})
	m.checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_consistency_checks_total",
		Help: "Sampled keys checked against the warehouse, by age since the update (1s, 10s, 1m0s), tier (redis, near) and result (consistent, inconsistent, error).",
	}, []string{"age", "tier", "result"})
	m.repairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_consistency_repairs_total",
		Help: "Inconsistent keys read again from the warehouse into the caches, by result (ok: a check after it found the caches consistent; unrepaired: it did not; error).",
	}, []string{"result"})
	m.repairT = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "warmcache_consistency_repair_seconds",
		Help:    "Time from finding a sampled key inconsistent to its repair, as a check after the repair saw it.",
		Buckets: []float64{0.01, 0.1, 0.5, 1, 1.5, 2, 5, 10, 11, 30, 60, 61, 120},
	})
	for _, d := range m.opts.Delays {
		for _, tier := range []string{"redis", "near"} {
			for _, r := range []string{"consistent", "inconsistent", "error"} {
				m.checks.WithLabelValues(d.String(), tier, r)
			}
		}
	}
	for _, r := range []string{"ok", "unrepaired", "error"} {
		m.repairs.WithLabelValues(r)
	}
	if err := promreg.Register(reg, "consistencymon", m.samples, m.dropped, m.checks, m.repairs, m.repairT); err != nil {
		return nil, err
	}
	return m, nil
}

var _ warmcache.Sampler = (*Monitor)(nil)

// Sample implements warmcache.Sampler: it keeps the key for a check at
// each delay, with probability Rate.
func (m *Monitor) Sample(ns *warmcache.Namespace, key warmcache.Key, reason string) {
	if m.opts.Rate < 0 || (m.opts.Rate < 1 && rand.Float64() >= m.opts.Rate) {
		return
	}
	now := m.opts.Now()
	m.mu.Lock()
	if m.pending+len(m.opts.Delays) > m.opts.MaxPending {
		m.mu.Unlock()
		m.dropped.Inc()
		return
	}
	for i, d := range m.opts.Delays {
		m.queues[i] = append(m.queues[i], check{ns: ns.Name, key: key.Text, due: now.Add(d)})
	}
	m.pending += len(m.opts.Delays)
	m.mu.Unlock()
	m.samples.WithLabelValues(reason).Inc()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run checks the sampled keys as they come due, one at a time, until ctx
// ends.
func (m *Monitor) Run(ctx context.Context, a Auditor) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c, delay, wait := m.next()
		if wait == 0 {
			m.check(ctx, a, c, delay)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-timer.C:
		}
	}
}

// next returns the check due first, with its delay, or how long to wait
// for one (an hour when none waits).
func (m *Monitor) next() (check, time.Duration, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	best := -1
	for i, q := range m.queues {
		if len(q) > 0 && (best < 0 || q[0].due.Before(m.queues[best][0].due)) {
			best = i
		}
	}
	if best < 0 {
		return check{}, 0, time.Hour
	}
	c := m.queues[best][0]
	if wait := c.due.Sub(m.opts.Now()); wait > 0 {
		return check{}, 0, wait
	}
	m.queues[best] = m.queues[best][1:]
	m.pending--
	return c, m.opts.Delays[best], 0
}

// check compares one key's caches with the warehouse, counts the result
// for each cache, and repairs an inconsistent key. A key that looks
// inconsistent is read once more before it counts, since a write may have
// come between the warehouse read and the caches'.
func (m *Monitor) check(ctx context.Context, a Auditor, c check, delay time.Duration) {
	age := delay.String()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var au warmcache.Audit
	var err error
	for range 2 {
		au, err = a.Audit(cctx, c.ns, c.key)
		if err != nil || (agrees(au)) {
			break
		}
	}
	if err != nil {
		m.checks.WithLabelValues(age, "redis", "error").Inc()
		return
	}
	bad := false
	for _, t := range []struct {
		tier string
		e    warmcache.Entry
		hit  bool
	}{{"redis", au.Hot, au.HotHit}, {"near", au.Near, au.NearHit}} {
		result := "consistent"
		if !consistent(au.Warm, t.e, t.hit, au.Doubted) {
			result, bad = "inconsistent", true
		}
		if t.tier == "near" && !t.hit {
			continue // no near-cache entry: nothing to count
		}
		m.checks.WithLabelValues(age, t.tier, result).Inc()
	}
	if !bad {
		return
	}
	found := m.opts.Now()
	fk := c.ns + "\x00" + c.key
	m.mu.Lock()
	first := !m.logged[fk]
	if first {
		if len(m.logged) >= m.opts.MaxPending {
			m.logged = map[string]bool{}
		}
		m.logged[fk] = true
	}
	m.mu.Unlock()
	if first {
		m.log.LogAttrs(ctx, slog.LevelWarn, "cache inconsistent with the warehouse",
			slog.String("namespace", c.ns), slog.String("key", c.key), slog.String("age", age),
			slog.Int64("warehouse_version", au.Warm.Version), slog.Bool("warehouse_found", au.Warm.Found),
			slog.Int64("redis_version", au.Hot.Version), slog.Bool("redis_found", au.Hot.Found && au.HotHit),
			slog.Int64("near_version", au.Near.Version), slog.Bool("near_found", au.Near.Found && au.NearHit))
	}
	m.repair(cctx, a, c, found)
}

// repair reads the key from the warehouse into the caches, then audits it
// again: a repair counts as done when that check finds it consistent, and
// its time, from found, when the key was found inconsistent, goes to the
// histogram.
func (m *Monitor) repair(ctx context.Context, a Auditor, c check, found time.Time) {
	if _, err := a.GetLatest(ctx, c.ns, c.key); err != nil && !isNotFound(err) {
		m.repairs.WithLabelValues("error").Inc()
		return
	}
	au, err := a.Audit(ctx, c.ns, c.key)
	switch {
	case err != nil:
		m.repairs.WithLabelValues("error").Inc()
	case agrees(au):
		m.repairs.WithLabelValues("ok").Inc()
		m.repairT.Observe(m.opts.Now().Sub(found).Seconds())
	default:
		m.repairs.WithLabelValues("unrepaired").Inc()
	}
}

// agrees reports whether both caches agree with the warehouse.
func agrees(au warmcache.Audit) bool {
	return consistent(au.Warm, au.Hot, au.HotHit, au.Doubted) && consistent(au.Warm, au.Near, au.NearHit, au.Doubted)
}

// consistent reports whether a cache's entry agrees with the warehouse's,
// read before it: nothing cached, an entry the instance does not serve (in
// doubt), or an entry at the warehouse's version or newer (a write came
// between the reads); an absent entry agrees with an absent row.
func consistent(warm, cached warmcache.Entry, hit, doubted bool) bool {
	switch {
	case !hit || doubted:
		return true
	case !warm.Found && !cached.Found:
		return true
	case !warm.Found:
		// A present entry over a deleted row; or a row written after
		// the warehouse read, which the second read settles.
		return false
	}
	return cached.Version >= warm.Version
}

func isNotFound(err error) bool { return errors.Is(err, warmcache.ErrNotFound) }
