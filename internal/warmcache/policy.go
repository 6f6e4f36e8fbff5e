package warmcache

import (
	"math/rand/v2"
	"time"
)

// The lifetimes of hot-tier entries when a namespace sets none.
const (
	defaultTTL         = 5 * time.Minute
	defaultNegativeTTL = 30 * time.Second
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
		negative = defaultNegativeTTL
	}
	var base, floor time.Duration
	switch {
	case e.Found:
		base = ns.TTL
		if base <= 0 {
			base = defaultTTL
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

// NearLifetime returns how long a near cache keeps e when the namespace's
// near-cache lifetime is nearTTL: nearTTL, bounded by the entry's expiry
// (a TTL the writer set) measured from now. A result of zero or less means
// the entry must not be cached.
func NearLifetime(e Entry, nearTTL time.Duration, now time.Time) time.Duration {
	if e.Found && !e.ExpiresAt.IsZero() {
		return min(nearTTL, e.ExpiresAt.Sub(now))
	}
	return nearTTL
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

// near returns the near cache if ns uses one.
func (s *Service) near(ns *Namespace) Near {
	if s.opts.Near == nil || ns.NearTTL <= 0 {
		return nil
	}
	return s.opts.Near
}
