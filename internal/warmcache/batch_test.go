package warmcache

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// keyed is a group of a keyed batcher: a key and its arrival number.
type keyed struct {
	key string
	n   int
}

// TestBatcherKeys checks that a keyed batcher never puts two groups of one
// key in a batch, runs each key's groups in arrival order, and never makes
// a batch above maxBatch.
func TestBatcherKeys(t *testing.T) {
	b := &batcher[*keyed]{lanes: 1, maxBatch: 3, size: func(*keyed) int { return 1 },
		key: func(g *keyed) string { return g.key }}
	for i, k := range []string{"a", "a", "b", "a", "c", "d", "b"} {
		b.enqueue(&keyed{key: k, n: i})
	}
	var batches [][]int
	for {
		batch, _ := b.next(nil)
		if batch == nil {
			break
		}
		var ns []int
		for _, g := range batch {
			ns = append(ns, g.n)
		}
		batches = append(batches, ns)
	}
	want := [][]int{{0, 2, 4}, {1, 5, 6}, {3}}
	if !slices.EqualFunc(batches, want, slices.Equal) {
		t.Errorf("batches %v, want %v", batches, want)
	}
	if b.waiting() != 0 {
		t.Errorf("%d groups left waiting", b.waiting())
	}
}

// TestBatcherLingerOnlyWhenBusy checks that a lane with linger set does
// not wait for company when no other batch runs, and waits at most linger,
// or until the batch is full, when one does.
func TestBatcherLingerOnlyWhenBusy(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	hold := make(chan struct{})
	b := &batcher[*keyed]{lanes: 2, maxBatch: 4, linger: time.Hour, size: func(*keyed) int { return 1 },
		key: func(g *keyed) string { return g.key },
		run: func(batch []*keyed) {
			mu.Lock()
			sizes = append(sizes, len(batch))
			mu.Unlock()
			if batch[0].key == "hold" {
				<-hold
			}
		}}
	start := time.Now()
	b.runHere(&keyed{key: "idle"})
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("an idle batcher held a group %v", d)
	}
	// One batch runs: the next lane waits until four groups are queued.
	go b.runHere(&keyed{key: "hold"})
	for running := 0; running != 1; {
		time.Sleep(time.Millisecond)
		b.mu.Lock()
		running = b.running
		b.mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, k := range []string{"a", "b", "c", "d"} {
		wg.Go(func() { b.runHere(&keyed{key: k}) })
	}
	wg.Wait()
	close(hold)
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 3 || sizes[0] != 1 || sizes[1] != 1 || sizes[2] != 4 {
		t.Errorf("batch sizes %v, want [1 1 4]: the lingering lane sends a full batch", sizes)
	}
}

// TestBatcherSpill checks that groups waiting for a lane start one more
// once they have waited spill, not before, and that no more than
// spillLanes run.
func TestBatcherSpill(t *testing.T) {
	const spill = 50 * time.Millisecond
	hold, waited := make(chan struct{}), make(chan struct{})
	var spills atomic.Int64
	b := &batcher[*keyed]{lanes: 1, maxBatch: 8, spill: spill, spillLanes: 2, size: func(*keyed) int { return 1 },
		spilled: func() { spills.Add(1) },
		run: func(batch []*keyed) {
			for _, g := range batch {
				if g.key == "waits" {
					close(waited)
				}
			}
			if strings.HasSuffix(batch[0].key, "hold") {
				<-hold
			}
		}}
	state := func() (running, waiting int) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.running, b.queued
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				r, w := state()
				t.Fatalf("%s: still %d lanes running and %d groups waiting", what, r, w)
			}
		}
	}
	var wg sync.WaitGroup
	defer func() { close(hold); wg.Wait() }()
	wg.Go(func() { b.runHere(&keyed{key: "first-hold"}) })
	until("the first lane", func() bool { r, w := state(); return r == 1 && w == 0 })

	// A group that finds the lane busy waits spill, then gets a lane of
	// its own while the first batch still runs.
	start := time.Now()
	b.runHere(&keyed{key: "waits"})
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("a group waiting for a busy lane did not run while the lane stayed busy")
	}
	if d := time.Since(start); d < spill {
		t.Errorf("a group waiting for a busy lane spilled after %v, before spill (%v)", d, spill)
	}
	if n := spills.Load(); n != 1 {
		t.Errorf("%d lanes spilled, want 1", n)
	}

	// A spilled lane that stays busy counts: with spillLanes running, a
	// group waits for one of them however long it waits.
	wg.Go(func() { b.runHere(&keyed{key: "second-hold"}) })
	until("the spilled lane", func() bool { r, w := state(); return r == 2 && w == 0 })
	wg.Go(func() { b.runHere(&keyed{key: "capped"}) })
	until("a group queued", func() bool { _, w := state(); return w == 1 })
	time.Sleep(3 * spill)
	if r, w := state(); r != 2 || w != 1 {
		t.Errorf("%d lanes running and %d groups waiting after 3 × spill, want spillLanes (2) and 1", r, w)
	}
}
