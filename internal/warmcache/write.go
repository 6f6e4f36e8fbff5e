package warmcache

import (
	"context"
	"errors"
	"fmt"
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
// in the warehouse, in one transaction when there are several (a single
// op goes with the single ops of other calls that wait beside it, when
// the warehouse folds them: see Folder), then, once
// committed, in the caches under the version rules. It is the one write
// path: Put and Delete are a Transact of one op. The items follow ops; a
// delete's item is absent (Found false). At most MaxBatchKeys ops go in
// one call. Errors wrap ErrUnknownNamespace, ErrInvalidKey,
// ErrInvalidValue, ErrTooLarge, ErrReadOnly, ErrNotFound,
// ErrVersionMismatch or ErrUnavailable; on error nothing was written.
func (s *Service) Transact(ctx context.Context, namespace string, ops []Op) ([]Item, error) {
	ns, writes, err := s.plan(namespace, ops)
	if err != nil || len(writes) == 0 {
		return nil, err
	}
	if lane := s.lanes[ns.Name].write; lane != nil && len(writes) == 1 {
		it, err := s.fold(ctx, lane, writes[0])
		if err != nil {
			return nil, err
		}
		return []Item{it}, nil
	}
	st := s.stamp()
	entries, end, err := s.commit(ctx, ns, writes)
	defer end()
	if err != nil {
		return nil, err
	}
	items := s.updated(ctx, ns, writes, entries, st)
	s.outcome(ctx, ns, "write", true)
	return items, nil
}

// plan checks ops against their namespace and the service's bounds, and
// returns the warehouse writes they make.
func (s *Service) plan(namespace string, ops []Op) (*Namespace, []Write, error) {
	ns, err := s.Namespace(namespace)
	if err != nil {
		return nil, nil, err
	}
	if !ns.Writable {
		return nil, nil, fmt.Errorf("%w: %q", ErrReadOnly, ns.Name)
	}
	if len(ops) > s.opts.MaxBatchKeys {
		return nil, nil, fmt.Errorf("%w: %d writes in one transaction, at most %d", ErrTooLarge, len(ops), s.opts.MaxBatchKeys)
	}
	writes := make([]Write, len(ops))
	for i, op := range ops {
		key, err := ns.ParseKey(op.Key)
		if err != nil {
			return nil, nil, err
		}
		if !op.Delete {
			if err := checkValue(ns, op.Value, s.opts.MaxValueBytes, s.opts.MaxValueDepth); err != nil {
				return nil, nil, err
			}
			if err := checkTTL(ns, op.TTL); err != nil {
				return nil, nil, err
			}
		}
		writes[i] = Write{Key: key, Value: op.Value, Delete: op.Delete, IfMatch: op.IfMatch,
			IfAbsent: op.IfAbsent && !op.Delete, AbsentOK: op.AbsentOK && op.Delete}
		if !op.Delete {
			writes[i].TTL = op.TTL
		}
	}
	return ns, writes, nil
}

// commit applies writes in the warehouse, in one transaction. The keys are
// in doubt from before the warehouse sees the writes until the caches
// follow them (see doubts): a read meanwhile goes to the warehouse, and
// shares no warehouse read that began before. The caller calls end once
// the caches are updated. A write that the circuit breaker refuses never
// reaches the warehouse and puts nothing in doubt. A write of unknown
// outcome (a deadline, a lost connection) may have committed: its keys
// stay in doubt until a fill from a warehouse read that began after it
// lands, since the caches still hold the version before it.
func (s *Service) commit(ctx context.Context, ns *Namespace, writes []Write) (entries []Entry, end func(), err error) {
	keys := make([]Key, len(writes))
	for i, w := range writes {
		keys[i] = w.Key
	}
	begun := false
	err = s.warmWrite(ctx, func(ctx context.Context) (err error) {
		s.trust.doubts.begin(ns, keys, s.opts.Now())
		begun = true
		entries, err = s.warm.Write(ctx, ns, writes)
		return err
	})
	end = func() {}
	if begun {
		if err != nil && !refused(err) {
			s.trust.doubts.unknown(ns, keys, s.opts.Now())
		}
		end = func() { s.trust.doubts.end(ns, keys) }
	}
	if err == nil && len(entries) != len(writes) {
		err = fmt.Errorf("warmcache: the warehouse answered %d of %d writes", len(entries), len(writes))
	}
	return entries, end, err
}

// updated brings the caches up to committed writes and their entries,
// with st the stamp taken before the writes, and returns the writes'
// items. The caches take each key's last write once: a key written twice
// in one transaction ends at its later version.
func (s *Service) updated(ctx context.Context, ns *Namespace, writes []Write, entries []Entry, st stamp) []Item {
	items := make([]Item, len(writes))
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
	s.written(ctx, ns, keys, final, st)
	var soonest time.Duration
	for _, w := range writes {
		if w.TTL > 0 && (soonest == 0 || w.TTL < soonest) {
			soonest = w.TTL
		}
	}
	if soonest > 0 {
		s.expiryWritten(ns, soonest)
	}
	return items
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
	st := s.stamp()
	entries, err := s.warmRead(ctx, ns, []Key{key})
	if err != nil {
		return Item{}, err
	}
	e := entries[0]
	s.outcome(ctx, ns, string(SourceWarm), e.Found)
	s.fillRead(ctx, ns, s.fills(ns, []Key{key}, []Entry{e}), st) // as a miss's fill
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
