package warmcache

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Every update of the caches goes through this file: a read's fill, a
// write's update and its repair, and the changes made outside the service
// (captured, polled, invalidated, loaded, expired), all under the version
// rules of the hot tier's FillMany.

// trust is what the service knows about the caches beyond what they hold:
// the keys it does not trust, the count of failed updates of writes, and
// the retries of those updates.
type trust struct {
	// fence counts the writes whose hot-tier update failed (see stamp).
	fence atomic.Uint64
	// doubts are the keys whose cached entries are not trusted (see
	// doubts).
	doubts *doubts
	// repairs bounds the background retries of failed hot-tier updates
	// of writes (see repair).
	repairs chan struct{}
	// echoes are this instance's latest writes, whose echoes change
	// capture need not apply (see echoes).
	echoes echoes
}

// maxEchoes bounds the writes echoes remembers.
const maxEchoes = 8192

// echoes remembers this instance's latest writes, by namespace, key and
// version, from their commit until their echo (change capture's report of
// the same row at the same version) arrives, so that the echo is not
// applied a second time: the write's own update stores that version (an
// echo only replaces, and the version rules never go back) and tells the
// near caches. A write whose update failed or landed untrusted (the
// restart rule) is forgotten once its update returns, so that an echo
// arriving later applies; one arriving while the update was under way
// was skipped, and the write's repair and its doubt (see doubts) stand in
// for it. An echo forgotten (the oldest go first, past maxEchoes) is only
// applied again, as any change is.
type echoes struct {
	mu    sync.Mutex
	seen  map[echo]struct{}
	order []echo // a ring of the remembered, oldest at next
	next  int
	// wait bounds how long Apply waits for a write under way to tell its
	// version (echoWait; zero: echoWait).
	wait time.Duration
}

type echo struct {
	ns, key string
	version int64
}

// add remembers the writes of ns at their versions.
func (e *echoes) add(ns *Namespace, keys []Key, entries []Entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen == nil {
		e.seen = make(map[echo]struct{}, maxEchoes)
	}
	for i, k := range keys {
		w := echo{ns.Name, k.Text, entries[i].Version}
		if len(e.order) < maxEchoes {
			e.order = append(e.order, w)
		} else {
			delete(e.seen, e.order[e.next])
			e.order[e.next] = w
			e.next = (e.next + 1) % maxEchoes
		}
		e.seen[w] = struct{}{}
	}
}

// forget forgets the writes of ns at their versions.
func (e *echoes) forget(ns *Namespace, keys []Key, entries []Entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, k := range keys {
		delete(e.seen, echo{ns.Name, k.Text, entries[i].Version})
	}
}

// take reports whether key of ns at version is a remembered write, and
// forgets it: a change is its write's echo once.
func (e *echoes) take(ns *Namespace, key Key, version int64) bool {
	w := echo{ns.Name, key.Text, version}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.seen[w]
	delete(e.seen, w)
	return ok
}

// stamp is what a warehouse call's cache update must check once the call
// returned: it is taken before the call (a read or a write) and compared
// with the service's state after it, by Service.since.
//
// The rule it enforces: a Redis that restarted empty may have lost a
// newer write's update. The hot tier orders updates by version, so an
// update can never overwrite a newer one it holds, but it cannot refuse
// an older one when the newer one is gone: after a restart (or a killed
// connection that dropped a write's update) an older value filled there
// would be served as the latest. So:
//   - a read's fill is dropped when, since the read began, a write's
//     update failed (fence) or the hot tier met a new server (servers):
//     what it read may be older than what the hot tier lost;
//   - a read's, a write's or a repair's fill that lands after the hot
//     tier met a new server since the stamp is not trusted: its keys are
//     put in doubt above its version, until a newer version or a later
//     read's fill lands (see doubts.raise);
//   - a fill that lands settles the doubts it answers, and a read's fill
//     also those older than the read (doubts: the doubt sequence);
//   - a change from the warehouse's log, and a write's retry, only
//     replace what is cached (Fill.Replace): they may be older than a
//     write whose update a restart lost, and must not create the entry.
//
// Other files refer to this rule as "the restart rule".
type stamp struct {
	fence   uint64
	doubts  uint64
	servers uint64
}

// stamp returns a stamp to take before a warehouse call.
func (s *Service) stamp() stamp {
	return stamp{fence: s.trust.fence.Load(), doubts: s.trust.doubts.mark(), servers: s.hotServers()}
}

// since reports what changed after st was taken: fenced, a write's
// hot-tier update failed; restarted, the hot tier met a new server (a
// Redis that may have restarted empty). The first server met is none: no
// update can have been lost before it.
func (s *Service) since(st stamp) (fenced, restarted bool) {
	return s.trust.fence.Load() != st.fence, st.servers != 0 && s.hotServers() != st.servers
}

// outdated reports whether what a warehouse read that began at st read may be
// older than what the hot tier lost since (the restart rule): then the
// read does not fill the hot tier.
func (s *Service) outdated(st stamp) bool {
	fenced, restarted := s.since(st)
	return fenced || restarted
}

