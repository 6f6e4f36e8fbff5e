package rediscache

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/promreg"
	"github.com/warmcache/warmcache/internal/warmcache"
)

var (
	_ warmcache.Invalidations = (*Invalidations)(nil)
	_ warmcache.FillPublisher = (*Invalidations)(nil)
)

// Invalidations carries near-cache invalidations between the instances of
// the service over Redis pub/sub, on the channel <prefix>invalidate. Each
// message is "<namespace>\x00<key>\x00<version>": neither a namespace name
// nor a key may hold a NUL byte. PUBLISH reaches every subscriber of a
// Cluster, whichever node it is sent to.
//
// Delivery is at most once: a subscriber that is disconnected misses what was
// published meanwhile, so every (re)subscription is reported to the
// subscriber, which then drops its whole near cache. An instance also
// receives its own messages; they are harmless, since invalidations are
// ordered by version.
//
// An Invalidations is safe for concurrent use.
type Invalidations struct {
	cache   *Cache
	client  redis.UniversalClient
	channel string
	log     *slog.Logger

	published *prometheus.CounterVec
	received  *prometheus.CounterVec
	resyncs   prometheus.Counter
}

// NewInvalidations returns the invalidations of c's Redis, on the channel
// named by c's prefix, and registers their metrics on reg (when reg is not
// nil). A nil log discards. The error reports metrics that cannot be
// registered.
func NewInvalidations(c *Cache, reg prometheus.Registerer, log *slog.Logger) (*Invalidations, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	inv := &Invalidations{
		cache:   c,
		client:  c.client,
		channel: c.prefix + "invalidate",
		log:     log,
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_invalidations_published_total",
			Help: "Near-cache invalidations published to the other instances, by result (ok, error).",
		}, []string{"result"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_invalidations_received_total",
			Help: "Near-cache invalidations received from the instances (this one included), by result (ok, malformed).",
		}, []string{"result"}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmcache_invalidation_resyncs_total",
			Help: "Subscriptions to the invalidation channel, the first and each one after a reconnect; each drops the near cache.",
		}),
	}
	// Every result shows from the start, at zero, so that a rate over it
	// does not wait for the first of its kind.
	for _, result := range []string{"ok", "error"} {
		inv.published.WithLabelValues(result)
	}
	for _, result := range []string{"ok", "malformed"} {
		inv.received.WithLabelValues(result)
	}
	if err := promreg.Register(reg, "rediscache", inv.published, inv.received, inv.resyncs); err != nil {
		return nil, err
	}
	return inv, nil
}

// Channel returns the name of the pub/sub channel.
func (inv *Invalidations) Channel() string { return inv.channel }

// Publish tells every subscribed instance that a write replaced key in ns at
// version. Errors are Redis and context errors, wrapped.
func (inv *Invalidations) Publish(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key, version int64) error {
	return inv.count(key, inv.client.Publish(ctx, inv.channel, message(ns, key, version)).Err())
}

// message is the invalidation of key in ns at version.
func message(ns *warmcache.Namespace, key warmcache.Key, version int64) []byte {
	msg := make([]byte, 0, len(ns.Name)+len(key.Text)+22)
	msg = append(msg, ns.Name...)
	msg = append(msg, 0)
	msg = append(msg, key.Text...)
	msg = append(msg, 0)
	return strconv.AppendInt(msg, version, 10)
}

// count counts the result of publishing key's invalidation and wraps its
// error.
func (inv *Invalidations) count(key warmcache.Key, err error) error {
	if err != nil {
		inv.published.WithLabelValues("error").Inc()
		return fmt.Errorf("rediscache: publish invalidation of %q: %w", key.Text, err)
	}
	inv.published.WithLabelValues("ok").Inc()
	return nil
}

