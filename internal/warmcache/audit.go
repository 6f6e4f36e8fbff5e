package warmcache

import (
	"context"
	"fmt"
)

// Sampler is told of every cache update that landed in the hot tier (a
// write's, a read's fill, a captured change's, a repair), for an online
// consistency check such as internal/consistencymon. Sample is called on
// the update's path: it must not block. Its implementations are safe for
// concurrent use.
type Sampler interface {
	Sample(ns *Namespace, key Key, reason string)
}

// Audit is what the warehouse and this instance's caches hold for one
// key, read in that order, as an online consistency check compares them.
type Audit struct {
	// Warm is the warehouse's entry, the truth.
	Warm Entry
	// Hot is the hot tier's entry, when HotHit.
	Hot    Entry
	HotHit bool
	// Near is the near cache's entry, when NearHit: one past its row's
	// expiry is not, as a read would not serve it.
	Near    Entry
	NearHit bool
	// Doubted says the key is in doubt (see doubts): the instance serves
	// it from the warehouse, whatever the caches hold.
	Doubted bool
}

// Audit reads key from the warehouse, then from the hot tier and the near
// cache, past the shared reads, and returns what each holds; it changes
// nothing. A cache read after the warehouse can only be newer than it
// by a write that came between. Errors wrap ErrUnknownNamespace,
// ErrInvalidKey or ErrUnavailable.
func (s *Service) Audit(ctx context.Context, namespace, rawKey string) (Audit, error) {
	ns, key, err := s.key(namespace, rawKey)
	if err != nil {
		return Audit{}, err
	}
	entries, err := s.warmRead(ctx, ns, []Key{key})
	if err != nil {
		return Audit{}, err
	}
	a := Audit{Warm: entries[0]}
	hctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
	hot, hits, err := s.hot.GetMany(hctx, ns, []Key{key})
	cancel()
	if err != nil {
		return Audit{}, fmt.Errorf("%w: audit %q: %w", ErrUnavailable, truncate(key.Text), err)
	}
	a.Hot, a.HotHit = hot[0], hits[0]
	if near := s.near(ns); near != nil {
		a.Near, a.NearHit = near.Get(ns, key)
		if a.NearHit && s.pastExpiry(a.Near) {
			a.Near, a.NearHit = Entry{}, false
		}
	}
	a.Doubted = s.trust.doubts.has(ns, key, s.opts.Now())
	return a, nil
}
