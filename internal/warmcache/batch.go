package warmcache

import (
	"context"
	"sync"
)

// batcher folds concurrent single-key calls into batched calls. While fewer
// than lanes batches run, a call starts one at once; otherwise it waits, and
// the next batch to start takes every waiting key, up to maxBatch. So an idle
// service adds no latency to a call, and a busy one sends fewer, larger
// requests (one `= ANY($1)` query, one Redis pipeline) instead of queueing
// one round trip per key. A batcher is safe for concurrent use.
type batcher[I, V any] struct {
	// run answers keys, with their inputs, in order. It runs under its own
	// context, so that one caller going away does not fail the others' keys.
	run      func(ctx context.Context, keys []Key, ins []I) ([]V, error)
	lanes    int
	maxBatch int
	// traced makes a batch carry its first caller's context values, such
	// as the trace its tier calls belong to; without it a batch runs under
	// a bare context, which costs nothing.
	traced bool

	mu      sync.Mutex
	queue   []*batchCall[I, V]
	running int
}

type batchCall[I, V any] struct {
	ctx  context.Context
	key  Key
	in   I
	done chan struct{}
	val  V
	err  error
}

// do answers one key, batched with whatever other keys wait with it.
func (b *batcher[I, V]) do(ctx context.Context, key Key, in I) (V, error) {
	c := &batchCall[I, V]{ctx: ctx, key: key, in: in, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := b.running < b.lanes
	if start {
		b.running++
	}
	b.mu.Unlock()
	if start {
		go b.loop()
	}
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// loop runs batches until no key waits.
func (b *batcher[I, V]) loop() {
	for {
		b.mu.Lock()
		var batch []*batchCall[I, V]
		for len(b.queue) > 0 && len(batch) < b.maxBatch {
			c := b.queue[0]
			b.queue[0] = nil
			b.queue = b.queue[1:]
			if c.ctx.Err() == nil { // its caller is gone: skip it
				batch = append(batch, c)
			}
		}
		if len(batch) == 0 {
			b.queue = nil // release the drained backing array
			b.running--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.runBatch(batch)
	}
}

func (b *batcher[I, V]) runBatch(batch []*batchCall[I, V]) {
	keys := make([]Key, len(batch))
	ins := make([]I, len(batch))
	for i, c := range batch {
		keys[i], ins[i] = c.key, c.in
	}
	// The batch runs for all its callers, under the run function's own
	// deadlines: none's cancellation applies.
	ctx := context.Background()
	if b.traced {
		ctx = context.WithoutCancel(batch[0].ctx)
	}
	vals, err := b.run(ctx, keys, ins)
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.val = vals[i]
		}
		close(c.done)
	}
}
