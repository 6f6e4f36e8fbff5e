package warmcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Op is one change of a Transact call, with its key as the client sent it.
type Op struct {
	Key string
	// Value is the upserted value's bytes: JSON text, or any bytes in a
	// LayoutBytes namespace.
	Value []byte
	// Delete makes the op a delete.
	Delete bool
	// IfMatch, when not nil, is the version the row must have.
	IfMatch *int64
	// IfAbsent makes an upsert only create: the key must not exist.
	IfAbsent bool
	// AbsentOK makes the delete of an absent key succeed instead of failing
	// with ErrNotFound.
	AbsentOK bool
	// TTL, when positive, makes the upserted row expire that long after
	// the write commits. Zero means the row never expires.
	TTL time.Duration
}

// Transact applies ops to one namespace atomically, in their order: first
// in the warehouse, in one transaction when there are several, then, once
// committed, in the caches under the version rules. It is the one write
// path: Put and Delete are a Transact of one op. The items follow ops; a
// delete's item is absent (Found false). At most MaxBatchKeys ops go in
// one call. Errors wrap ErrUnknownNamespace, ErrInvalidKey,
// ErrInvalidValue, ErrTooLarge, ErrReadOnly, ErrNotFound,
// ErrVersionMismatch or ErrUnavailable; on error nothing was written.
func (s *Service) Transact(ctx context.Context, namespace string, ops []Op) ([]Item, error) {
	ns, err := s.Namespace(namespace)
	if err != nil {
		return nil, err
	}
	if !ns.Writable {
		return nil, fmt.Errorf("%w: %q", ErrReadOnly, ns.Name)
	}
	switch {
	case len(ops) == 0:
		return nil, nil
	case len(ops) > s.opts.MaxBatchKeys:
		return nil, fmt.Errorf("%w: %d writes in one transaction, at most %d", ErrTooLarge, len(ops), s.opts.MaxBatchKeys)
	}
	writes := make([]Write, len(ops))
	for i, op := range ops {
		key, err := ns.ParseKey(op.Key)
		if err != nil {
			return nil, err
		}
		if !op.Delete {
			if err := checkValue(ns, op.Value, s.opts.MaxValueBytes, s.opts.MaxValueDepth); err != nil {
				return nil, err
			}
			if err := checkTTL(ns, op.TTL); err != nil {
				return nil, err
			}
		}
		writes[i] = Write{Key: key, Value: op.Value, Delete: op.Delete, IfMatch: op.IfMatch,
			IfAbsent: op.IfAbsent && !op.Delete, AbsentOK: op.AbsentOK && op.Delete}
		if !op.Delete {
			writes[i].TTL = op.TTL
		}
	}
	// The keys are in doubt from before the warehouse sees the write until
	// the caches follow it (see doubts): a read meanwhile goes to the
	// warehouse, and shares no warehouse read that began before.
	wkeys := make([]Key, len(writes))
	for i, w := range writes {
		wkeys[i] = w.Key
	}
	// A write that the circuit breaker refuses never reaches the warehouse
	// and puts nothing in doubt. A write of unknown outcome (a deadline, a
	// lost connection) may have committed: its keys stay in doubt until a
	// fill from a warehouse read that began after it lands, since the
	// caches still hold the version before it.
	var entries []Entry
	begun := false
	// The Redis servers met before the write: its update, landing in a
	// server met since, may have landed below a newer write's update that
	// a restart lost (see fillHotMark).
	servers := s.hotServers()
	err = s.warmWrite(ctx, func(ctx context.Context) (err error) {
		s.doubts.begin(ns, wkeys, s.opts.Now())
		begun = true
		entries, err = s.warm.Write(ctx, ns, writes)
		return err
	})
	if begun {
		if err != nil && !refused(err) {
			s.doubts.unknown(ns, wkeys, s.opts.Now())
		}
		defer s.doubts.end(ns, wkeys)
	}
	if err != nil {
		return nil, err
	}
	if len(entries) != len(writes) {
		err = fmt.Errorf("warmcache: the warehouse answered %d of %d writes", len(entries), len(writes))
		return nil, err
	}
	items := make([]Item, len(writes))
	// The caches take each key's last write once: a key written twice in
	// one transaction ends at its later version.
	last := make(map[string]int, len(writes))
	for i, w := range writes {
		items[i] = ns.item(w.Key)
		items[i].Entry, items[i].Source = entries[i], SourceWarm
		last[w.Key.Text] = i
	}
	keys := make([]Key, 0, len(last))
	final := make([]Entry, 0, len(last))
	for i, w := range writes {
		if last[w.Key.Text] == i {
			keys, final = append(keys, w.Key), append(final, entries[i])
		}
	}
	s.written(ctx, ns, keys, final, servers)
	s.outcome(ctx, ns, "write", true)
	var soonest time.Duration
	for _, w := range writes {
		if w.TTL > 0 && (soonest == 0 || w.TTL < soonest) {
			soonest = w.TTL
		}
	}
	if soonest > 0 {
		s.expiryWritten(ns, soonest)
	}
	return items, nil
}

