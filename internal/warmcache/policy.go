package warmcache

import (
	"math/rand/v2"
	"time"
)

// The namespace defaults. A Namespace whose TTL or NegativeTTL is zero
// gets DefaultTTL or DefaultNegativeTTL. A namespace declared without
// max_stale or ttl_jitter (see config.ParseNamespaces) gets DefaultMaxStale
// and DefaultTTLJitter; in a Namespace, zero means none.
const (
	DefaultTTL         = 5 * time.Minute
	DefaultNegativeTTL = 30 * time.Second
	DefaultMaxStale    = time.Minute
	DefaultTTLJitter   = 0.1
)

// fresh returns how long e stays fresh in the hot tier of ns: the
// namespace's TTL for a present entry, its NegativeTTL for the absent entry
// of a read (version zero), and the larger of that and TombstoneTTL for the
// absent entry of a delete. Each is multiplied by a random factor in
// [1-TTLJitter, 1+TTLJitter], and a delete's entry still lives at least
// TombstoneTTL, so that a slow reader holding an older version cannot
// refill the key after the delete. The result is at least a millisecond.
func (s *Service) fresh(ns *Namespace, e Entry) time.Duration {
	negative := ns.NegativeTTL
	if negative <= 0 {
		negative = DefaultNegativeTTL
	}
	var base, floor time.Duration
	switch {
	case e.Found:
		base = ns.TTL
		if base <= 0 {
			base = DefaultTTL
		}
	case e.Version == 0:
		base = negative
	default:
		base = max(negative, s.opts.TombstoneTTL)
		floor = s.opts.TombstoneTTL
	}
	d := base
	if j := min(ns.TTLJitter, 1); j > 0 {
		d = time.Duration(float64(base) * (1 - j + 2*j*rand.Float64()))
	}
	return max(d, floor, time.Millisecond)
}

// fills returns the hot-tier fills of entries: each fresh for its
// jittered lifetime from now, and kept the namespace's MaxStale longer when
// present, so that it can be served stale while it revalidates or while
// the warehouse is down.
func (s *Service) fills(ns *Namespace, keys []Key, entries []Entry) []Fill {
	now := s.opts.Now()
	out := make([]Fill, len(keys))
	for i, e := range entries {
		d := s.fresh(ns, e)
		e.FreshUntil = now.Add(d)
		keep := d
		if e.Found && ns.MaxStale > 0 {
			keep += ns.MaxStale
		}
		if e.Found && !e.ExpiresAt.IsZero() {
			// An item with a TTL is never kept, nor fresh, past its
			// expiry; one that expired already is kept a millisecond,
			// and reads treat it as absent (see pastExpiry).
			keep = max(min(keep, e.ExpiresAt.Sub(now)), time.Millisecond)
			if e.ExpiresAt.Before(e.FreshUntil) {
				e.FreshUntil = e.ExpiresAt
			}
		}
		out[i] = Fill{Key: keys[i], Entry: e, Keep: keep}
	}
	return out
}

// expired reports whether a cached entry is past its freshness, or past
// its expiry.
func (s *Service) expired(e Entry) bool {
	return (!e.FreshUntil.IsZero() && s.opts.Now().After(e.FreshUntil)) || s.pastExpiry(e)
}

// pastExpiry reports whether e is a present entry whose row has expired
// (its writer's TTL has run out): it then reads as absent on every tier,
// even before the sweeper deletes the row.
func (s *Service) pastExpiry(e Entry) bool {
	return e.Found && !e.ExpiresAt.IsZero() && !s.opts.Now().Before(e.ExpiresAt)
}

// servableStale reports whether an expired entry may still be served: it is
// present, within the namespace's MaxStale of its freshness, and not past
// its row's expiry.
func (s *Service) servableStale(ns *Namespace, e Entry) bool {
	return e.Found && !s.pastExpiry(e) && !s.opts.Now().After(e.FreshUntil.Add(ns.MaxStale))
}

// nearLife returns how long the near cache keeps e of ns: the namespace's
// NearTTL, cut short at e's FreshUntil when that comes first, so that the
// near cache never serves an entry the hot tier holds as expired, and at
// its row's expiry (a TTL the writer set). Zero or less means not at all.
func (s *Service) nearLife(ns *Namespace, e Entry) time.Duration {
	d := ns.NearTTL
	now := s.opts.Now()
	if !e.FreshUntil.IsZero() {
		d = min(d, e.FreshUntil.Sub(now))
	}
	if e.Found && !e.ExpiresAt.IsZero() {
		d = min(d, e.ExpiresAt.Sub(now))
	}
	return d
}

// NearMarkTTL returns how long a near cache remembers an invalidation
// (nearcache's MarkTTL) in a service with these tier deadlines: twice the
// longest read, a hot-tier miss followed by a warehouse read, so that a
// read which began before a write cannot cache the replaced version when
// it ends.
func NearMarkTTL(hotTimeout, warmTimeout time.Duration) time.Duration {
	return 2 * (hotTimeout + warmTimeout)
}

// keepNear stores e for key in near for its nearLife, when that is
// positive.
func (s *Service) keepNear(near Near, ns *Namespace, key Key, e Entry) {
	if d := s.nearLife(ns, e); d > 0 {
		near.Set(ns, key, e, d)
	}
}

// near returns the near cache if ns uses one.
func (s *Service) near(ns *Namespace) Near {
	if s.opts.Near == nil || ns.NearTTL <= 0 {
		return nil
	}
	return s.opts.Near
}
