package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

func monitorTestRun(on bool, throughput float64, serverCPU time.Duration, requests uint64) monitorRun {
	return monitorRun{on: on, run: bench.Run{Throughput: throughput, Requests: requests,
		CPU: &bench.CPU{Used: map[string]time.Duration{bench.ProcServer: serverCPU}, Requests: requests}}}
}

// The pairs are neighbours whichever side comes first, the ratios are
// on/off, and the median of an even count is the mean of the middle two.
func TestSummarizeMonitorPairsNeighbours(t *testing.T) {
	runs := []monitorRun{
		monitorTestRun(true, 990, 100*time.Millisecond, 1000),   // 100 µs
		monitorTestRun(false, 1000, 100*time.Millisecond, 1000), // 100 µs: 0.99, 1
		monitorTestRun(false, 1000, 100*time.Millisecond, 1000),
		monitorTestRun(true, 950, 110*time.Millisecond, 1000), // 0.95, 1.1
		monitorTestRun(true, 1010, 90*time.Millisecond, 1000),
		monitorTestRun(false, 1000, 100*time.Millisecond, 1000), // 1.01, 0.9
		monitorTestRun(true, 1000, 100*time.Millisecond, 1000),
		monitorTestRun(true, 1000, 100*time.Millisecond, 1000), // same side: skipped
	}
	s := summarizeMonitor(runs)
	if s.pairs != 3 {
		t.Fatalf("pairs = %d, want 3", s.pairs)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(s.throughput.median, 0.99) || !near(s.throughput.min, 0.95) || !near(s.throughput.max, 1.01) {
		t.Errorf("throughput = %+v, want median 0.99 in [0.95, 1.01]", s.throughput)
	}
	if !near(s.cpu.median, 1) || !near(s.cpu.min, 0.9) || !near(s.cpu.max, 1.1) {
		t.Errorf("cpu = %+v, want median 1 in [0.9, 1.1]", s.cpu)
	}
	if m := spreadOf([]float64{1, 3, 2, 4}); m.median != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", m.median)
	}
}

// The section gives the verdict against 2% from the median.
func TestRenderMonitorVerdict(t *testing.T) {
	runs := []monitorRun{monitorTestRun(true, 970, time.Second, 1000), monitorTestRun(false, 1000, time.Second, 1000)}
	out := renderMonitor(runs, summarizeMonitor(runs), 0, "4s")
	if !strings.Contains(out, "beyond the target of 2%") {
		t.Errorf("a 3%% loss should miss the target:\n%s", out)
	}
	runs[0].run.Throughput = 995
	out = renderMonitor(runs, summarizeMonitor(runs), 0, "4s")
	if !strings.Contains(out, "within the target of 2%") || !strings.Contains(out, "| 1 | on |") {
		t.Errorf("a 0.5%% loss should meet the target:\n%s", out)
	}
}