// MaxTTL bounds the TTL of one write: ten years.
const MaxTTL = 10 * 365 * 24 * time.Hour

// checkTTL refuses a TTL that is negative, longer than MaxTTL, or set in a
// namespace whose table has no expiry column, with an error that wraps
// ErrInvalidValue.
func checkTTL(ns *Namespace, ttl time.Duration) error {
	switch {
	case ttl == 0:
		return nil
	case ttl < 0:
		return fmt.Errorf("%w: the TTL %v is negative", ErrInvalidValue, ttl)
	case ttl > MaxTTL:
		return fmt.Errorf("%w: the TTL %v is longer than %v", ErrInvalidValue, ttl, MaxTTL)
	case ns.ExpiresColumn == "":
		return fmt.Errorf("%w: namespace %q has no expiry column, so its items cannot have a TTL", ErrInvalidValue, ns.Name)
	}
	return nil
}

// Put stores value under key: first in the warehouse, then, once committed,
// in the hot tier. ifMatch, when not nil, is the version the row must have.
// Errors wrap ErrUnknownNamespace, ErrInvalidKey, ErrInvalidValue,
// ErrTooLarge, ErrReadOnly, ErrVersionMismatch or ErrUnavailable.
func (s *Service) Put(ctx context.Context, namespace, rawKey string, value []byte, ifMatch *int64) (Item, error) {
	items, err := s.Transact(ctx, namespace, []Op{{Key: rawKey, Value: value, IfMatch: ifMatch}})
	if err != nil {
		return Item{}, err
	}
	return items[0], nil
}

// Delete removes key: first in the warehouse, then, once committed, the hot
// tier records the key as absent at the delete's version. Errors wrap
// ErrNotFound, ErrVersionMismatch and the errors of Put.
func (s *Service) Delete(ctx context.Context, namespace, rawKey string, ifMatch *int64) error {
	_, err := s.Transact(ctx, namespace, []Op{{Key: rawKey, Delete: true, IfMatch: ifMatch}})
	return err
}

// refused reports whether err says a write was not applied: the warehouse
// refused it, so the caches still hold what it holds.
func refused(err error) bool {
	return errors.Is(err, ErrVersionMismatch) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidValue) ||
		errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrReadOnly)
}

// written updates the caches after a committed write, through retire;
// servers is the hot tier's count of servers from before the write.
// Entries at version zero (the delete of a key that was already absent)
// change nothing.
func (s *Service) written(ctx context.Context, ns *Namespace, keys []Key, entries []Entry, servers uint64) {
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
	if err := s.retireFrom(ctx, ns, retireWrite, fills, servers); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "hot tier fill failed",
			slog.String("namespace", ns.Name), slog.String("reason", string(retireWrite)), slog.Any("err", err))
		s.hotFence.Add(1)
		s.repair(ctx, ns, fills)
	}
}

// Repairs of failed hot-tier updates of writes: at most maxRepairs run at
// once, each retrying for repairBudget with a doubling wait from
// repairWait to a second.
const (
	maxRepairs   = 64
	repairBudget = 10 * time.Second
	repairWait   = 50 * time.Millisecond
)

// repair retries, in the background, the hot-tier update of a write that
// failed, so that a value filled by a read that began before the write
// (on a Redis that restarted empty, or over a connection that was killed)
// is replaced by the write's version once the hot tier answers again. The
// retry only replaces (Fill.Replace): it never creates an entry.
// When maxRepairs are under way, the update is given up and logged: the
// entry then lives its TTL.
func (s *Service) repair(ctx context.Context, ns *Namespace, fills []Fill) {
	select {
	case s.repairs <- struct{}{}:
	default:
		s.log.LogAttrs(ctx, slog.LevelWarn, "hot tier update of a write not retried: too many retries under way",
			slog.String("namespace", ns.Name), slog.Int("keys", len(fills)))
		return
	}
	// A retry only replaces what Redis holds, under the version rules, and
	// never creates an entry: where nothing is cached a read goes to the
	// warehouse anyway, while a Redis that restarted empty after a newer
	// write landed would take the retried version for the latest.
	for i := range fills {
		fills[i].Replace = true
	}
	go func() {
		defer func() { <-s.repairs }()
		deadline := time.Now().Add(repairBudget)
		for wait := repairWait; time.Now().Add(wait).Before(deadline); wait = min(2*wait, time.Second) {
			time.Sleep(wait)
			// The count of servers is taken before the doubts are
			// looked at: a newer write that lands after that look, in a
			// Redis that then restarts empty, leaves the retry to land
			// there below it, and the new server met since marks the
			// retry's fill as not trusted.
			servers := s.hotServers()
			// A fill whose doubt another update cleared is dropped: it
			// could land in a Redis restarted since, below that update.
			fills = slices.DeleteFunc(fills, func(f Fill) bool { return !s.doubts.pending(ns, f.Key, f.Entry.Version) })
			if len(fills) == 0 || s.fillHotMark(ctx, ns, "repair", s.opts.HotTimeout, fills, 0, servers) == nil {
				return
			}
		}
	}()
}