// serverCounter is a hot tier that counts the server processes it met: a
// new one may be a Redis that restarted empty.
type serverCounter interface{ Servers() uint64 }

// hotServers returns the hot tier's count of server processes met, or zero
// when it does not count them.
func (s *Service) hotServers() uint64 {
	if c, ok := s.hot.(serverCounter); ok {
		return c.Servers()
	}
	return 0
}

// updateReason says which path changes cached keys: it names the hot
// tier's fill series and chooses the update's deadline and trust.
type updateReason string

const (
	// updateRead is a miss's fill from the warehouse.
	updateRead updateReason = "read"
	// updateRepair is the retry of a write's failed update (see repair).
	updateRepair updateReason = "repair"
	// updateWrite is a write of this instance, acknowledged once the
	// caches follow: the hot tier's update has the hot tier's deadline,
	// and this instance's near cache keeps the written entries.
	updateWrite updateReason = "write"
	// updateChange is a change made outside the service (change capture,
	// polling): its update may take applyTimeout, and fails the Apply
	// that retries it.
	updateChange updateReason = "change"
	// updateInvalidate is an explicit invalidation: this instance's near
	// cache refuses every version of the keys for a while.
	updateInvalidate updateReason = "invalidate"
	// updateLoad is the keys a bulk load changed, read back once it
	// committed.
	updateLoad updateReason = "load"
	// updateExpire is the rows the sweeper deleted once their expiry
	// passed.
	updateExpire updateReason = "expire"
)

// stamped reports whether an update of reason comes from a warehouse call
// of this instance that took a stamp: it waits only the hot tier's
// deadline, and it is trusted only if the hot tier met no new server
// since the stamp (the restart rule).
func (r updateReason) stamped() bool {
	return r == updateRead || r == updateRepair || r == updateWrite
}

