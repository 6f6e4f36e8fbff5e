package warmcache_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// memHot is an in-memory hot tier with the version rules of warmcache.Hot,
// for unit tests of the protocol. Integration tests use the real Redis.
type memHot struct {
	mu      sync.Mutex
	entries map[string]warmcache.Entry
	down    atomic.Bool
	clock   *clock // sets FreshUntil on fill when not nil
}

// clock is a test clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var errDown = fmt.Errorf("%w: tier down", warmcache.ErrUnavailable)

func newMemHot() *memHot { return &memHot{entries: map[string]warmcache.Entry{}} }

func (h *memHot) Get(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key) (warmcache.Entry, bool, error) {
	if h.down.Load() {
		return warmcache.Entry{}, false, errDown
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[ns.Name+"/"+key.Text]
	return e, ok, nil
}

func (h *memHot) GetMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, []bool, error) {
	es, hits := make([]warmcache.Entry, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		e, hit, err := h.Get(ctx, ns, k)
		if err != nil {
			return nil, nil, err
		}
		es[i], hits[i] = e, hit
	}
	return es, hits, nil
}

func (h *memHot) Fill(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key, e warmcache.Entry) error {
	if h.down.Load() {
		return errDown
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := ns.Name + "/" + key.Text
	cur, ok := h.entries[k]
	if ok && (cur.Version > e.Version || cur.Version == e.Version && cur.Version > 0 && !cur.Found && e.Found) {
		return nil
	}
	if h.clock != nil {
		e.FreshUntil = h.clock.Now().Add(ns.TTL)
	}
	h.entries[k] = e
	return nil
}

func (h *memHot) FillMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key, es []warmcache.Entry) error {
	for i := range keys {
		if err := h.Fill(ctx, ns, keys[i], es[i]); err != nil {
			return err
		}
	}
	return nil
}

func (h *memHot) Ping(context.Context) error {
	if h.down.Load() {
		return errDown
	}
	return nil
}

// memWarm is an in-memory warehouse. gate, when set, is received from before
// every lookup answers, so a test can hold lookups in flight.
type memWarm struct {
	failing atomic.Bool
	mu      sync.Mutex
	rows    map[string]warmcache.Entry
	version int64
	lookups atomic.Int64
	gate    chan struct{}
	started chan struct{}
}

func newMemWarm() *memWarm { return &memWarm{rows: map[string]warmcache.Entry{}} }

func (w *memWarm) Lookup(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key) (warmcache.Entry, error) {
	w.lookups.Add(1)
	if w.failing.Load() {
		return warmcache.Entry{}, errDown
	}
	if w.started != nil {
		w.started <- struct{}{}
	}
	if w.gate != nil {
		select {
		case <-w.gate:
		case <-ctx.Done():
			return warmcache.Entry{}, ctx.Err()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rows[key.Text], nil
}

func (w *memWarm) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, error) {
	w.lookups.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]warmcache.Entry, len(keys))
	for i, k := range keys {
		out[i] = w.rows[k.Text]
	}
	return out, nil
}

func (w *memWarm) Write(ctx context.Context, ns *warmcache.Namespace, writes []warmcache.Write) ([]warmcache.Entry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rows := maps.Clone(w.rows)
	version := w.version
	out := make([]warmcache.Entry, len(writes))
	for i, wr := range writes {
		cur := rows[wr.Key.Text]
		switch {
		case wr.IfMatch != nil && (!cur.Found || cur.Version != *wr.IfMatch):
			return nil, warmcache.ErrVersionMismatch
		case wr.IfAbsent && cur.Found:
			return nil, warmcache.ErrVersionMismatch
		case wr.Delete && !cur.Found && wr.AbsentOK:
			continue
		case wr.Delete && !cur.Found:
			return nil, warmcache.ErrNotFound
		}
		version++
		if wr.Delete {
			delete(rows, wr.Key.Text)
			out[i] = warmcache.Entry{Version: version}
			continue
		}
		out[i] = warmcache.Entry{Value: append([]byte(nil), wr.Value...), Version: version, Found: true}
		rows[wr.Key.Text] = out[i]
	}
	w.rows, w.version = rows, version
	return out, nil
}

func (w *memWarm) Ping(context.Context) error { return nil }

// memNear is an in-memory near cache with the version rules of
// warmcache.Near, without TTLs or bounds.
type memNear struct {
	mu      sync.Mutex
	entries map[string]warmcache.Entry
}

func newMemNear() *memNear { return &memNear{entries: map[string]warmcache.Entry{}} }

func (n *memNear) Get(ns *warmcache.Namespace, key warmcache.Key) (warmcache.Entry, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.entries[ns.Name+"/"+key.Text]
	return e, ok
}

func (n *memNear) Set(ns *warmcache.Namespace, key warmcache.Key, e warmcache.Entry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := ns.Name + "/" + key.Text
	if cur, ok := n.entries[k]; !ok || cur.Version <= e.Version {
		n.entries[k] = e
	}
}

func (n *memNear) Invalidate(ns *warmcache.Namespace, key warmcache.Key, version int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := ns.Name + "/" + key.Text
	if cur, ok := n.entries[k]; ok && cur.Version < version {
		delete(n.entries, k)
	}
}
