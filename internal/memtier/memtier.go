// Package memtier holds the hot and the warm tier in memory, with the rules
// of the real ones: the hot tier orders fills by version and forgets entries
// when their lifetime ends; the warm tier hands out growing versions,
// applies a transaction's writes atomically and checks its preconditions.
// They let the core and the transports be tested without servers. Tests
// can also take a tier down, count its calls and hold its reads.
//
// Keys are kept in their canonical text (warmcache.Key.Text) per namespace
// name.
package memtier

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

var (
	_ warmcache.Hot  = (*Hot)(nil)
	_ warmcache.Warm = (*Warm)(nil)
)

// ErrDown is the error of a tier that a test took down. It wraps
// warmcache.ErrUnavailable, as an adapter's error for an unreachable server
// does.
var ErrDown = fmt.Errorf("%w: memtier: tier down", warmcache.ErrUnavailable)

// Clock is a clock that moves only when told: the one test clock of every
// package's tests (lifetimes, staleness, rate limits, polls), handed to an
// Options.Now as its Now method. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock { return NewClockAt(time.Unix(1_700_000_000, 0)) }

// NewClockAt returns a clock at t.
func NewClockAt(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func memKey(ns, key string) string { return ns + "\x00" + key }

type hotEntry struct {
	e      warmcache.Entry
	expiry time.Time
}

// Hot is an in-memory hot tier. It implements warmcache.Hot with the
// version rules of the Redis tier: a fill never replaces a newer version,
// nor an absent entry of a delete with a present one at the same version;
// an absent entry at version zero is stored only where nothing is cached.
// An entry is forgotten once its Keep has passed (it is still there at
// the instant it ends). Safe for concurrent use.
type Hot struct {
	now func() time.Time

	mu      sync.Mutex
	entries map[string]hotEntry
	down    atomic.Bool
	gets    atomic.Int64
	fills   atomic.Int64
	hook    atomic.Pointer[LookupHook]
}

// NewHot returns an empty hot tier on the clock now; nil means time.Now.
func NewHot(now func() time.Time) *Hot {
	if now == nil {
		now = time.Now
	}
	return &Hot{now: now, entries: map[string]hotEntry{}}
}

// GetMany implements warmcache.Hot.
func (h *Hot) GetMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, []bool, error) {
	h.gets.Add(1)
	if h.down.Load() {
		return nil, nil, ErrDown
	}
	if hook := h.hook.Load(); hook != nil {
		if err := (*hook)(ctx, ns, keys); err != nil {
			return nil, nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	es, hits := make([]warmcache.Entry, len(keys)), make([]bool, len(keys))
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, k := range keys {
		mk := memKey(ns.Name, k.Text)
		he, ok := h.entries[mk]
		if ok && now.After(he.expiry) {
			delete(h.entries, mk)
			ok = false
		}
		es[i], hits[i] = he.e, ok
	}
	return es, hits, nil
}

// FillMany implements warmcache.Hot.
func (h *Hot) FillMany(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) error {
	h.fills.Add(1)
	if h.down.Load() {
		return ErrDown
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range fills {
		if f.Entry.Version < 0 {
			return fmt.Errorf("memtier: fill %q: negative version", f.Key.Text)
		}
		mk := memKey(ns.Name, f.Key.Text)
		cur, ok := h.entries[mk]
		held := ok && !now.After(cur.expiry)
		if (held && wins(cur.e, f.Entry)) || (!held && f.Replace) {
			continue
		}
		if held && f.Replace && !cur.e.Found && cur.e.Version == 0 && f.Entry.Version != 0 {
			// A read that found nothing is ordered against no change:
			// the key is left to hold nothing, not the change.
			delete(h.entries, mk)
			continue
		}
		h.entries[mk] = hotEntry{e: f.Entry, expiry: now.Add(max(f.Keep, time.Millisecond))}
	}
	return nil
}

// wins reports whether the cached entry cur stays in place of e.
func wins(cur, e warmcache.Entry) bool {
	return cur.Version > e.Version || cur.Version == e.Version && cur.Version != 0 && !cur.Found && e.Found
}

// Ping implements warmcache.Hot.
func (h *Hot) Ping(context.Context) error {
	if h.down.Load() {
		return ErrDown
	}
	return nil
}

// SetGetHook sets the hook called at the start of every later read (a
// GetMany) with its keys, such as a Gate; nil removes it.
func (h *Hot) SetGetHook(hook LookupHook) {
	if hook == nil {
		h.hook.Store(nil)
		return
	}
	h.hook.Store(&hook)
}

// SetDown takes the tier down (every call fails with ErrDown) or brings it
// back.
func (h *Hot) SetDown(down bool) { h.down.Store(down) }

// Forget drops every entry, as a restarted cache would.
func (h *Hot) Forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries = map[string]hotEntry{}
}

// Peek returns the live entry cached for the canonical key text of the
// namespace called ns, without counting a read.
func (h *Hot) Peek(ns, key string) (warmcache.Entry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	he, ok := h.entries[memKey(ns, key)]
	if !ok || h.now().After(he.expiry) {
		return warmcache.Entry{}, false
	}
	return he.e, true
}

// Keep returns how long the entry of key in ns is still kept; zero when
// none is.
func (h *Hot) Keep(ns, key string) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	he, ok := h.entries[memKey(ns, key)]
	if !ok {
		return 0
	}
	return max(he.expiry.Sub(h.now()), 0)
}

// Gets returns the number of GetMany calls (round trips) so far.
func (h *Hot) Gets() int64 { return h.gets.Load() }

// Fills returns the number of FillMany calls (round trips) so far.
func (h *Hot) Fills() int64 { return h.fills.Load() }

// LookupHook is called at the start of every warehouse read with its keys;
// a non-nil error fails the read. A hook may block, to hold reads in flight.
type LookupHook func(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) error

// Warm is an in-memory warehouse. It implements warmcache.Warm: versions
// come from one sequence and grow with every write, a transaction's writes
// apply all or none, IfMatch and IfAbsent are checked against the current
// row, and a delete leaves an absent entry at a new version. As in the SQL
// warehouse, the delete of an absent key fails with ErrNotFound, with an
// IfMatch or without, unless AbsentOK; an absent-ok delete at a version
// fails with ErrVersionMismatch. Safe for concurrent use.
type Warm struct {
	mu      sync.Mutex
	rows    map[string]warmcache.Entry
	version int64
	hook    LookupHook
	// now is the warehouse's clock, which expiries are computed and
	// checked on; nil means time.Now.
	now func() time.Time

	failing atomic.Bool
	lookups atomic.Int64
	keys    atomic.Int64
	writes  atomic.Int64
}

// NewWarm returns an empty warehouse.
func NewWarm() *Warm { return &Warm{rows: map[string]warmcache.Entry{}} }

// LookupMany implements warmcache.Warm.
func (w *Warm) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, error) {
	w.lookups.Add(1)
	w.keys.Add(int64(len(keys)))
	if w.failing.Load() {
		return nil, ErrDown
	}
	w.mu.Lock()
	hook := w.hook
	w.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, ns, keys); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memtier: lookup: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]warmcache.Entry, len(keys))
	now := w.clock()
	for i, k := range keys {
		if e := w.rows[memKey(ns.Name, k.Text)]; live(e, now) {
			out[i] = e
		}
	}
	return out, nil
}

