package main

import (
	"testing"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// segmentAt is a segment-curve point whose paths cost the cluster the
// given µs in all, and 1 µs less net of idle work.
func segmentAt(all map[string]float64) point {
	p := point{segments: 3, rate: map[string]float64{}, cpu: map[string]float64{}, cluster: map[string]map[string]float64{}}
	for _, path := range segmentPaths {
		p.cluster[path] = map[string]float64{groupCluster: all[path], groupNet: all[path] - 1}
		p.rate[path] = all[path] // told apart by round
	}
	return p
}

func TestSegmentRoundsKeepTheCheapestOfEachPath(t *testing.T) {
	var best point
	for round, all := range []map[string]float64{
		{"miss": 300, "hit": 5, "mget": 90, "put": 2000},
		{"miss": 250, "hit": 7, "mget": 95, "put": 2100},
		{"miss": 280, "hit": 4, "mget": 80, "put": 1900},
	} {
		best = segmentAt(all).keepCheapest(best, round)
	}
	for path, want := range map[string]float64{"miss": 250, "hit": 4, "mget": 80, "put": 1900} {
		if got := best.cluster[path][groupCluster]; got != want || best.rate[path] != want {
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

func TestSegmentRoundsGoByTheWholeCost(t *testing.T) {
	// The second round's idle window took in other work: its net is the
	// lowest, its whole cost the highest. The first round is kept.
	a := segmentAt(map[string]float64{"miss": 300})
	b := segmentAt(map[string]float64{"miss": 600})
	b.cluster["miss"][groupNet] = 100
	best := b.keepCheapest(a.keepCheapest(point{}, 0), 1)
	if got := best.cluster["miss"][groupCluster]; got != 300 {
		t.Errorf("kept the round of %.0f µs, want 300", got)
	}
	if r := best.rounds["miss"]; len(r) != 2 || r[1] != 100 {
		t.Errorf("rounds = %v, want both rounds' net µs", r)
	}
}
