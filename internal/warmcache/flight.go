package warmcache

import (
	"context"
	"sync"
)

// flightGroup merges concurrent loads of the same key into one call. Unlike
// x/sync/singleflight, the call runs under its own context, which is
// cancelled only when every caller waiting on it has gone away: the first
// caller leaving does not fail the load for the others.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flightCall
}

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

func (g *flightGroup) run(ctx context.Context, key string, c *flightCall, fn func(context.Context) (Entry, error)) {
	c.entry, c.err = fn(ctx)
	g.mu.Lock()
	if g.calls[key] == c {
		delete(g.calls, key)
	}
	g.mu.Unlock()
	c.cancel()
	close(c.done)
}
