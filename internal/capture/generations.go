package capture

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/promreg"
	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Generations = (*Generations)(nil)

// GenerationStore reads and bumps the namespace generations in the
// warehouse (the table warmcache_generations).
type GenerationStore interface {
	Generations(ctx context.Context) (map[string]int64, error)
	BumpGeneration(ctx context.Context, name string) (int64, error)
}

// Generations keeps this instance's namespaces at the generations the
// warehouse records. A bump is one UPDATE of one row: every instance reads
// the table every interval (and the change capture sees the UPDATE at once)
// and moves its hot tier's keys to the new generation, which retires every
// entry of the namespace at once, and drops its near cache. Generations is
// safe for concurrent use.
type Generations struct {
	store GenerationStore
	// move moves a namespace to a generation in the hot tier and reports
	// whether it moved; moved is then called, to drop the near cache.
	move  func(name string, gen int64) bool
	moved func(name string)
	names map[string]bool
	log   *slog.Logger

	mu      sync.Mutex
	missing bool // the table was missing at the last read

	gauge *prometheus.GaugeVec
}

// NewGenerations returns the generations of namespaces, kept in store.
// move is the hot tier's SetGeneration; moved, which may be nil, is called
// after each move. It registers its metric on reg.
func NewGenerations(store GenerationStore, namespaces []*warmcache.Namespace, move func(string, int64) bool, moved func(string), reg prometheus.Registerer, log *slog.Logger) (*Generations, error) {
	g := &Generations{store: store, move: move, moved: moved, names: map[string]bool{}, log: log,
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmcache_namespace_generation",
			Help: "The generation each namespace's cached entries are in; a bump retires every entry of the namespace.",
		}, []string{"namespace"}),
	}
	for _, ns := range namespaces {
		g.names[ns.Name] = true
		g.gauge.WithLabelValues(ns.Name).Set(0)
	}
	if err := promreg.Register(reg, "capture", g.gauge); err != nil {
		return nil, err
	}
	return g, nil
}

// Sync reads the generations from the warehouse and moves the namespaces
// that are behind. A missing table (a database not migrated) counts as
// every namespace at generation 0, and is logged once.
func (g *Generations) Sync(ctx context.Context) error {
	gens, err := g.store.Generations(ctx)
	if err != nil {
		if undefinedTable(err) {
			g.mu.Lock()
			first := !g.missing
			g.missing = true
			g.mu.Unlock()
			if first {
				g.log.Warn("capture: the table warmcache_generations is missing (run warmcache migrate up): namespace generations stay at 0")
			}
			return nil
		}
		return fmt.Errorf("capture: read generations: %w", err)
	}
	g.mu.Lock()
	g.missing = false
	g.mu.Unlock()
	for name, gen := range gens {
		g.set(name, gen, "warehouse")
	}
	return nil
}

// set moves the namespace called name to gen if it is one of ours and
// behind.
func (g *Generations) set(name string, gen int64, why string) {
	if !g.names[name] || !g.move(name, gen) {
		return
	}
	g.gauge.WithLabelValues(name).Set(float64(gen))
	if g.moved != nil {
		g.moved(name)
	}
	g.log.Info("capture: namespace moved to a new generation; its cached entries are retired",
		slog.String("namespace", name), slog.Int64("generation", gen), slog.String("by", why))
}

// Bump moves ns to its next generation in the warehouse and on this
// instance; the other instances follow within their sync interval.
func (g *Generations) Bump(ctx context.Context, ns *warmcache.Namespace) error {
	gen, err := g.store.BumpGeneration(ctx, ns.Name)
	if err != nil {
		return err
	}
	g.set(ns.Name, gen, "bump")
	return nil
}

// bumpAll bumps every namespace, for a gap in what the change capture saw.
func (g *Generations) bumpAll(ctx context.Context, reason string) error {
	for name := range g.names {
		gen, err := g.store.BumpGeneration(ctx, name)
		if err != nil {
			return err
		}
		g.set(name, gen, reason)
	}
	return nil
}

// Run syncs every interval until ctx ends.
func (g *Generations) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, max(interval, 2*time.Second))
		if err := g.Sync(sctx); err != nil && ctx.Err() == nil {
			g.log.Warn("capture: generations not read", slog.Any("err", err))
		}
		cancel()
	}
}
