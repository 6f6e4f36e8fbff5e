// Package gctune keeps the garbage collector's heap goal from falling below
// a floor.
//
// Go's goal is the live heap times (1 + GOGC/100), and at least 4 MiB. The
// service's live heap is small when no near cache holds values, while a
// hit allocates several KiB of short-lived objects: with the default GOGC
// of 100, the collector then runs many times a second under load, and
// each cycle costs its marking, its assists, and the stacks it shrinks on
// goroutines that are idle at that moment (gRPC's stream workers, the
// connections' goroutines), which grow them again by copying on their next
// call. A floor of tens of MiB makes cycles rare, for memory the service
// budgets anyway for a full near cache. The larger heap costs in turn:
// each allocation touches memory that is no longer in the processor's
// caches. How often the collector ran, and what the floor left on this
// service's hit paths: docs/performance.md#garbage-collection.
//
// The floor only raises GOGC while the live heap is small: after every
// collection the Tuner sets GOGC so that the next goal is the floor, and
// puts the base GOGC back once the live heap alone reaches it. A GOMEMLIMIT
// still bounds the heap; the floor is kept at half of it at most.
package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// heapMinimum is the runtime's least heap goal at GOGC=100 (4 MiB); it
// scales with GOGC.
const heapMinimum = 4 << 20

// maxPercent bounds the GOGC the Tuner sets, for a live heap of almost
// nothing.
const maxPercent = 100_000

// The runtime's measures of the last collection that its heap goal is
// computed from: goal = live + (live + stacks + globals) * GOGC/100, and at
// least heapMinimum * GOGC/100.
var sampleNames = [...]string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// Tuner holds the heap goal at or above its floor. It is safe for
// concurrent use; the process should run at most one, since GOGC is the
// process's.
type Tuner struct {
	floor uint64
	base  int // the GOGC in effect at Start

	mu      sync.Mutex
	stopped bool
	percent int // the GOGC last set
	sample  []metrics.Sample
}

// Start returns a Tuner that keeps the heap goal at or above floor bytes,
// or nil, which does nothing, when floor is not positive, when GOGC is off,
// or when GOMEMLIMIT leaves no room for it (the floor is at most half of
// the memory limit). Stop puts GOGC back.
func Start(floor int64) *Tuner {
	if floor <= 0 {
		return nil
	}
	// Reading GOGC means setting it: put it back at once.
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 {
		return nil
	}
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 {
		floor = min(floor, limit/2)
	}
	if floor <= 0 {
		return nil
	}
	t := &Tuner{
		floor:   uint64(floor),
		base:    base,
		percent: base,
		sample:  make([]metrics.Sample, len(sampleNames)),
	}
	for i, name := range sampleNames {
		t.sample[i].Name = name
	}
	t.adjust()
	t.arm()
	return t
}

// Stop stops tuning and puts the GOGC in effect at Start back.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	if t.percent != t.base {
		debug.SetGCPercent(t.base)
		t.percent = t.base
	}
}

// Floor returns the floor the Tuner keeps, in bytes: the one given to
// Start, or half of GOMEMLIMIT when that is less.
func (t *Tuner) Floor() int64 {
	if t == nil {
		return 0
	}
	return int64(t.floor)
}

// Percent returns the GOGC the Tuner set last.
func (t *Tuner) Percent() int {
	if t == nil {
		return -1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// sentinel is allocated unreachable: the collection that frees it runs its
// cleanup, which tunes and allocates the next one. Its pointer keeps it
// off the tiny allocator, whose blocks are freed together.
type sentinel struct {
	t *Tuner
	_ [2]uint64
}

// arm makes the end of the next collection call adjust.
func (t *Tuner) arm() {
	s := &sentinel{t: t}
	runtime.AddCleanup(s, func(t *Tuner) {
		if t.adjust() {
			t.arm()
		}
	}, t)
}

// adjust sets GOGC for the live heap of the last collection, and reports
// whether the Tuner still runs.
func (t *Tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.sample)
	var m [len(sampleNames)]uint64
	for i, s := range t.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			m[i] = s.Value.Uint64()
		}
	}
	p := PercentFor(m[0], m[0]+m[1]+m[2], t.floor, t.base)
	// A change of less than an eighth moves the goal by little: spare the
	// runtime the call.
	if d := p - t.percent; d > t.percent/8 || -d > t.percent/8 || (p == t.base) != (t.percent == t.base) {
		debug.SetGCPercent(p)
		t.percent = p
	}
	return true
}

// PercentFor returns the least GOGC that makes the heap goal after a
// collection at least floor. The runtime's goal is live + scanned*GOGC/100,
// where live is the heap the collection left and scanned that plus the
// stacks and globals it scanned, and at least 4 MiB * GOGC/100. It is base
// when that reaches the floor already, more otherwise, and at most 100000.
// A live heap of 0 means no collection has measured it yet: base.
func PercentFor(live, scanned, floor uint64, base int) int {
	if live == 0 || live >= floor {
		return base
	}
	scanned = max(scanned, live)
	// live + scanned*p/100 >= floor, or heapMinimum*p/100 >= floor,
	// rounded up.
	p := ((floor-live)*100 + scanned - 1) / scanned
	p = min(p, (floor*100+heapMinimum-1)/heapMinimum)
	if p > maxPercent {
		return maxPercent
	}
	return max(int(p), base)
}