// FillPublish implements warmcache.FillPublisher on the Cache the
// invalidations were made from: fills of keys whose entries the cache
// likely holds (a write's, or a fold of writes') run the fill script and
// publish the keys' invalidations in one pipeline, one round trip where
// FillMany and Publish take two. Other fills are FillMany's, and their
// invalidations go out in one pipeline after it.
func (inv *Invalidations) FillPublish(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) (fillErr, publishErr error) {
	if len(fills) == 0 || slices.ContainsFunc(fills, func(f warmcache.Fill) bool { return !f.Cached && !f.Replace }) {
		fillErr = inv.cache.FillMany(ctx, ns, fills)
		return fillErr, inv.publishMany(ctx, ns, fills)
	}
	c := inv.cache
	fl, err := c.filling(ns, fills)
	if err != nil {
		return err, inv.publishMany(ctx, ns, fills)
	}
	start := time.Now()
	pipe := inv.client.Pipeline()
	all := make([]int, len(fills))
	filled := make([]*redis.Cmd, len(fills))
	pubs := make([]*redis.IntCmd, len(fills))
	for i, f := range fills {
		all[i] = i
		filled[i] = c.script(ctx, pipe, fl, i)
		pubs[i] = pipe.Publish(ctx, inv.channel, message(ns, f.Key, f.Entry.Version))
	}
	_, _ = pipe.Exec(ctx)
	if i, err := c.settle(ctx, fl, all, filled); err != nil {
		fillErr = fmt.Errorf("rediscache: fill %q: %w", fills[i].Key.Text, err)
	}
	op := opFill
	if len(fills) > 1 {
		op = opFillMany
	}
	c.observe(op, start, fillErr)
	for i, cmd := range pubs {
		if err := inv.count(fills[i].Key, cmd.Err()); err != nil && publishErr == nil {
			publishErr = err
		}
	}
	return fillErr, publishErr
}

// publishMany publishes the invalidations of fills in one pipeline and
// returns the first error.
func (inv *Invalidations) publishMany(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) error {
	pipe := inv.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(fills))
	for i, f := range fills {
		cmds[i] = pipe.Publish(ctx, inv.channel, message(ns, f.Key, f.Entry.Version))
	}
	_, _ = pipe.Exec(ctx)
	var first error
	for i, cmd := range cmds {
		if err := inv.count(fills[i].Key, cmd.Err()); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Subscribe listens to the channel until ctx ends. It calls onInvalidate for
// each message, and onResync each time the subscription is confirmed: once
// at the start and once after every reconnect, since messages published
// while the connection was down are lost. Both run on Subscribe's goroutine,
// one at a time, and must not block. While Redis is unreachable Subscribe
// keeps retrying; it returns when ctx ends.
func (inv *Invalidations) Subscribe(ctx context.Context, onInvalidate func(namespace, key string, version int64), onResync func()) {
	sub := inv.client.Subscribe(ctx, inv.channel)
	defer func() {
		if err := sub.Close(); err != nil {
			inv.log.LogAttrs(context.Background(), slog.LevelDebug, "invalidation subscription close", slog.Any("err", err))
		}
	}()
	// go-redis pings an idle subscription every few seconds and reconnects
	// (and resubscribes) when the ping cannot be sent.
	msgs := sub.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(3*time.Second),
		redis.WithChannelSize(1024))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind != "subscribe" {
					continue
				}
				inv.resyncs.Inc()
				inv.log.LogAttrs(ctx, slog.LevelInfo, "subscribed to near-cache invalidations; near cache dropped",
					slog.String("channel", inv.channel))
				onResync()
			case *redis.Message:
				ns, key, version, ok := parseInvalidation(m.Payload)
				if !ok {
					inv.received.WithLabelValues("malformed").Inc()
					inv.log.LogAttrs(ctx, slog.LevelWarn, "malformed near-cache invalidation ignored",
						slog.Int("bytes", len(m.Payload)))
					continue
				}
				inv.received.WithLabelValues("ok").Inc()
				onInvalidate(ns, key, version)
			}
		}
	}
}

// parseInvalidation splits a message into its namespace, key and version.
func parseInvalidation(payload string) (ns, key string, version int64, ok bool) {
	i := strings.IndexByte(payload, 0)
	j := strings.LastIndexByte(payload, 0)
	if i <= 0 || j <= i+1 {
		return "", "", 0, false
	}
	version, err := strconv.ParseInt(payload[j+1:], 10, 64)
	if err != nil {
		return "", "", 0, false
	}
	return payload[:i], payload[i+1 : j], version, true
}