// clock returns the warehouse's time. w.mu must be held.
func (w *Warm) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}

// live reports whether row e reads as present at now: it is not past its
// expiry.
func live(e warmcache.Entry, now time.Time) bool {
	return e.Found && (e.ExpiresAt.IsZero() || now.Before(e.ExpiresAt))
}

// SetNow sets the warehouse's clock, on which expiries are computed and
// checked; nil means time.Now.
func (w *Warm) SetNow(now func() time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = now
}

// DeleteExpired implements warmcache.Expirer: it deletes at most limit
// rows of ns past their expiry, each at a new version, and returns their
// keys' canonical texts with the absent entries of the deletes.
func (w *Warm) DeleteExpired(ctx context.Context, ns *warmcache.Namespace, limit int) ([]warmcache.Key, []warmcache.Entry, error) {
	if w.failing.Load() {
		return nil, nil, ErrDown
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("memtier: delete expired: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock()
	prefix := memKey(ns.Name, "")
	var keys []warmcache.Key
	var entries []warmcache.Entry
	for mk, e := range w.rows {
		if len(keys) >= limit {
			break
		}
		if !strings.HasPrefix(mk, prefix) || live(e, now) {
			continue
		}
		k, err := ns.ParseKey(strings.TrimPrefix(mk, prefix))
		if err != nil {
			continue
		}
		w.version = max(w.version, e.Version) + 1
		delete(w.rows, mk)
		keys, entries = append(keys, k), append(entries, warmcache.Entry{Version: w.version})
	}
	return keys, entries, nil
}

// Write implements warmcache.Warm.
func (w *Warm) Write(ctx context.Context, ns *warmcache.Namespace, writes []warmcache.Write) ([]warmcache.Entry, error) {
	w.writes.Add(1)
	if w.failing.Load() {
		return nil, ErrDown
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memtier: write: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rows := maps.Clone(w.rows)
	version := w.version
	out := make([]warmcache.Entry, len(writes))
	now := w.clock()
	for i, wr := range writes {
		mk := memKey(ns.Name, wr.Key.Text)
		cur := rows[mk]
		if !live(cur, now) {
			// An expired row is an absent key whose versions go on.
			cur = warmcache.Entry{Version: cur.Version}
		}
		switch {
		case wr.Delete && !cur.Found && !wr.AbsentOK:
			return nil, fmt.Errorf("%w: key %q", warmcache.ErrNotFound, wr.Key.Text)
		case wr.IfMatch != nil && (!cur.Found || cur.Version != *wr.IfMatch):
			return nil, fmt.Errorf("%w: key %q is not at version %d", warmcache.ErrVersionMismatch, wr.Key.Text, *wr.IfMatch)
		case wr.IfAbsent && cur.Found:
			return nil, fmt.Errorf("%w: key %q exists", warmcache.ErrVersionMismatch, wr.Key.Text)
		case wr.Delete && !cur.Found:
			if rows[mk].Found {
				// The delete of an expired row removes it.
				version = max(version, cur.Version) + 1
				delete(rows, mk)
				out[i] = warmcache.Entry{Version: version}
			}
			continue
		}
		version = max(version, cur.Version) + 1
		if wr.Delete {
			delete(rows, mk)
			out[i] = warmcache.Entry{Version: version}
			continue
		}
		out[i] = warmcache.Entry{Value: append([]byte(nil), wr.Value...), Version: version, Found: true}
		switch {
		case wr.TTL > 0:
			out[i].ExpiresAt = now.Add(wr.TTL)
		case !wr.ExpiresAt.IsZero():
			out[i].ExpiresAt = wr.ExpiresAt
		}
		rows[mk] = out[i]
	}
	w.rows, w.version = rows, version
	return out, nil
}

// Ping implements warmcache.Warm.
func (w *Warm) Ping(context.Context) error {
	if w.failing.Load() {
		return ErrDown
	}
	return nil
}

// Set stores a row as a writer that bypasses the service would: value at
// version under the canonical key text of the namespace called ns. Later
// writes take versions above it.
func (w *Warm) Set(ns, key string, value []byte, version int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rows[memKey(ns, key)] = warmcache.Entry{Value: append([]byte(nil), value...), Version: version, Found: true}
	w.version = max(w.version, version)
}

// Remove deletes a row as a writer that bypasses the service would.
func (w *Warm) Remove(ns, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.rows, memKey(ns, key))
}

// Row returns the row of the canonical key text in the namespace called ns.
func (w *Warm) Row(ns, key string) (warmcache.Entry, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.rows[memKey(ns, key)]
	return e, ok
}

// Len returns the number of rows.
func (w *Warm) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.rows)
}

// SetFailing makes every call fail with ErrDown, or stops it.
func (w *Warm) SetFailing(failing bool) { w.failing.Store(failing) }

// SetLookupHook sets the hook of every later read; nil removes it.
func (w *Warm) SetLookupHook(hook LookupHook) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hook = hook
}

// Lookups returns the number of reads (queries) so far, and Keys the keys
// they asked for.
func (w *Warm) Lookups() int64 { return w.lookups.Load() }

// Keys returns the number of keys all reads asked for so far.
func (w *Warm) Keys() int64 { return w.keys.Load() }

// Writes returns the number of Write calls (transactions) so far.
func (w *Warm) Writes() int64 { return w.writes.Load() }

// Gate returns a hook that sends on started (when not nil) as each read
// arrives, and holds every read until release is closed (when not nil); a
// read whose context ends first fails with its error.
func Gate(started chan<- struct{}, release <-chan struct{}) LookupHook {
	return func(ctx context.Context, _ *warmcache.Namespace, _ []warmcache.Key) error {
		if started != nil {
			select {
			case started <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if release == nil {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
