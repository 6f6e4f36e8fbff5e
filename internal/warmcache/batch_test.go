package warmcache

import (
	"slices"
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

// TestBatcherSpill checks that, on a tier slow to answer, a group finding
// every lane busy waits while the lanes took a batch within spill, starts
// one more lane once they have taken none for longer, which takes every
// waiting group, and that no more than spillLanes run; and that on a tier
// whose batches are quick, however long the lanes are busy, none starts.
func TestBatcherSpill(t *testing.T) {
	const spill = 50 * time.Millisecond
	for _, slow := range []bool{true, false} {
		t.Run(map[bool]string{true: "slow tier", false: "quick tier"}[slow], func(t *testing.T) {
			var mu sync.Mutex
			var ran [][]string
			hold := make(chan struct{})
			var spills atomic.Int64
			b := &batcher[*keyed]{lanes: 1, maxBatch: 8, spill: spill, spillLanes: 2, size: func(*keyed) int { return 1 },
				spilled: func() { spills.Add(1) },
				run: func(batch []*keyed) {
					var keys []string
					for _, g := range batch {
						keys = append(keys, g.key)
					}
					mu.Lock()
					ran = append(ran, keys)
					mu.Unlock()
					switch {
					case batch[0].key == "warm-up" && slow:
						time.Sleep(2 * spill)
					case slices.ContainsFunc(batch, func(g *keyed) bool { return g.key != "warm-up" && g.key != "early" }):
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
			b.runHere(&keyed{key: "warm-up"}) // the tier's round trip
			var wg sync.WaitGroup
			defer func() { close(hold); wg.Wait() }()
			wg.Go(func() { b.runHere(&keyed{key: "first"}) })
			until("the first lane", func() bool { r, w := state(); return r == 1 && w == 0 })
			wg.Go(func() { b.runHere(&keyed{key: "early"}) })
			until("a group queued within spill", func() bool { _, w := state(); return w == 1 })
			if r, _ := state(); r != 1 {
				t.Fatalf("%d lanes run after a group arrived within spill of the last batch, want 1", r)
			}
			time.Sleep(2 * spill)
			wg.Go(func() { b.runHere(&keyed{key: "late"}) })
			if !slow {
				until("a group queued behind a busy lane", func() bool { _, w := state(); return w == 2 })
				time.Sleep(2 * spill)
				if r, w := state(); r != 1 || w != 2 || spills.Load() != 0 {
					t.Errorf("%d lanes running, %d groups waiting, %d spilled; want 1, 2, 0: the tier answers quickly", r, w, spills.Load())
				}
				return
			}
			until("a lane spilled", func() bool { r, w := state(); return r == 2 && w == 0 })
			mu.Lock()
			spilled := ran[len(ran)-1]
			mu.Unlock()
			if !slices.Equal(spilled, []string{"early", "late"}) {
				t.Errorf("the spilled lane's batch %v, want [early late]: it takes every waiting group", spilled)
			}
			if n := spills.Load(); n != 1 {
				t.Errorf("%d lanes spilled, want 1", n)
			}
			time.Sleep(2 * spill)
			wg.Go(func() { b.runHere(&keyed{key: "capped"}) })
			until("a group queued at spillLanes", func() bool { _, w := state(); return w == 1 })
			if r, _ := state(); r != 2 {
				t.Errorf("%d lanes run, want spillLanes (2)", r)
			}
		})
	}
}
