package main

import (
	"fmt"
	"strings"
	"testing"
)

// fleetAt is a point whose attacks cost the given µs, all in the instances.
func fleetAt(n int, miss, hit float64) fleetPoint {
	return fleetPoint{hot: "cluster", n: n, idle: map[string]float64{fleetService: miss},
		paths: map[string]fleetPath{
			"miss": {cpu: map[string]float64{fleetService: miss}},
			"hit":  {cpu: map[string]float64{fleetService: hit}},
		}}
}

func TestFleetMergeKeepsTheCheaperRoundOfEachAttack(t *testing.T) {
	p := fleetAt(1, 300, 60).merge(fleetAt(1, 250, 90)).merge(fleetAt(1, 400, 70))
	if miss := p.paths["miss"]; miss.total() != 250 || miss.worst != 400 {
		t.Errorf("miss = %.0f µs, worst %.0f; want 250 and 400", miss.total(), miss.worst)
	}
	if hit := p.paths["hit"]; hit.total() != 60 || hit.worst != 90 {
		t.Errorf("hit = %.0f µs, worst %.0f; want 60 and 90", hit.total(), hit.worst)
	}
	if p.idle[fleetService] != 250 {
		t.Errorf("idle = %v, want the round that idled cheapest", p.idle)
	}
}

func TestFleetBudgetJudgesTheMostInstancesAgainstOne(t *testing.T) {
	var b strings.Builder
	by, names := fleetSeries([]fleetPoint{fleetAt(1, 300, 60), fleetAt(4, 600, 100)})
	fleetBudget(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }, by, names)
	for _, want := range []string{"4 instances cost 1.67× a hit of 1", "missed", "may spend 90.0 µs per hit, 10.0 µs less than measured", "| warmcache | 60.0 | 100.0 | +40.0 | 100% |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the budget does not say %q:\n%s", want, b.String())
		}
	}
}
