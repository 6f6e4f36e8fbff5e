package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/nearcache"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// subscribeWait bounds how long the start waits for the near cache's
// subscription to invalidations.
const subscribeWait = 5 * time.Second

// nearTier is the near cache (L1) of this instance and the invalidations that
// keep the near caches of all instances coherent. Either may be nil.
type nearTier struct {
	near          warmcache.Near
	invalidations warmcache.Invalidations
	stop          func()
}

// startNear builds the near tier that cfg asks for. When a namespace has a
// near_ttl, writes publish invalidations, even when this instance's own near
// cache is off, so that other instances' near caches stay coherent. When
// cfg.Near.Bytes is also set, the near cache is built and subscribed to
// the invalidations until stop is called; startNear returns once the
// subscription is confirmed, or after subscribeWait.
func startNear(cfg config.Config, cache *rediscache.Cache, reg prometheus.Registerer, log *slog.Logger) (nearTier, error) {
	t := nearTier{stop: func() {}}
	var used []string
	for _, ns := range cfg.Namespaces {
		if ns.NearTTL > 0 {
			used = append(used, ns.Name)
		}
	}
	if len(used) == 0 {
		if cfg.Near.Bytes > 0 {
			log.Info("near cache off: no namespace sets near_ttl")
		}
		return t, nil
	}
	inv, err := rediscache.NewInvalidations(cache, reg, log)
	if err != nil {
		return t, err
	}
	t.invalidations = inv
	if cfg.Near.Bytes == 0 {
		log.Info("near cache off (near-cache-bytes is 0); writes still invalidate other instances' near caches",
			slog.Any("namespaces", used))
		return t, nil
	}
	near, err := nearcache.New(nearcache.Options{
		MaxBytes: uint64(cfg.Near.Bytes),
		MarkTTL:  2 * (cfg.Tiers.HotTimeout + cfg.Tiers.WarmTimeout),
	}, reg)
	if err != nil {
		return t, err
	}
	t.near = near
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	subscribed := make(chan struct{})
	var once sync.Once
	wg.Go(func() {
		inv.Subscribe(ctx, near.InvalidateKey, func() {
			near.Clear()
			once.Do(func() { close(subscribed) })
		})
	})
	t.stop = func() { cancel(); wg.Wait() }
	// Serve only once other instances' writes reach this near cache, or
	// after subscribeWait, when the subscription keeps retrying behind.
	select {
	case <-subscribed:
	case <-time.After(subscribeWait):
		log.Warn("near cache: not yet subscribed to invalidations; serving, and retrying in the background",
			slog.Duration("waited", subscribeWait))
	}
	log.Info("near cache on", slog.Int64("bytes", cfg.Near.Bytes), slog.Any("namespaces", used),
		slog.String("channel", inv.Channel()))
	return t, nil
}
