package warmcache

import (
	"runtime"
	"slices"
	"sync"
	"time"
)

// batcher folds concurrent groups of work into batches: a group is what one
// request needs (one key for a GET, a chunk of keys for an MGet), and a
// batch is one round trip to a tier (one Redis pipeline, one `= ANY($1)`
// query). While fewer than lanes batches run, a submitted group starts one
// at once; otherwise it waits, and the next batch takes every waiting
// group, up to maxBatch keys (a group is never split, so a batch holds at
// least one whole group). So an idle service adds no latency, and a busy
// one sends fewer, larger requests instead of queueing one round trip per
// key. With maxBatch at most one, folding is off: every group runs at
// once as a batch of its own, with no lanes. A batcher is safe for
// concurrent use.
//
// Lanes suit a tier whose round trip is about its own work, as on
// loopback: a busy tier then answers folded batches sooner than a queue of
// single keys. A tier a network hop away is slow to answer while idle, and
// a group that waits for a lane then pays a round trip for its place and
// another for its batch. With spill set, a group that finds every lane
// busy and no batch taken for longer than spill starts one more lane, up
// to spillLanes in all, rather than wait for a round trip and then pay its
// own; that only where the tier is slow to answer, its shortest recent
// batch longer than spill (minRTT). A process kept off the CPU finds the
// lanes' last batch old when it resumes, and a tier on loopback still
// answers some batches fast: there no lane is added, and folding stays as
// it was.
type batcher[G comparable] struct {
	lanes    int
	maxBatch int
	// size is the number of keys of a group.
	size func(G) int
	// run answers a batch. It runs to its end whoever is waiting, and
	// delivers each group's answer itself.
	run func(batch []G)
	// key, when set, names what a group changes: a group whose key is
	// already in the forming batch waits for the next one, behind which
	// every later group of its key waits too (a key's groups run in
	// arrival order, never together).
	key func(G) string
	// linger, when positive, is how long a lane that is free while
	// another lane's batch runs waits for its batch to fill to maxBatch
	// before taking it; with no other batch running it never waits.
	linger time.Duration
	// spill, when positive, lets a group that finds every lane busy start
	// one more, up to spillLanes, when the tier is slow to answer (see
	// spills); spilled is called when one does.
	spill      time.Duration
	spillLanes int
	spilled    func()

	mu      sync.Mutex
	queue   []G
	queued  int // keys in queue
	running int
	// taken is when the last batch was taken or the last lane started,
	// and rtt the shortest recent batches; both kept only with spill.
	taken time.Time
	rtt   minRTT
	// full, when not nil, is closed once queued reaches maxBatch: a
	// lingering lane waits on it.
	full chan struct{}
}

// submit queues g and returns. When a lane is free, it starts one in a new
// goroutine, which runs batches until nothing waits: the caller may go away
// while its group runs.
func (b *batcher[G]) submit(g G) {
	if b.maxBatch <= 1 { // folding is off: every group is a batch
		go b.run([]G{g})
		return
	}
	if b.enqueue(g) {
		go b.loop()
	}
}

// runHere queues g and, when a lane is free, runs batches in the calling
// goroutine until the one holding g has run; then it leaves the lane to a
// new goroutine if more groups wait. It saves a hand-off to another
// goroutine for calls that wait for their answer anyway, and that a
// deadline bounds. When no lane is free, or another lane took g first, g
// is answered by another goroutine: the caller waits for g's answer in
// every case.
func (b *batcher[G]) runHere(g G) {
	if b.maxBatch <= 1 { // folding is off: every group is a batch
		b.run([]G{g})
		return
	}
	if !b.enqueue(g) {
		return
	}
	// Let the goroutines that are ready to run (requests that arrived
	// together, on a busy core) queue their groups before this lane takes
	// its batch: without it, the lane takes g alone and the others start
	// lanes of their own, one round trip each. When nothing else is ready
	// it returns at once.
	runtime.Gosched()
	b.wait()
	for {
		batch, mine := b.next(g)
		if batch == nil {
			return
		}
		b.runBatch(batch)
		if mine {
			b.mu.Lock()
			more := len(b.queue) > 0
			if !more {
				b.running--
			}
			b.mu.Unlock()
			if more {
				go b.loop()
			}
			return
		}
	}
}

// enqueue queues g and reports whether the caller must start a lane.
func (b *batcher[G]) enqueue(g G) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = append(b.queue, g)
	b.queued += b.size(g)
	if b.full != nil && b.queued >= b.maxBatch {
		close(b.full)
		b.full = nil
	}
	if b.running < b.lanes {
		b.running++
		if b.spill > 0 {
			b.taken = time.Now()
		}
		return true
	}
	if b.spills() {
		b.running++
		b.taken = time.Now()
		if b.spilled != nil {
			b.spilled()
		}
		return true
	}
	return false
}

