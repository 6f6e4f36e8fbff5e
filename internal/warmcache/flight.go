package warmcache

import (
	"context"
	"sync"
	"sync/atomic"
)

// miss is a key that the hot tier did not answer fresh, to read from the
// warehouse.
type miss struct {
	key Key
	// hotOK is false when the hot tier just failed: the key is then
	// neither read again from it nor filled.
	hotOK bool
	// recheck makes the read look at the hot tier again first, whatever
	// the flight marks say (a revalidation).
	recheck bool
	// cached is true when the hot tier held an entry of the key (expired,
	// or absent and expired): the fill then compares versions at once.
	cached bool
	// stale is the expired entry being revalidated, if any: when the
	// warehouse no longer has the key, the absent entry takes its version
	// so that it replaces it.
	stale Entry
	// doubted says the key is in doubt (see doubts): its read looks at no
	// cache.
	doubted bool
}

// flight is one warehouse read of a key, shared by every miss of the key
// that overlaps it (singleflight). It runs in a batch on a lane of its
// namespace, under the batch's own context, which is cancelled only when
// none of the batch's flights has a caller waiting any more: the first
// caller leaving does not fail the read for the others.
type flight struct {
	miss
	fk   string
	ctx  context.Context // the leader's, for its trace only
	done chan struct{}   // closed when entry and err are set
	// entry and err are the answer, set before done is closed.
	entry Entry
	err   error

	// Guarded by flightGroup.mu.
	// began and quiet are the writes of the key's stripe begun when the
	// batch took the flight, and whether none was under way then (see
	// writeStripes): a new miss shares the flight's read only if it began
	// after the miss did or no write of the key can have come between.
	began    uint64
	quiet    bool
	waiters  int
	batch    *loadBatch // the batch running the flight; nil before
	dropped  bool       // every caller left before a batch took it
	finished bool
}

// loadGroup is the flights that one read leads: they wait for a lane
// together and run in one batch.
type loadGroup struct{ flights []*flight }

// loadBatch is the flights of one warehouse read. live counts those with a
// caller still waiting; when it drops to zero, cancel stops the read.
type loadBatch struct {
	live   int
	cancel context.CancelFunc
}

// flightGroup holds the flights in progress, by namespace and key. It also
// remembers which keys' flights ended lately: a miss whose hot-tier read
// began before a flight of its key ended must look at the hot tier again,
// since that flight's fill may have landed after the read. A flightGroup
// is safe for concurrent use.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flight

	// ended counts the flights that have ended. recent maps the key of
	// each of the last recentKeys flights to end to the count at its end,
	// and recentOrder holds those keys oldest first (a ring from
	// recentHead); forgotten is the highest count dropped from recent.
	ended       atomic.Uint64
	recent      map[string]uint64
	recentOrder []string
	recentHead  int
	forgotten   uint64
}

// recentKeys bounds the ended flights a flightGroup remembers.
const recentKeys = 4096

func flightKey(ns *Namespace, key Key) string { return ns.Name + "\x00" + key.Text }

// mark returns a mark to take before reading the hot tier, for
// endedSince.
func (g *flightGroup) mark() uint64 { return g.ended.Load() }

// endedSince reports whether a flight of key ended after mark was taken,
// or may have: the record of such a flight may have been dropped. g.mu
// must be held.
func (g *flightGroup) endedSince(key string, mark uint64) bool {
	if mark < g.forgotten {
		return true
	}
	return g.recent[key] > mark
}