// fill stores fills in the hot tier in one round trip, to its end even if
// the caller goes away, and counts them under reason. st is the stamp
// taken before the warehouse call the fills come from (the zero stamp for
// changes: their trust does not depend on it). The keys of fills that
// fail, or that landed untrusted (the restart rule), are put in doubt;
// fills that land settle the doubts they answer. With publish, the
// fills' near-cache invalidations travel in the same round trip
// (FillPublisher), and published is the error of publishing them.
func (s *Service) fill(ctx context.Context, ns *Namespace, reason updateReason, fills []Fill, st stamp, publish bool) (published, err error) {
	if len(fills) == 0 {
		return nil, nil
	}
	timeout := applyTimeout
	if reason.stamped() {
		timeout = s.opts.HotTimeout
		if st.servers == 0 {
			st.servers = s.hotServers()
		}
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	if publish {
		err, published = s.opts.Invalidations.(FillPublisher).FillPublish(hctx, ns, fills)
	} else {
		err = s.hot.FillMany(hctx, ns, fills)
	}
	cancel()
	result := "ok"
	now := s.opts.Now()
	_, restarted := s.since(st)
	switch {
	case err != nil:
		result = "error"
		s.trust.doubts.raise(ns, fills, false, now)
	case reason.stamped() && restarted:
		s.trust.doubts.raise(ns, fills, true, now) // the restart rule
	default:
		var readMark uint64
		if reason == updateRead {
			readMark = st.doubts + 1
		}
		s.trust.doubts.settle(ns, fills, readMark)
		if s.opts.Sampler != nil {
			for _, f := range fills {
				s.opts.Sampler.Sample(ns, f.Key, string(reason))
			}
		}
	}
	s.metrics.hotWrites.WithLabelValues(ns.Name, string(reason), result).Add(float64(len(fills)))
	return published, err
}

// fillRead is a warehouse read's fill, begun at st, unless the read may be
// older than what the hot tier lost since (the restart rule). A failure is
// logged, not returned: the warehouse already answered.
func (s *Service) fillRead(ctx context.Context, ns *Namespace, fills []Fill, st stamp) {
	if s.outdated(st) {
		return
	}
	if _, err := s.fill(ctx, ns, updateRead, fills, st, false); err != nil {
		s.logFill(ctx, ns, updateRead, err)
	}
}

func (s *Service) logFill(ctx context.Context, ns *Namespace, reason updateReason, err error) {
	s.log.LogAttrs(ctx, slog.LevelWarn, "hot tier fill failed",
		slog.String("namespace", ns.Name), slog.String("reason", string(reason)), slog.Any("err", err))
}

// written updates the caches after committed writes, through retire; st
// is the stamp taken before the writes. Entries at version zero (the
// delete of a key that was already absent) change nothing. A failed
// update fences the reads under way and is repaired in the background.
func (s *Service) written(ctx context.Context, ns *Namespace, keys []Key, entries []Entry, st stamp) {
	var fk []Key
	var fe []Entry
	for i, e := range entries {
		if e.Version != 0 {
			fk, fe = append(fk, keys[i]), append(fe, e)
		}
	}
	if len(fk) == 0 {
		return
	}
	fills := s.fills(ns, fk, fe)
	for i := range fills {
		fills[i].Cached = true // a write usually replaces a cached key
	}
	// The echoes are remembered before the update: capture may bring them
	// back while it is under way.
	s.trust.echoes.add(ns, fk, fe)
	err := s.retire(ctx, ns, updateWrite, fills, st)
	if _, restarted := s.since(st); err != nil || restarted {
		s.trust.echoes.forget(ns, fk, fe)
	}
	if err != nil {
		s.logFill(ctx, ns, updateWrite, err)
		s.trust.fence.Add(1)
		s.repair(ctx, ns, fills)
	}
}

// Repairs of failed hot-tier updates of writes: at most maxRepairs run at
// once, each retrying for repairBudget on Options.Now with a doubling wait
// from repairWait to a second, and never sleeping more than repairBudget
// in all, however that clock moves.
const (
	maxRepairs   = 64
	repairBudget = 10 * time.Second
	repairWait   = 50 * time.Millisecond
)

// repair retries, in the background, the hot-tier update of a write that
// failed, so that a value filled by a read that began before the write
// is replaced by the write's version once the hot tier answers again. The
// retry only replaces (the restart rule). When maxRepairs are under way,
// the update is given up and logged: the entry then lives its TTL.
func (s *Service) repair(ctx context.Context, ns *Namespace, fills []Fill) {
	select {
	case s.trust.repairs <- struct{}{}:
	default:
		s.log.LogAttrs(ctx, slog.LevelWarn, "hot tier update of a write not retried: too many retries under way",
			slog.String("namespace", ns.Name), slog.Int("keys", len(fills)))
		return
	}
	for i := range fills {
		fills[i].Replace = true
	}
	go func() {
		defer func() { <-s.trust.repairs }()
		deadline := s.opts.Now().Add(repairBudget)
		slept := time.Duration(0)
		for wait := repairWait; slept+wait < repairBudget && s.opts.Now().Add(wait).Before(deadline); wait = min(2*wait, time.Second) {
			time.Sleep(wait)
			slept += wait
			// The stamp is taken before the doubts are looked at, and a
			// fill whose doubt another update cleared is dropped (the
			// restart rule).
			st := s.stamp()
			fills = slices.DeleteFunc(fills, func(f Fill) bool { return !s.trust.doubts.pending(ns, f.Key, f.Entry.Version) })
			if len(fills) == 0 {
				return
			}
			if _, err := s.fill(ctx, ns, updateRepair, fills, st, false); err == nil {
				return
			}
		}
	}()
}

// invalidateAll is the version of the near-cache mark of an explicit
// invalidation, above any version a row can have.
const invalidateAll = 1 << 62

// retire brings every cache up to committed changes, under one rule: the
// hot tier takes each fill unless it holds a newer version (FillMany's
// rules); this instance's near cache drops what is older than each
// version and leaves a mark there that refuses older versions (and, for
// this instance's own write, keeps the written entry); and the other
// instances are told to do the same. A read's fill is the only other way
// into the caches, under the same version rules. Every path that changes
// keys goes through retire: writes, captured and polled changes, explicit
// invalidations. st is the stamp taken before a write (the zero stamp
// otherwise). The near caches are updated even when the hot tier's update
// fails, whose error retire returns.
func (s *Service) retire(ctx context.Context, ns *Namespace, reason updateReason, fills []Fill, st stamp) error {
	if len(fills) == 0 {
		return nil
	}
	if reason == updateChange {
		for i := range fills {
			fills[i].Replace = true // the restart rule
		}
	}
	// Where the invalidations travel with the hot tier's updates, one
	// round trip carries both.
	_, together := s.opts.Invalidations.(FillPublisher)
	together = together && ns.NearTTL > 0
	published, err := s.fill(ctx, ns, reason, fills, st, together)
	if err != nil {
		err = fmt.Errorf("%w: hot tier update of %d keys of %q: %w", ErrUnavailable, len(fills), ns.Name, err)
	}
	if ns.NearTTL <= 0 {
		return err
	}
	if near := s.near(ns); near != nil {
		for _, f := range fills {
			version := f.Entry.Version
			if reason == updateInvalidate {
				// Rows rewritten at their old versions are not refused by
				// versions alone: this instance's near cache caches none
				// of the keys for its MarkTTL.
				version = invalidateAll
			}
			near.Invalidate(ns, f.Key, version)
			if reason == updateWrite && f.Entry.Found {
				s.keepNear(near, ns, f.Key, f.Entry)
			}
		}
	}
	switch {
	case together && published != nil:
		s.log.LogAttrs(ctx, slog.LevelWarn, "near-cache invalidation not published",
			slog.String("namespace", ns.Name), slog.Any("err", published))
	case !together && s.opts.Invalidations != nil:
		timeout := applyTimeout
		if reason.stamped() {
			timeout = s.opts.HotTimeout
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		for _, f := range fills {
			if perr := s.opts.Invalidations.Publish(pctx, ns, f.Key, f.Entry.Version); perr != nil {
				s.log.LogAttrs(ctx, slog.LevelWarn, "near-cache invalidation not published",
					slog.String("namespace", ns.Name), slog.Any("err", perr))
				break
			}
		}
	}
	return err
}
