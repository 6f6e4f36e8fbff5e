package warmcache

import (
	"context"
	"sync"
	"sync/atomic"
)

// flightGroup merges concurrent loads of the same key into one call. Unlike
// x/sync/singleflight, the call runs under its own context, which is
// cancelled only when every caller waiting on it has gone away: the first
// caller leaving does not fail the load for the others.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flightCall

	// ended counts the calls that have ended. recent maps the key of each
	// of the last recentKeys calls to end to the count at its end, and
	// recentOrder holds those keys oldest first (a ring from recentHead);
	// forgotten is the highest count dropped from recent. Together they
	// tell a new call whether another call of its key ended after a mark.
	ended       atomic.Uint64
	recent      map[string]uint64
	recentOrder []string
	recentHead  int
	forgotten   uint64
}

// recentKeys bounds the ended calls a flightGroup remembers.
const recentKeys = 4096

type flightCall struct {
	done    chan struct{}
	waiters int
	cancel  context.CancelFunc
	entry   Entry
	err     error
}

// do runs fn once for all overlapping callers of key and returns its result.
// shared reports whether this caller joined a call that another started.
func (g *flightGroup) do(ctx context.Context, key string, fn func(context.Context) (Entry, error)) (e Entry, shared bool, err error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = make(map[string]*flightCall)
	}
	c, shared := g.calls[key]
	if !shared {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &flightCall{done: make(chan struct{}), cancel: cancel}
		g.calls[key] = c
		go g.run(fctx, key, c, fn)
	}
	c.waiters++
	g.mu.Unlock()

	select {
	case <-c.done:
		return c.entry, shared, c.err
	case <-ctx.Done():
		g.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			// Nobody waits any more: stop the load, and let the next caller
			// start a fresh one instead of joining a cancelled call.
			c.cancel()
			if g.calls[key] == c {
				delete(g.calls, key)
			}
		}
		g.mu.Unlock()
		return Entry{}, shared, ctx.Err()
	}
}

// mark returns a mark to take before reading the hot tier for a key, for
// endedSince.
func (g *flightGroup) mark() uint64 { return g.ended.Load() }

// endedSince reports whether a call of key ended after mark was taken, or
// may have: the record of such a call may have been dropped. A load whose
// hot-tier read missed needs to read the hot tier again only then: the
// fill of a call that ended after its read began may have landed after it.
func (g *flightGroup) endedSince(key string, mark uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if mark < g.forgotten {
		return true
	}
	return g.recent[key] > mark
}

func (g *flightGroup) run(ctx context.Context, key string, c *flightCall, fn func(context.Context) (Entry, error)) {
	c.entry, c.err = fn(ctx)
	g.mu.Lock()
	if g.calls[key] == c {
		delete(g.calls, key)
	}
	g.remember(key)
	g.mu.Unlock()
	c.cancel()
	close(c.done)
}

// remember records that a call of key ended. g.mu must be held.
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
