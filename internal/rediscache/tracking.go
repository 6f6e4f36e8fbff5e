package rediscache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/warmcache/warmcache/internal/promreg"
)

// trackingChannel is the channel on which Redis delivers key-tracking
// invalidations to a RESP2 connection that redirects them to itself.
const trackingChannel = "__redis__:invalidate"

// Health checks and reconnection of the tracking connection.
const (
	// trackingHealthCheck is how long the connection may stay silent
	// before a PING checks it; a second silence as long ends it.
	trackingHealthCheck = 3 * time.Second
	// trackingMinBackoff and trackingMaxBackoff bound the wait between
	// two attempts to connect, which doubles while they fail.
	trackingMinBackoff = 100 * time.Millisecond
	trackingMaxBackoff = 5 * time.Second
)

// ErrTrackingUnsupported is returned by NewTracking for a Redis Cluster:
// key tracking is per node, and the tracking connection talks to one.
var ErrTrackingUnsupported = errors.New("rediscache: key tracking is not supported on a Redis Cluster")

// Dropper is what key tracking keeps coherent: the near cache
// (nearcache.Cache). Its methods must not block.
type Dropper interface {
	// Drop drops key in namespace, whatever its version.
	Drop(namespace, key string)
	// Clear drops everything.
	Clear()
}

// Tracking is Redis's server-assisted client-side caching (CLIENT TRACKING)
// as a second coherence path for the near cache, beside the versioned
// invalidations of Invalidations: Redis reports every change of a key of
// the tracked namespaces, whoever made it (an instance's write or fill, an
// operator's SET or DEL, an expiry, an eviction), and the near cache drops
// the key. A report carries the key's name only, so the drop is
// unconditional, which is always safe.
//
// Tracking runs in broadcasting mode (BCAST) on one dedicated connection
// per instance, speaking RESP2, that redirects the reports to itself and
// subscribes to __redis__:invalidate; its prefixes are
// <prefix><namespace>: and <prefix><namespace>@ of each tracked
// namespace, so every generation of a namespace is covered and no other
// key is reported. Broadcasting costs Redis nothing per read, keeps no
// table of the keys each connection read, and does not depend on which
// pooled connection read a key; each instance is told of every change
// under the prefixes instead, fills included (docs/redis.md weighs it).
//
// A null report (FLUSHDB, FLUSHALL) drops the whole near cache, and so
// does every (re)subscription: reports sent while the connection was down
// are lost. The reports are applied as they are read, one message at a
// time; what Redis has not sent yet waits in its output buffer for the
// connection, which Redis bounds (client-output-buffer-limit pubsub) by
// closing the connection, after which the near cache is dropped.
//
// Standalone and Sentinel only: see ErrTrackingUnsupported. A Tracking is
// safe for concurrent use.
type Tracking struct {
	client     *redis.Client
	prefix     string
	namespaces map[string]bool
	prefixes   []string
	log        *slog.Logger
	clientID   atomic.Int64

	keys      prometheus.Counter
	flushes   prometheus.Counter
	resyncs   prometheus.Counter
	connected prometheus.Gauge
}

