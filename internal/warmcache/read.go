package warmcache

import (
	"context"
	"fmt"
	"log/slog"
)

// Source says which tier answered a read. Its text is the X-Cache header.
type Source string

// The sources of a read.
const (
	SourceNear  Source = "hit-l1" // the in-process near cache held the entry
	SourceHot   Source = "hit"    // the hot tier held the entry
	SourceWarm  Source = "miss"   // the warehouse answered and the hot tier was filled
	SourceStale Source = "stale"  // the hot tier held an expired entry, served within MaxStale
)

// Item is the answer for one key.
type Item struct {
	Key    Key
	Entry  Entry
	Source Source
	// MediaType is the media type of the namespace's values
	// (Namespace.MediaType), and Opaque says that they are opaque bytes
	// (Namespace.Opaque): what a transport answers with, from the
	// namespace the core resolved.
	MediaType string
	Opaque    bool
}

// item returns the answer for key of ns, its entry yet to be read.
func (ns *Namespace) item(key Key) Item {
	return Item{Key: key, MediaType: ns.MediaType(), Opaque: ns.Opaque()}
}

// Get reads one key. An absent key returns an Item with Found false and an
// error that wraps ErrNotFound. Other errors wrap ErrUnknownNamespace,
// ErrInvalidKey, ErrUnavailable or ErrOverloaded.
//
// An entry past its freshness but within the namespace's MaxStale is served
// at once, marked SourceStale, while one background read revalidates it; so
// it is also served while the warehouse is down.
func (s *Service) Get(ctx context.Context, namespace, rawKey string) (Item, error) {
	ns, key, err := s.key(namespace, rawKey)
	if err != nil {
		return Item{}, err
	}
	items := []Item{ns.item(key)}
	if err := s.read(ctx, ns, items, 0); err != nil {
		return Item{}, err
	}
	s.outcome(ctx, ns, string(items[0].Source), items[0].Entry.Found)
	return s.answer(ns, items[0])
}

// MGet reads several keys, as Get does each. The items follow the order of
// the distinct keys in rawKeys; absent keys have Found false. Errors wrap
// ErrUnknownNamespace, ErrInvalidKey, ErrTooLarge (more than MaxBatchKeys
// keys, or values over MaxResponseBytes), ErrUnavailable or ErrOverloaded.
func (s *Service) MGet(ctx context.Context, namespace string, rawKeys []string) ([]Item, error) {
	ns, err := s.Namespace(namespace)
	if err != nil {
		return nil, err
	}
	if len(rawKeys) > s.opts.MaxBatchKeys {
		return nil, fmt.Errorf("%w: %d keys in one request, at most %d", ErrTooLarge, len(rawKeys), s.opts.MaxBatchKeys)
	}
	items := make([]Item, 0, len(rawKeys))
	blank := ns.item(Key{})
	seen := make(map[string]bool, len(rawKeys))
	for _, raw := range rawKeys {
		k, err := ns.ParseKey(raw)
		if err != nil {
			return nil, err
		}
		if !seen[k.Text] {
			seen[k.Text] = true
			it := blank
			it.Key = k
			items = append(items, it)
		}
	}
	if err := s.read(ctx, ns, items, s.opts.MaxResponseBytes); err != nil {
		return nil, err
	}
	return items, nil
}

// answer returns item, with ErrNotFound when its entry is absent.
func (s *Service) answer(ns *Namespace, item Item) (Item, error) {
	if !item.Entry.Found {
		return item, fmt.Errorf("%w: key %q in namespace %q", ErrNotFound, truncate(item.Key.Text), ns.Name)
	}
	return item, nil
}

// read is the one read path, for one key or many: it answers items (whose
// keys are set) from the first tier that holds each key fresh, the near
// cache, the hot tier, then the warehouse, whose reads are shared by key
// (see share) and fill the tiers above. limit, when not zero, bounds the
// bytes of the values: the tiers are read in chunks sized by it, and the
// read fails with ErrTooLarge once the values read so far pass it.
func (s *Service) read(ctx context.Context, ns *Namespace, items []Item, limit int) error {
	r := &reading{s: s, ns: ns, items: items, limit: limit, near: s.near(ns)}
	// Keys in doubt (see doubts) skip the caches and read the warehouse.
	skip := r.oneSkip[:]
	if len(items) != 1 {
		skip = make([]bool, len(items))
	}
	doubted, bypass := s.doubts.check(ns, items, skip, s.opts.Now())
	probe := r.fromNear(ctx, skip)
	if err := r.check(); err != nil {
		return err
	}
	missed, missedAt, err := r.fromHot(ctx, probe)
	if err != nil {
		return err
	}
	if doubted {
		for i, sk := range skip {
			if sk {
				// A fill from a warehouse read that began now repairs
				// the key, unless its namespace bypasses the caches.
				missed, missedAt = append(missed, miss{key: items[i].Key, hotOK: !bypass, doubted: true}), append(missedAt, i)
			}
		}
	}
	if err := r.fromWarm(ctx, missed, missedAt); err != nil {
		return err
	}
	// An item whose expiry passed while it was read reads as absent: no
	// read that ends after an item's expiry returns its value.
	for i := range items {
		if e := items[i].Entry; s.pastExpiry(e) {
			items[i].Entry = Entry{}
		}
	}
	return nil
}

