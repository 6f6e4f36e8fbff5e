package gateway

import (
	"context"
	"errors"
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
// the invalidations, and, unless cfg.Near.Tracking is off or Redis is a
// Cluster, to Redis's key tracking, until stop is called; startNear returns
// once both subscriptions are confirmed, or after subscribeWait.
func startNear(cfg config.Config, cache *rediscache.Cache, reg prometheus.Registerer, log *slog.Logger) (nearTier, error) {
	t := nearTier{stop: func() {}}
	used := nearNamespaces(cfg)
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
		MarkTTL:  warmcache.NearMarkTTL(cfg.Tiers.HotTimeout, cfg.Tiers.WarmTimeout),
	}, reg)
	if err != nil {
		return t, err
	}
	t.near = near
	tracking, err := startTracking(cfg, cache, used, reg, log)
	if err != nil {
		return t, err
	}
	t.stop = subscribeNear(near, inv, tracking, log)
	attrs := []any{slog.Int64("bytes", cfg.Near.Bytes), slog.Any("namespaces", used), slog.String("channel", inv.Channel())}
	if tracking != nil {
		attrs = append(attrs, slog.Any("tracking_prefixes", tracking.Prefixes()))
	}
	log.Info("near cache on", attrs...)
	return t, nil
}

// nearNamespaces returns the names of cfg's namespaces that set a near_ttl.
func nearNamespaces(cfg config.Config) []string {
	var used []string
	for _, ns := range cfg.Namespaces {
		if ns.NearTTL > 0 {
			used = append(used, ns.Name)
		}
	}
	return used
}

// startTracking returns Redis's key tracking of the namespaces used, or nil
// when cfg.Near.Tracking is off or Redis is a Cluster, which has none.
func startTracking(cfg config.Config, cache *rediscache.Cache, used []string, reg prometheus.Registerer, log *slog.Logger) (*rediscache.Tracking, error) {
	if cfg.Near.Tracking == "off" {
		return nil, nil
	}
	tracking, err := rediscache.NewTracking(cache, used, reg, log)
	if errors.Is(err, rediscache.ErrTrackingUnsupported) {
		log.Warn("near cache: no Redis key tracking on a Cluster; versioned invalidations and near_ttl keep it coherent")
		return nil, nil
	}
	return tracking, err
}

// subscribeNear subscribes near to the invalidations, and to the key
// tracking when it is not nil, until the returned stop is called. It
// returns once both subscriptions are confirmed, or after subscribeWait,
// when they keep retrying behind.
func subscribeNear(near *nearcache.Cache, inv *rediscache.Invalidations, tracking *rediscache.Tracking, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	invReady, trackReady := make(chan struct{}), make(chan struct{})
	var invOnce, trackOnce sync.Once
	wg.Go(func() {
		inv.Subscribe(ctx, near.InvalidateKey, func() {
			near.Clear()
			invOnce.Do(func() { close(invReady) })
		})
	})
	if tracking != nil {
		wg.Go(func() {
			tracking.Run(ctx, near, func() { trackOnce.Do(func() { close(trackReady) }) })
		})
	} else {
		close(trackReady)
	}
	// Serve only once other instances' writes reach this near cache, or
	// after subscribeWait, when the subscriptions keep retrying behind.
	deadline := time.NewTimer(subscribeWait)
	defer deadline.Stop()
wait:
	for _, ready := range []struct {
		to string
		ch chan struct{}
	}{{"invalidations", invReady}, {"key tracking", trackReady}} {
		select {
		case <-ready.ch:
		case <-deadline.C:
			log.Warn("near cache: not yet subscribed; serving, and retrying in the background",
				slog.String("to", ready.to), slog.Duration("waited", subscribeWait))
			break wait
		}
	}
	return func() {
		cancel()
		wg.Wait()
		if tracking != nil {
			if err := tracking.Close(); err != nil {
				log.Debug("near cache: close key tracking", slog.Any("err", err))
			}
		}
	}
}