// share answers misses of ns from the warehouse. Each key joins the
// flight of its key in progress, or leads a new one; the new ones wait for
// a lane of ns together (see batcher), where concurrent reads fold into one
// query and one fill. mark is the flight mark taken before the hot-tier
// read that missed. It returns the entries in the order of misses,
// whether this call led any flight, and the first error; a caller that goes away gets its context's error at
// once, and leaves the flights to the other callers.
func (s *Service) share(ctx context.Context, ns *Namespace, misses []miss, mark uint64) ([]Entry, bool, error) {
	g := &s.flights
	flights := make([]*flight, len(misses))
	var led []*flight
	g.mu.Lock()
	if g.calls == nil {
		g.calls = make(map[string]*flight)
	}
	for i, m := range misses {
		fk := flightKey(ns, m.key)
		f := g.calls[fk]
		if f != nil && f.batch != nil && (!f.quiet || s.doubts.stripes.since(fk, f.began)) {
			// Its warehouse read may have begun before a write of the
			// key that this miss must see: start another.
			f = nil
		}
		if f == nil {
			f = &flight{miss: m, fk: fk, ctx: ctx, done: make(chan struct{})}
			f.recheck = m.hotOK && !m.doubted && (m.recheck || g.endedSince(fk, mark))
			g.calls[fk] = f
			led = append(led, f)
		}
		f.waiters++
		flights[i] = f
	}
	g.mu.Unlock()
	if joined := len(misses) - len(led); joined > 0 {
		s.flightJoin.WithLabelValues(ns.Name).Add(float64(joined))
	}
	if len(led) > 0 {
		s.lanes[ns.Name].warm.submit(&loadGroup{flights: led})
	}
	entries := make([]Entry, len(flights))
	var first error
	for i, f := range flights {
		select {
		case <-f.done:
		case <-ctx.Done():
			g.leave(flights[i:])
			return nil, len(led) > 0, ctx.Err()
		}
		if f.err != nil && first == nil {
			first = f.err
		}
		entries[i] = f.entry
	}
	return entries, len(led) > 0, first
}

// leave records that a caller stopped waiting on flights. A flight that
// nobody waits for any more is dropped if no batch has taken it, and its
// batch is cancelled if no other flight of it has a caller; either way the
// next miss of its key starts a fresh flight instead of joining one that
// nobody needs.
func (g *flightGroup) leave(flights []*flight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range flights {
		if f.finished {
			continue
		}
		f.waiters--
		if f.waiters > 0 {
			continue
		}
		if g.calls[f.fk] == f {
			delete(g.calls, f.fk)
		}
		if f.batch == nil {
			f.dropped = true
			continue
		}
		f.batch.live--
		if f.batch.live == 0 {
			f.batch.cancel()
		}
	}
}

