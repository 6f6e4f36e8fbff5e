package main

import (
	"testing"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// segmentAt is a segment-curve point whose paths cost the cluster the
// given µs net of its idle work.
func segmentAt(net map[string]float64) point {
	p := point{segments: 3, rate: map[string]float64{}, cpu: map[string]float64{}, cluster: map[string]map[string]float64{}}
	for _, path := range segmentPaths {
		p.cluster[path] = map[string]float64{groupNet: net[path]}
		p.rate[path] = net[path] // told apart by round
	}
	return p
}

func TestSegmentRoundsKeepTheCheapestOfEachPath(t *testing.T) {
	var best point
	for round, net := range []map[string]float64{
		{"miss": 300, "hit": 5, "mget": 90, "put": 2000},
		{"miss": 250, "hit": 7, "mget": 95, "put": 2100},
		{"miss": 280, "hit": 4, "mget": 80, "put": 1900},
	} {
		best = segmentAt(net).keepCheapest(best, round)
	}
	for path, want := range map[string]float64{"miss": 250, "hit": 4, "mget": 80, "put": 1900} {
		if got := best.cluster[path][groupNet]; got != want || best.rate[path] != want {
			t.Errorf("%s kept %.0f µs at %.0f/s, want the round of %.0f", path, got, best.rate[path], want)
		}
		if len(best.rounds[path]) != 3 {
			t.Errorf("%s rounds = %v, want all three", path, best.rounds[path])
		}
	}
}

func TestIdleCPUIsPerSecond(t *testing.T) {
	// No cluster lives under this directory: every role measures zero, and
	// the window still lasts as long as asked.
	began := time.Now()
	idle := idleCPU(t.Context(), t.TempDir(), 50*time.Millisecond)
	if took := time.Since(began); took < 50*time.Millisecond {
		t.Errorf("the idle window took %s, want 50ms", took)
	}
	if idle[bench.RoleCoordinator] != 0 || idle[bench.RoleSegments] != 0 {
		t.Errorf("idle = %v, want nothing from an empty directory", idle)
	}
}