// spills reports whether a group that finds every lane busy starts one
// more: the tier is slow to answer (even the shortest recent batch took
// longer than spill), the lanes have taken no batch for longer than spill,
// and fewer than spillLanes run. b.mu must be held.
func (b *batcher[G]) spills() bool {
	return b.spill > 0 && b.running < b.spillLanes && b.rtt.get() > b.spill && time.Since(b.taken) > b.spill
}

// runBatch runs batch and, with spill, keeps how long it took.
func (b *batcher[G]) runBatch(batch []G) {
	if b.spill <= 0 {
		b.run(batch)
		return
	}
	start := time.Now()
	b.run(batch)
	end := time.Now()
	b.mu.Lock()
	b.rtt.add(end.Sub(start), end)
	b.mu.Unlock()
}

// rttWindow is how long a batch's time counts in minRTT: one to two
// windows.
const rttWindow = time.Second

// minRTT keeps the shortest batch of the last one to two seconds: the
// tier's own round trip, without the waits for the CPU that a loaded
// process adds to many batches. On loopback it stays at tens of
// microseconds however busy the core; a tier a network hop away never
// answers faster than the hop.
type minRTT struct {
	cur, prev time.Duration
	since     time.Time // when cur's window began
}

func (m *minRTT) add(d time.Duration, now time.Time) {
	switch age := now.Sub(m.since); {
	case age > 2*rttWindow: // the windows before are too old to count
		m.prev, m.cur, m.since = 0, d, now
	case age > rttWindow:
		m.prev, m.cur, m.since = m.cur, d, now
	default:
		m.cur = min(m.cur, d)
	}
}

// get returns the shortest batch kept, or 0 before the first.
func (m *minRTT) get() time.Duration {
	if m.prev == 0 {
		return m.cur
	}
	return min(m.cur, m.prev)
}

// next takes the next batch off the queue, and reports whether it holds
// mine. With nothing queued it returns nil and gives up the lane.
func (b *batcher[G]) next(mine G) ([]G, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.queue = nil // release the drained backing array
		b.running--
		return nil, false
	}
	if b.spill > 0 {
		b.taken = time.Now()
	}
	if b.key != nil {
		return b.nextByKey(mine)
	}
	n, keys := 0, 0
	for n < len(b.queue) && (n == 0 || keys+b.size(b.queue[n]) <= b.maxBatch) {
		keys += b.size(b.queue[n])
		n++
	}
	batch := make([]G, n)
	copy(batch, b.queue[:n])
	clear(b.queue[:n])
	b.queue = b.queue[n:]
	b.queued -= keys
	return batch, slices.Contains(batch, mine)
}

// nextByKey is next for groups with keys: it takes the queued groups in
// order, up to maxBatch keys, passing over those whose key the batch
// already holds, which keep their places. b.mu must be held.
func (b *batcher[G]) nextByKey(mine G) ([]G, bool) {
	var batch []G
	taken := make(map[string]bool)
	keys := 0
	rest := b.queue[:0]
	for i, g := range b.queue {
		k, n := b.key(g), b.size(g)
		switch {
		case taken[k]:
			rest = append(rest, g)
		case len(batch) > 0 && keys+n > b.maxBatch:
			rest = append(rest, b.queue[i:]...)
			clear(b.queue[len(rest):])
			b.queue, b.queued = rest, b.queued-keys
			return batch, slices.Contains(batch, mine)
		default:
			batch, keys, taken[k] = append(batch, g), keys+n, true
		}
	}
	clear(b.queue[len(rest):])
	b.queue, b.queued = rest, b.queued-keys
	return batch, slices.Contains(batch, mine)
}

// wait holds a lane that is free while another lane's batch runs, for
// at most linger, until maxBatch keys are queued.
func (b *batcher[G]) wait() {
	if b.linger <= 0 {
		return
	}
	b.mu.Lock()
	if b.running < 2 || b.queued >= b.maxBatch {
		b.mu.Unlock()
		return
	}
	if b.full == nil {
		b.full = make(chan struct{})
	}
	full := b.full
	b.mu.Unlock()
	t := time.NewTimer(b.linger)
	defer t.Stop()
	select {
	case <-full:
	case <-t.C:
	}
}

// loop runs batches until nothing waits.
func (b *batcher[G]) loop() {
	var none G
	for {
		b.wait()
		batch, _ := b.next(none)
		if batch == nil {
			return
		}
		b.runBatch(batch)
	}
}

// waiting returns the keys of the groups that wait for a lane.
func (b *batcher[G]) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued
}