// reading is the state of one read.
type reading struct {
	s     *Service
	ns    *Namespace
	items []Item
	near  Near
	limit int
	size  int    // bytes of the values answered so far
	read  int    // keys asked of the hot tier or the warehouse so far
	mark  uint64 // the flight mark taken before the first hot-tier read
	// oneSkip and oneProbe back skip and probe for a read of one key, the
	// common case, which then allocates neither.
	oneSkip  [1]bool
	oneProbe [1]int
}

// fromNear answers the items the near cache holds, and returns the
// indexes of the others, those marked in skip left out.
func (r *reading) fromNear(ctx context.Context, skip []bool) []int {
	probe := r.oneProbe[:0]
	if len(r.items) != 1 {
		probe = make([]int, 0, len(r.items))
	}
	if r.near == nil {
		for i := range r.items {
			if !skip[i] {
				probe = append(probe, i)
			}
		}
		return probe
	}
	_, end := r.s.step(ctx, "near", r.ns)
	for i := range r.items {
		if skip[i] {
			continue
		}
		it := &r.items[i]
		if e, ok := r.near.Get(r.ns, it.Key); ok && !r.s.pastExpiry(e) {
			r.s.lookup(r.ns, tierNear, foundResult(e)).Inc()
			it.Entry, it.Source = e, SourceNear
			r.size += len(e.Value)
			continue
		}
		r.s.lookup(r.ns, tierNear, resultMiss).Inc()
		probe = append(probe, i)
	}
	if len(probe) == 0 {
		end("hit")
	} else {
		end("miss")
	}
	return probe
}

// fromHot answers the items at probe that the hot tier holds fresh, or
// expired but servable (see serveStale), and returns the misses for the
// warehouse with their indexes. A hot-tier error is counted and makes its
// keys misses, so that reads go on from the warehouse while it is down.
func (r *reading) fromHot(ctx context.Context, probe []int) ([]miss, []int, error) {
	s, ns := r.s, r.ns
	r.mark = s.flights.mark()
	var missed []miss
	var missedAt []int
	for start, n := 0, 0; start < len(probe); start += n {
		n = r.chunk(len(probe))
		at := probe[start:min(start+n, len(probe))]
		c := &hotCall{ctx: ctx, done: make(chan struct{})}
		c.keys = c.one[:]
		if len(at) != 1 {
			c.keys = make([]Key, len(at))
		}
		for j, i := range at {
			c.keys[j] = r.items[i].Key
		}
		r.read += len(c.keys)
		entries, hits, err := s.hotGet(ctx, ns, c)
		for j, i := range at {
			it := &r.items[i]
			var e Entry
			hit := false
			if err == nil {
				e, hit = entries[j], hits[j]
			}
			s.countHot(ns, e, hit, err)
			switch {
			case hit && !s.expired(e):
				it.Entry, it.Source = e, SourceHot
				r.size += len(e.Value)
				if r.near != nil {
					s.keepNear(r.near, ns, it.Key, e)
				}
			case hit && s.servableStale(ns, e):
				s.serveStale(ns, it.Key, e)
				it.Entry, it.Source = e, SourceStale
				r.size += len(e.Value)
			default:
				missed, missedAt = append(missed, miss{key: it.Key, hotOK: err == nil, cached: hit}), append(missedAt, i)
			}
		}
		if err := r.check(); err != nil {
			return nil, nil, err
		}
	}
	return missed, missedAt, nil
}

// fromWarm answers the misses, at their indexes, from the warehouse.
func (r *reading) fromWarm(ctx context.Context, missed []miss, at []int) error {
	if len(missed) == 0 {
		return nil
	}
	s, ns := r.s, r.ns
	fctx, end := s.step(ctx, "flight", ns)
	outcome := "joined"
	for start, n := 0, 0; start < len(missed); start += n {
		n = r.chunk(len(missed))
		part := missed[start:min(start+n, len(missed))]
		r.read += len(part)
		entries, led, err := s.share(fctx, ns, part, r.mark)
		if led {
			outcome = "led"
		}
		if err != nil {
			end("error")
			return err
		}
		for j, i := range at[start : start+len(part)] {
			it := &r.items[i]
			it.Entry, it.Source = entries[j], SourceWarm
			r.size += len(it.Entry.Value)
			if r.near != nil {
				s.keepNear(r.near, ns, it.Key, it.Entry)
			}
		}
		if err := r.check(); err != nil {
			end("error")
			return err
		}
	}
	end(outcome)
	return nil
}