// NewTracking returns the key tracking of the namespaces named in
// namespaces, over a connection of its own to c's Redis (the current
// master, with Sentinel), and registers its metrics on reg (when reg is
// not nil). It does not contact Redis; Run does. A nil log discards. The
// error is ErrTrackingUnsupported for a Cluster, or reports metrics that
// cannot be registered.
func NewTracking(c *Cache, namespaces []string, reg prometheus.Registerer, log *slog.Logger) (*Tracking, error) {
	base, ok := c.client.(*redis.Client)
	if !ok {
		return nil, ErrTrackingUnsupported
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tracking{
		prefix:     c.prefix,
		namespaces: make(map[string]bool, len(namespaces)),
		log:        log,
		keys: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmcache_redis_tracking_keys_total",
			Help: "Keys that Redis's key tracking reported changed under the near-cache namespaces (writes and fills of any client, expiries, evictions); each was dropped from the near cache.",
		}),
		flushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmcache_redis_tracking_flushes_total",
			Help: "Reports of Redis's key tracking that named no key (FLUSHDB, FLUSHALL); each dropped the whole near cache.",
		}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmcache_redis_tracking_resyncs_total",
			Help: "Subscriptions to Redis's key tracking, the first and each one after a reconnect; each dropped the whole near cache.",
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warmcache_redis_tracking_connected",
			Help: "1 while the connection that receives Redis's key tracking reports is subscribed, 0 otherwise.",
		}),
	}
	for _, ns := range namespaces {
		if !t.namespaces[ns] {
			t.namespaces[ns] = true
			t.prefixes = append(t.prefixes, c.prefix+ns+":", c.prefix+ns+"@")
		}
	}
	slices.Sort(t.prefixes)
	if reg != nil {
		if err := promreg.Register(reg, "rediscache", t.keys, t.flushes, t.resyncs, t.connected); err != nil {
			return nil, err
		}
	}
	o := base.Options()
	t.client = redis.NewClient(&redis.Options{
		Network: o.Network,
		Addr:    o.Addr,
		// With Sentinel, the dialer finds the current master.
		Dialer:       o.Dialer,
		Username:     o.Username,
		Password:     o.Password,
		DB:           o.DB,
		TLSConfig:    o.TLSConfig,
		DialTimeout:  o.DialTimeout,
		ReadTimeout:  o.ReadTimeout,
		WriteTimeout: o.WriteTimeout,
		ClientName:   "warmcache-tracking",
		// RESP2: the reports arrive as messages of a subscription, which
		// go-redis's PubSub reads; under RESP3 they would be push
		// messages on a connection go-redis reads only for replies.
		Protocol:                 2,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		ContextTimeoutEnabled:    true,
		OnConnect:                t.onConnect,
	})
	return t, nil
}

// Prefixes returns the key prefixes that Redis reports changes under.
func (t *Tracking) Prefixes() []string { return slices.Clone(t.prefixes) }

// Close closes the tracking connection. Run must have returned.
func (t *Tracking) Close() error {
	if err := t.client.Close(); err != nil {
		return fmt.Errorf("rediscache: close tracking: %w", err)
	}
	return nil
}

// onConnect turns tracking on for each new connection, broadcasting the
// changes under the prefixes to the connection itself, before it
// subscribes to them.
func (t *Tracking) onConnect(ctx context.Context, cn *redis.Conn) error {
	id, err := cn.ClientID(ctx).Result()
	if err != nil {
		return fmt.Errorf("rediscache: tracking: client id: %w", err)
	}
	args := make([]any, 0, 6+2*len(t.prefixes))
	args = append(args, "client", "tracking", "on", "redirect", id, "bcast")
	for _, p := range t.prefixes {
		args = append(args, "prefix", p)
	}
	if err := cn.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("rediscache: client tracking on: %w", err)
	}
	t.clientID.Store(id)
	return nil
}

// Run receives Redis's reports until ctx ends, and applies them to near:
// Drop for each key of a tracked namespace, Clear for a flush, for each
// (re)subscription, and when the connection is lost. It calls subscribed
// after each subscription's Clear, once the reports flow. All calls run
// on Run's goroutine, one at a time, and must not block. While Redis is
// unreachable Run keeps retrying; it returns when ctx ends.
func (t *Tracking) Run(ctx context.Context, near Dropper, subscribed func()) {
	wait := trackingMinBackoff
	failing := false
	for {
		ok, err := t.session(ctx, near, subscribed)
		t.connected.Set(0)
		if ctx.Err() != nil {
			return
		}
		// Reports sent while nothing listens are lost.
		near.Clear()
		if ok {
			wait, failing = trackingMinBackoff, false
		}
		level := slog.LevelWarn
		if failing {
			level = slog.LevelDebug
		}
		t.log.LogAttrs(ctx, level, "near-cache key tracking lost; near cache dropped, reconnecting",
			slog.Any("err", err), slog.Duration("retry_in", wait))
		failing = true
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !ok {
			wait = min(2*wait, trackingMaxBackoff)
		}
	}
}

