package warmcache

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Expirer is a warm tier that deletes the rows whose expiry (a writer's
// TTL) has passed. Its implementations are safe for concurrent use.
type Expirer interface {
	// DeleteExpired deletes at most limit rows of ns whose expiry has
	// passed, in one transaction, each as a delete of the service would:
	// under the key's write lock, at a new version, seen by change
	// capture. It never deletes a row written again since it expired. It
	// returns the deleted keys with the absent entries of their deletes.
	DeleteExpired(ctx context.Context, ns *Namespace, limit int) ([]Key, []Entry, error)
}

// The sweeper's defaults, also those of the service's flags.
const (
	DefaultSweepInterval = time.Second
	DefaultSweepBatch    = 500
	// DefaultSweepMaxIdle is the longest rest of the sweeper on a
	// namespace where it finds nothing to delete (Options.SweepMaxIdle).
	DefaultSweepMaxIdle = time.Minute
	// maxSweepBatches bounds the batches of one namespace in one round, so
	// that a backlog of expired rows is deleted over several rounds and
	// the other namespaces get their turn.
	maxSweepBatches = 100
	// sweepRest is how much longer than a batch took the sweeper rests
	// before the next one of a backlog: it works at most a tenth of the
	// time, so that a backlog of expired rows does not take the
	// warehouse's time from the lookups
	// (docs/warehouse.md#sweeping-expired-rows-measured).
	sweepRest = 9
)

// sweepMetrics are the sweeper's metrics.
type sweepMetrics struct {
	deleted  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

func newSweepMetrics() sweepMetrics {
	return sweepMetrics{
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_expired_rows_deleted_total",
			Help: "Rows past their expiry (a writer's TTL) that the sweeper deleted, by namespace.",
		}, []string{"namespace"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmcache_sweep_duration_seconds",
			Help:    "Duration of one batch of the expired-row sweeper (one transaction of at most SweepBatch deletes), by namespace.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, []string{"namespace"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_sweep_errors_total",
			Help: "Batches of the expired-row sweeper that failed, by namespace.",
		}, []string{"namespace"}),
	}
}

func (m sweepMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.deleted, m.duration, m.errors}
}

// RunSweeper deletes expired rows until ctx ends. Each writable namespace
// with an expiry column is swept (see Sweep) every SweepInterval while it
// has expired rows; each sweep that finds none doubles its wait, up to
// SweepMaxIdle, so that an idle namespace costs one sweep per
// SweepMaxIdle. A write through this service that sets an expiry wakes
// the sweeper at once: the namespace's wait goes back to SweepInterval,
// and it is also swept when that row expires. Rows given an expiry by
// another instance or behind the service's back are found within
// SweepMaxIdle of their expiry. It returns at once when the warm tier is
// no Expirer, the sweeper is off (a negative SweepInterval) or no
// namespace has an expiry column. Expired rows read as absent before they
// are deleted; the sweeper only reclaims their space. It is meant to run
// in its own goroutine, one per service. When rows are due is read on
// Options.Now; the sweeper waits on real timers for the time that clock
// says is left, never more than SweepMaxIdle, so that a clock stopped or
// set back neither spins it nor puts it to sleep for longer. The length of
// a batch, and so its rest, is taken on the wall clock.
func (s *Service) RunSweeper(ctx context.Context) {
	if _, ok := s.warm.(Expirer); !ok || s.opts.SweepInterval < 0 {
		return
	}
	base, maxIdle := s.opts.SweepInterval, s.opts.SweepMaxIdle
	type state struct {
		name string
		wait time.Duration
		// next is when the namespace is swept again; due, when not zero,
		// when a row written with an expiry expires.
		next, due time.Time
	}
	var states []*state
	now := s.opts.Now()
	for _, name := range s.NamespaceNames() {
		if ns, err := s.Namespace(name); err == nil && ns.ExpiresColumn != "" && ns.Writable {
			states = append(states, &state{name: name, wait: base, next: now.Add(base)})
		}
	}
	if len(states) == 0 {
		return
	}
	timer := time.NewTimer(base)
	defer timer.Stop()
	for {
		wake := states[0].next
		for _, st := range states {
			wake = earliest(wake, st.next, st.due)
		}
		timer.Reset(min(wake.Sub(s.opts.Now()), maxIdle))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.sweep.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		now = s.opts.Now()
		due := s.takeSweepDue()
		for _, st := range states {
			if d, ok := due[st.name]; ok {
				st.wait, st.next, st.due = base, earliest(st.next, now.Add(base)), earliest(st.due, d)
			}
			if now.Before(st.next) && (st.due.IsZero() || now.Before(st.due)) {
				continue
			}
			n, err := s.Sweep(ctx, st.name)
			if err != nil && ctx.Err() == nil {
				s.log.LogAttrs(ctx, slog.LevelWarn, "expired rows not deleted",
					slog.String("namespace", st.name), slog.Any("err", err))
			}
			now = s.opts.Now()
			if !st.due.IsZero() && !now.Before(st.due) {
				st.due = time.Time{}
			}
			if n > 0 {
				st.wait = base
			} else {
				st.wait = min(2*st.wait, maxIdle)
			}
			st.next = now.Add(st.wait)
		}
	}
}