// runLoads runs one batch of ns's flights: it takes those that a caller
// still waits for, loads them under the batch's context, and answers them.
func (s *Service) runLoads(ns *Namespace, groups []*loadGroup) {
	g := &s.flights
	var flights []*flight
	g.mu.Lock()
	for _, grp := range groups {
		for _, f := range grp.flights {
			if !f.dropped {
				flights = append(flights, f)
			}
		}
	}
	if len(flights) == 0 {
		g.mu.Unlock()
		return
	}
	// The batch runs for all its callers: none's cancellation applies,
	// only all of theirs. With a Tracer, it carries its first caller's
	// context values, such as the trace its tier calls belong to.
	parent := context.Background()
	if s.opts.Tracer != nil {
		parent = context.WithoutCancel(flights[0].ctx)
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	b := &loadBatch{live: len(flights), cancel: cancel}
	for _, f := range flights {
		f.batch = b
		f.began, f.quiet = s.doubts.stripes.quiet(f.fk)
	}
	g.mu.Unlock()

	s.loadFlights(ctx, ns, flights)

	g.mu.Lock()
	for _, f := range flights {
		if g.calls[f.fk] == f {
			delete(g.calls, f.fk)
		}
		g.remember(f.fk)
		f.finished = true
		close(f.done)
	}
	g.mu.Unlock()
}

// loadFlights is the body of a batch of flights: it reads the hot tier
// again for the flights that need it (see flightGroup), reads the warehouse
// once for the others, and fills the hot tier once with what it read,
// before the flights answer.
func (s *Service) loadFlights(ctx context.Context, ns *Namespace, flights []*flight) {
	rest := s.recheck(ctx, ns, flights)
	if len(rest) == 0 {
		return
	}
	keys := make([]Key, len(rest))
	for i, f := range rest {
		keys[i] = f.key
	}
	s.batchSQL().Observe(float64(len(keys)))
	fence := s.hotFence.Load()
	readMark := s.doubts.mark()
	servers := s.hotServers()
	entries, err := s.warmRead(ctx, ns, keys)
	if err != nil {
		for _, f := range rest {
			f.err = err
		}
		return
	}
	var fillKeys []Key
	var fillEntries []Entry
	var cached []bool
	for i, f := range rest {
		e := entries[i]
		if !e.Found && f.stale.Found {
			e.Version = f.stale.Version
		}
		f.entry = e
		if !e.Found && e.Version == 0 && f.doubted {
			// The key was in doubt before this read began and is absent
			// now: its absent entry replaces any entry cached at the
			// version in doubt or below, which the fill would otherwise
			// leave in place. After a write of unknown outcome that
			// version is unknown: the key stays in doubt until a write.
			if v := s.doubts.version(ns, f.key); v != unknownVersion {
				e.Version = v
			}
		}
		if f.hotOK {
			fillKeys, fillEntries, cached = append(fillKeys, f.key), append(fillEntries, e), append(cached, f.cached || f.stale.Found)
		}
	}
	// A write whose update failed, or a new Redis server (one restarted
	// empty, which lost a newer write's update), since the read began:
	// what it read may be older than what the hot tier lost.
	if s.fenced(fence) || s.newServer(servers) {
		return
	}
	fills := s.fills(ns, fillKeys, fillEntries)
	for i := range fills {
		fills[i].Cached = cached[i]
	}
	s.fillRead(ctx, ns, "read", fills, readMark+1, servers)
}

// recheck reads the hot tier again for the flights that need it, in one
// round trip, and answers those it finds fresh there. It returns the
// flights left for the warehouse. Only a fill that ended after a miss's
// first read began can have landed since, so most misses skip this round
// trip.
func (s *Service) recheck(ctx context.Context, ns *Namespace, flights []*flight) []*flight {
	var again []*flight
	var keys []Key
	now := s.opts.Now()
	for _, f := range flights {
		if f.recheck && !s.doubts.has(ns, f.key, now) {
			again, keys = append(again, f), append(keys, f.key)
		}
	}
	if len(again) == 0 {
		return flights
	}
	hctx, cancel := context.WithTimeout(ctx, s.opts.HotTimeout)
	entries, hits, err := s.hot.GetMany(hctx, ns, keys)
	cancel()
	found := make(map[*flight]bool, len(again))
	for i, f := range again {
		var e Entry
		hit := false
		if err == nil {
			e, hit = entries[i], hits[i]
		}
		s.countHot(ns, e, hit, err)
		if hit && !s.expired(e) {
			f.entry, found[f] = e, true
		}
	}
	if len(found) == 0 {
		return flights
	}
	rest := make([]*flight, 0, len(flights)-len(found))
	for _, f := range flights {
		if !found[f] {
			rest = append(rest, f)
		}
	}
	return rest
}

// remember records that a flight of key ended. g.mu must be held.
func (g *flightGroup) remember(key string) {
	n := g.ended.Add(1)
	if g.recent == nil {
		g.recent = make(map[string]uint64)
	}
	if _, ok := g.recent[key]; !ok {
		if len(g.recentOrder) < recentKeys {
			g.recentOrder = append(g.recentOrder, key)
		} else {
			old := g.recentOrder[g.recentHead]
			g.forgotten = max(g.forgotten, g.recent[old])
			delete(g.recent, old)
			g.recentOrder[g.recentHead] = key
			g.recentHead = (g.recentHead + 1) % recentKeys
		}
	}
	g.recent[key] = n
}