// chunk returns how many of left keys to ask of a tier next. Without a
// limit, all of them; with one, as many as the rest of the limit holds at
// the average size so far, from 16 (the most that can overshoot the
// limit, by 16 values) to 256.
func (r *reading) chunk(left int) int {
	const least, most = 16, 256
	switch {
	case r.limit == 0:
		return left
	case r.read == 0 || r.size == 0:
		return least
	}
	avg := max(r.size/r.read, 1)
	return min(max((r.limit-r.size)/avg, least), most)
}

// check refuses an answer whose values exceed the limit.
func (r *reading) check() error {
	if r.limit > 0 && r.size > r.limit {
		return fmt.Errorf("%w: the values of these keys exceed %d bytes, the bound of one answer; ask for fewer keys", ErrTooLarge, r.limit)
	}
	return nil
}

// hotCall is one read's keys for the hot tier, answered in a batch.
type hotCall struct {
	ctx     context.Context
	keys    []Key
	one     [1]Key        // backs keys for a read of one key
	done    chan struct{} // closed when entries, hits and err are set
	entries []Entry
	hits    []bool
	err     error
}

// hotGet reads the keys of c (whose ctx, keys and done are set) from the
// hot tier in one round trip, folded with the concurrent reads of the
// namespace (see batcher). When a lane is free the caller runs the round
// trip itself; otherwise it waits for its batch and for the batches ahead
// of it on the lanes, each under the hot-tier deadline.
func (s *Service) hotGet(ctx context.Context, ns *Namespace, c *hotCall) ([]Entry, []bool, error) {
	s.lanes[ns.Name].hot.runHere(c)
	// When the caller ran its own batch, the answer is there: it needs
	// no wait, nor the channel that ctx.Done makes for one.
	select {
	case <-c.done:
		return c.entries, c.hits, c.err
	default:
	}
	select {
	case <-c.done:
		return c.entries, c.hits, c.err
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// runHotReads reads one batch of calls in one round trip under the
// hot-tier deadline. Calls whose caller has gone are left out.
func (s *Service) runHotReads(ns *Namespace, calls []*hotCall) {
	var keys []Key
	live := calls[:0:0]
	for _, c := range calls {
		if c.ctx.Err() != nil {
			c.err = c.ctx.Err()
			close(c.done)
			continue
		}
		live = append(live, c)
		keys = append(keys, c.keys...)
	}
	if len(live) == 0 {
		return
	}
	s.batchRedis().Observe(float64(len(keys)))
	parent := context.Background()
	if s.opts.Tracer != nil {
		parent = context.WithoutCancel(live[0].ctx)
	}
	ctx, cancel := context.WithTimeout(parent, s.opts.HotTimeout)
	entries, hits, err := s.hot.GetMany(ctx, ns, keys)
	cancel()
	off := 0
	for _, c := range live {
		if err != nil {
			c.err = err
		} else {
			c.entries, c.hits = entries[off:off+len(c.keys)], hits[off:off+len(c.keys)]
		}
		off += len(c.keys)
		close(c.done)
	}
}

// countHot counts one key's hot-tier lookup.
func (s *Service) countHot(ns *Namespace, e Entry, hit bool, err error) {
	result := resultMiss
	switch {
	case err != nil:
		result = resultError
	case hit:
		result = foundResult(e)
	}
	s.lookup(ns, tierRedis, result).Inc()
}

// foundResult is the lookup result of a cached entry: a hit, or a
// negative one.
func foundResult(e Entry) lookupResult {
	if e.Found {
		return resultHit
	}
	return resultNegative
}

// serveStale accounts for serving the expired entry e of key: it starts
// its revalidation unless the warehouse's breaker is open, and counts the
// stale answer by that reason.
func (s *Service) serveStale(ns *Namespace, key Key, e Entry) {
	reason := "revalidate"
	if s.breaker.open() {
		reason = "error"
	} else {
		s.revalidate(ns, key, e)
	}
	s.stale.WithLabelValues(ns.Name, reason).Inc()
}

// revalidate starts one background read of key, unless one is under way or
// all refresh slots are busy. stale is the entry being served meanwhile.
// The read checks the hot tier first: the request that saw the stale entry
// may have come just after another revalidation refilled it.
func (s *Service) revalidate(ns *Namespace, key Key, stale Entry) {
	fk := flightKey(ns, key)
	if _, busy := s.refreshing.LoadOrStore(fk, struct{}{}); busy {
		return
	}
	select {
	case s.refreshes <- struct{}{}:
	default:
		s.refreshing.Delete(fk)
		return
	}
	go func() {
		defer func() { <-s.refreshes; s.refreshing.Delete(fk) }()
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.WarmTimeout)
		defer cancel()
		_, _, err := s.share(ctx, ns, []miss{{key: key, hotOK: true, recheck: true, stale: stale}}, 0)
		if err != nil {
			s.log.LogAttrs(ctx, slog.LevelDebug, "revalidation failed", slog.String("namespace", ns.Name), slog.Any("err", err))
		}
	}()
}