// earliest returns the earliest of the times that are not zero, or zero.
func earliest(times ...time.Time) time.Time {
	var e time.Time
	for _, t := range times {
		if !t.IsZero() && (e.IsZero() || t.Before(e)) {
			e = t
		}
	}
	return e
}

// expiryWritten tells RunSweeper that a write of ns committed a row that
// expires ttl from now (the soonest of the write's), without waiting.
func (s *Service) expiryWritten(ns *Namespace, ttl time.Duration) {
	due := s.opts.Now().Add(ttl)
	s.sweep.mu.Lock()
	if d, ok := s.sweep.due[ns.Name]; !ok || due.Before(d) {
		s.sweep.due[ns.Name] = due
	}
	s.sweep.mu.Unlock()
	select {
	case s.sweep.wake <- struct{}{}:
	default:
	}
}

// takeSweepDue returns the expiries that writes announced since the last
// call, by namespace, and forgets them.
func (s *Service) takeSweepDue() map[string]time.Time {
	s.sweep.mu.Lock()
	defer s.sweep.mu.Unlock()
	if len(s.sweep.due) == 0 {
		return nil
	}
	due := s.sweep.due
	s.sweep.due = make(map[string]time.Time, len(due))
	return due
}

// Sweep deletes the expired rows of one namespace, in batches of at most
// SweepBatch rows, up to a bound per call, and brings the caches up to
// each batch's deletes as to any other delete. It returns how many rows
// it deleted. A namespace without an expiry column, or not writable, is
// left alone. Errors wrap ErrUnknownNamespace, or are the warm tier's.
func (s *Service) Sweep(ctx context.Context, namespace string) (int, error) {
	ns, err := s.Namespace(namespace)
	if err != nil {
		return 0, err
	}
	x, ok := s.warm.(Expirer)
	if !ok || ns.ExpiresColumn == "" || !ns.Writable {
		return 0, nil
	}
	total := 0
	for range maxSweepBatches {
		start := time.Now()
		bctx, cancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
		keys, entries, err := x.DeleteExpired(bctx, ns, s.opts.SweepBatch)
		cancel()
		s.sweep.metrics.duration.WithLabelValues(ns.Name).Observe(time.Since(start).Seconds())
		if err != nil {
			s.sweep.metrics.errors.WithLabelValues(ns.Name).Inc()
			return total, fmt.Errorf("warmcache: sweep %q: %w", ns.Name, err)
		}
		if len(keys) != len(entries) {
			return total, fmt.Errorf("warmcache: sweep %q: the warehouse answered %d entries for %d keys", ns.Name, len(entries), len(keys))
		}
		total += len(keys)
		s.sweep.metrics.deleted.WithLabelValues(ns.Name).Add(float64(len(keys)))
		if len(keys) > 0 {
			if err := s.retire(ctx, ns, updateExpire, s.fills(ns, keys, entries), stamp{}); err != nil {
				s.log.LogAttrs(ctx, slog.LevelWarn, "hot tier update of expired rows failed",
					slog.String("namespace", ns.Name), slog.Any("err", err))
			}
		}
		if len(keys) < s.opts.SweepBatch {
			break
		}
		rest := time.NewTimer(sweepRest * time.Since(start))
		select {
		case <-ctx.Done():
			rest.Stop()
			return total, ctx.Err()
		case <-rest.C:
		}
	}
	return total, nil
}