// fenced reports whether a write's hot-tier update failed since fence was
// read (hotFence): a read that began before it must not fill the hot
// tier, where it could put back the value the write replaced.
func (s *Service) fenced(fence uint64) bool {
	return s.hotFence.Load() != fence
}

// retireReason says which path changed keys: it names the hot tier's
// write series and chooses the deadline of the hot tier's update.
type retireReason string

const (
	// retireWrite is a write of this instance, acknowledged once the
	// caches follow: the hot tier's update has the hot tier's deadline,
	// and this instance's near cache keeps the written entries.
	retireWrite retireReason = "write"
	// retireChange is a change made outside the service (change capture,
	// polling): its update may take applyTimeout, and fails the Apply
	// that retries it.
	retireChange retireReason = "change"
	// retireInvalidate is an explicit invalidation: this instance's near
	// cache refuses every version of the keys for a while.
	retireInvalidate retireReason = "invalidate"
	// retireLoad is the keys a bulk load changed, read back once it
	// committed.
	retireLoad retireReason = "load"
	// retireExpire is the rows the sweeper deleted once their expiry
	// passed.
	retireExpire retireReason = "expire"
)

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
// invalidations. The near caches are updated even when the hot tier's
// update fails, whose error retire returns.
func (s *Service) retire(ctx context.Context, ns *Namespace, reason retireReason, fills []Fill) error {
	return s.retireFrom(ctx, ns, reason, fills, 0)
}

// retireFrom is retire for changes whose hot-tier update is trusted only
// if the hot tier met no new server since it had met servers (zero: since
// the update went out; see fillHotMark).
func (s *Service) retireFrom(ctx context.Context, ns *Namespace, reason retireReason, fills []Fill, servers uint64) error {
	if len(fills) == 0 {
		return nil
	}
	timeout := s.opts.HotTimeout
	if reason != retireWrite {
		timeout = applyTimeout
	}
	if reason == retireChange {
		// A change from the warehouse's log may be older than a write
		// whose update a restarted Redis lost: it only replaces what is
		// cached, under the version rules, and never creates an entry.
		for i := range fills {
			fills[i].Replace = true
		}
	}
	// Where the invalidations travel with the hot tier's updates, one
	// round trip carries both.
	fill := s.hot.FillMany
	var published error
	fp, together := s.opts.Invalidations.(FillPublisher)
	together = together && ns.NearTTL > 0
	if together {
		fill = func(ctx context.Context, ns *Namespace, fills []Fill) (err error) {
			err, published = fp.FillPublish(ctx, ns, fills)
			return err
		}
	}
	err := s.fillHotBy(ctx, ns, string(reason), timeout, fills, 0, servers, fill)
	if err != nil {
		err = fmt.Errorf("%w: hot tier update of %d keys of %q: %w", ErrUnavailable, len(fills), ns.Name, err)
	}
	if ns.NearTTL <= 0 {
		return err
	}
	if near := s.near(ns); near != nil {
		for _, f := range fills {
			version := f.Entry.Version
			if reason == retireInvalidate {
				// Rows rewritten at their old versions are not refused by
				// versions alone: this instance's near cache caches none
				// of the keys for its MarkTTL.
				version = invalidateAll
			}
			near.Invalidate(ns, f.Key, version)
			if reason == retireWrite && f.Entry.Found {
				s.keepNear(near, ns, f.Key, f.Entry)
			}
		}
	}
	switch {
	case together && published != nil:
		s.log.LogAttrs(ctx, slog.LevelWarn, "near-cache invalidation not published",
			slog.String("namespace", ns.Name), slog.Any("err", published))
	case !together && s.opts.Invalidations != nil:
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

// GetLatest reads one key from the warehouse, the source of truth, past
// the near cache and the hot tier, and then refreshes both with what it
// read. It is a read that sees every write committed before it started,
// including writes that bypass the service, at the cost of a warehouse
// query; it joins no read already in flight. Errors are those of Get.
func (s *Service) GetLatest(ctx context.Context, namespace, rawKey string) (Item, error) {
	ns, key, err := s.key(namespace, rawKey)
	if err != nil {
		return Item{}, err
	}
	fence := s.hotFence.Load()
	servers := s.hotServers()
	entries, err := s.warmRead(ctx, ns, []Key{key})
	if err != nil {
		return Item{}, err
	}
	e := entries[0]
	s.outcome(ctx, ns, string(SourceWarm), e.Found)
	// As a miss's fill (see load): not after a failed update or a new
	// Redis server since the read began.
	if !s.fenced(fence) && !s.newServer(servers) {
		s.fillRead(ctx, ns, "read", s.fills(ns, []Key{key}, []Entry{e}), 0, servers)
	}
	if near := s.near(ns); near != nil {
		s.keepNear(near, ns, key, e)
	}
	if s.pastExpiry(e) {
		e = Entry{} // it expired while it was read
	}
	it := ns.item(key)
	it.Entry, it.Source = e, SourceWarm
	return s.answer(ns, it)
}
