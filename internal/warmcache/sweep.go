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

// RunSweeper deletes expired rows until ctx ends: every SweepInterval, each
// writable namespace with an expiry column is swept in batches of
// SweepBatch rows (see Sweep). It returns at once when the warm tier is no
// Expirer or the sweeper is off (a negative SweepInterval). Expired rows
// read as absent before they are deleted; the sweeper only reclaims their
// space. It is meant to run in its own goroutine, one per service.
func (s *Service) RunSweeper(ctx context.Context) {
	if _, ok := s.warm.(Expirer); !ok || s.opts.SweepInterval < 0 {
		return
	}
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, name := range s.NamespaceNames() {
			if _, err := s.Sweep(ctx, name); err != nil && ctx.Err() == nil {
				s.log.LogAttrs(ctx, slog.LevelWarn, "expired rows not deleted",
					slog.String("namespace", name), slog.Any("err", err))
			}
		}
	}
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
		s.sweeps.duration.WithLabelValues(ns.Name).Observe(time.Since(start).Seconds())
		if err != nil {
			s.sweeps.errors.WithLabelValues(ns.Name).Inc()
			return total, fmt.Errorf("warmcache: sweep %q: %w", ns.Name, err)
		}
		if len(keys) != len(entries) {
			return total, fmt.Errorf("warmcache: sweep %q: the warehouse answered %d entries for %d keys", ns.Name, len(entries), len(keys))
		}
		total += len(keys)
		s.sweeps.deleted.WithLabelValues(ns.Name).Add(float64(len(keys)))
		if len(keys) > 0 {
			if err := s.retire(ctx, ns, retireExpire, s.fills(ns, keys, entries)); err != nil {
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
