package warmcache

import (
	"context"
	"fmt"
)

// Op is one change of a Transact call, with its key as the client sent it.
type Op struct {
	Key string
	// Value is the JSON value of an upsert.
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
		}
		writes[i] = Write{Key: key, Value: op.Value, Delete: op.Delete, IfMatch: op.IfMatch,
			IfAbsent: op.IfAbsent && !op.Delete, AbsentOK: op.AbsentOK && op.Delete}
	}
	var entries []Entry
	err = s.warmWrite(ctx, func(ctx context.Context) (err error) {
		entries, err = s.warm.Write(ctx, ns, writes)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(entries) != len(writes) {
		return nil, fmt.Errorf("warmcache: the warehouse answered %d of %d writes", len(entries), len(writes))
	}
	items := make([]Item, len(writes))
	// The caches take each key's last write once: a key written twice in
	// one transaction ends at its later version.
	last := make(map[string]int, len(writes))
	for i, w := range writes {
		items[i] = Item{Key: w.Key, Entry: entries[i], Source: SourceWarm}
		last[w.Key.Text] = i
	}
	keys := make([]Key, 0, len(last))
	final := make([]Entry, 0, len(last))
	for i, w := range writes {
		if last[w.Key.Text] == i {
			keys, final = append(keys, w.Key), append(final, entries[i])
		}
	}
	s.written(ctx, ns, keys, final)
	s.outcome(ctx, ns, "write", true)
	return items, nil
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
	entries, err := s.warmRead(ctx, ns, []Key{key})
	if err != nil {
		return Item{}, err
	}
	e := entries[0]
	s.outcome(ctx, ns, string(SourceWarm), e.Found)
	s.fill(ctx, ns, "read", []Key{key}, []Entry{e})
	if near := s.near(ns); near != nil {
		near.Set(ns, key, e)
	}
	return s.answer(ns, Item{Key: key, Entry: e, Source: SourceWarm})
}