// session subscribes on a new connection and applies the reports until
// the connection fails or ctx ends. ok reports whether it subscribed.
func (t *Tracking) session(ctx context.Context, near Dropper, subscribed func()) (ok bool, err error) {
	sub := t.client.Subscribe(ctx, trackingChannel)
	defer func() {
		if err := sub.Close(); err != nil {
			t.log.LogAttrs(context.Background(), slog.LevelDebug, "tracking subscription close", slog.Any("err", err))
		}
	}()
	// Closing the subscription ends a Receive that waits.
	stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
	defer stop()
	pinged := false
	for {
		msg, err := sub.ReceiveTimeout(ctx, trackingHealthCheck)
		if err != nil {
			if ctx.Err() != nil {
				return ok, nil
			}
			if timeout(err) {
				if pinged {
					return ok, errors.New("rediscache: tracking: no answer to a ping")
				}
				if err := sub.Ping(ctx); err != nil {
					return ok, err
				}
				pinged = true
				continue
			}
			if connectionLost(err) {
				return ok, err
			}
			// A message go-redis cannot read. Redis sends one, a
			// null in place of the keys, when it was flushed. A
			// ping tells that from a connection that broke.
			if err := sub.Ping(ctx); err != nil {
				return ok, err
			}
			pinged = true
			t.flushes.Inc()
			near.Clear()
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				return ok, fmt.Errorf("rediscache: tracking: unexpected %s", m.Kind)
			}
			// go-redis also resubscribes by itself after a reconnect.
			t.resyncs.Inc()
			t.connected.Set(1)
			near.Clear()
			if !ok {
				t.log.LogAttrs(ctx, slog.LevelInfo, "near-cache key tracking on; near cache dropped",
					slog.Any("prefixes", t.prefixes), slog.Int64("client_id", t.clientID.Load()))
			}
			ok = true
			subscribed()
		case *redis.Message:
			if m.Channel != trackingChannel {
				continue
			}
			if m.PayloadSlice == nil {
				t.drop(near, m.Payload)
			}
			for _, rk := range m.PayloadSlice {
				t.drop(near, rk)
			}
		}
	}
}

// drop drops the near entry of the Redis key rk, when rk is a key of a
// tracked namespace.
func (t *Tracking) drop(near Dropper, rk string) {
	ns, key, ok := t.parseKey(rk)
	if !ok {
		return
	}
	t.keys.Inc()
	near.Drop(ns, key)
}

// parseKey splits a Redis key, <prefix><namespace>:<key> or
// <prefix><namespace>@<generation>:<key>, into its namespace and key, and
// reports whether the namespace is tracked. A namespace's name holds
// neither ':' nor '@'.
func (t *Tracking) parseKey(rk string) (ns, key string, ok bool) {
	rest, ok := strings.CutPrefix(rk, t.prefix)
	if !ok {
		return "", "", false
	}
	i := strings.IndexAny(rest, ":@")
	if i <= 0 || !t.namespaces[rest[:i]] {
		return "", "", false
	}
	ns, rest = rest[:i], rest[i:]
	if rest[0] == '@' {
		j := strings.IndexByte(rest, ':')
		if j < 0 {
			return "", "", false
		}
		rest = rest[j:]
	}
	return ns, rest[1:], true
}

// timeout reports whether err is a read deadline that passed.
func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// connectionLost reports whether err ends the connection: a network error,
// the end of the stream, a closed client, or an error reply (to the
// commands that set the connection up).
func connectionLost(err error) bool {
	var ne net.Error
	var re redis.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.As(err, &re)
}
