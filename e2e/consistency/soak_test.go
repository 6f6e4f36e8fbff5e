package consistency_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// soakCycle is the length of one round of the mixed schedule in the soak:
// the soak repeats it for as long as it runs.
const soakCycle = 20 * time.Second

// soakSamples is the consistency monitor's sampling in the soak, in a
// million cache updates: one in twenty, enough samples at each age for
// the fraction consistent to mean something over ten minutes, few enough
// for the monitor's one goroutine to keep up with them.
const soakSamples = 50000

// testSoak runs the workload through one instance, with change capture
// and the near cache on, for WARMCACHE_TEST_SOAK (e.g. 10m; without it the
// soak does not run), under the mixed schedule repeated every soakCycle:
// latency bursts, late commands, a stall and resets of Redis, two Redis
// restarts, PostgreSQL's latency and resets. The run is checked as the
// fault pass's are but for the linearizability checker, and then the
// consistency monitor's figures: the fraction of sampled entries
// consistent at 1 s and 10 s, and every inconsistency it found repaired (a
// check after the repair found the key consistent) within 10 s of being
// found.
func testSoak(t *testing.T, c *cluster, w workload) {
	v := os.Getenv("WARMCACHE_TEST_SOAK")
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < soakCycle {
		t.Fatalf("WARMCACHE_TEST_SOAK=%q: want a duration of at least %v", v, soakCycle)
	}
	cfg := runConfig{capture: true, near: true}
	label := "soak/mixed/" + cfg.String()
	t.Run(label, func(t *testing.T) {
		w.d = d
		rig, in, admin := startUnderFaults(t, c, cfg, soakSamples)
		rec := rig.rec
		done := make(chan *tally, 1)
		go func() { done <- runClients(in, rec, w, 5) }()
		mixed := faultScenarios[len(faultScenarios)-1]
		if mixed.name != "mixed" {
			t.Fatalf("the last fault scenario is %q, want mixed", mixed.name)
		}
		cycles := 0
		for rig.from = 0; rig.from+soakCycle <= d; rig.from += soakCycle {
			mixed.run(rig, soakCycle)
			rig.at(soakCycle) // the cycle's end
			rig.calm()
			cycles++
		}
		tl := <-done
		t.Logf("%s: %d cycles of the mixed schedule (%v each) over %v; %.0f Redis updates and fills failed",
			label, cycles, soakCycle, d, failedUpdates(t, in))
		// Ten minutes make a history per key far beyond what the
		// linearizability checker decides in its time (the fault pass
		// checks 4 to 20 s runs); the soak holds the run to the checks
		// that scale: answers, read-your-writes, ETag regressions, the
		// warehouse read back, and the monitor.
		checkAnswers(t, label, tl)
		t.Logf("%s: %v", label, tl)
		checkOwnReads(t, label, rec)
		checkConverged(t, label, in, admin, w.keys)
		checkMonitor(t, label, in, tl.unknown)
		checkRepairs(t, label, in)
	})
}

// checkRepairs reports the monitor's fraction consistent at each age and
// its repairs, and fails unless it checked entries at 10 s, and every
// inconsistency it found was repaired within 10 s of being found.
func checkRepairs(t *testing.T, label string, in *instance) {
	t.Helper()
	var parts []string
	for _, tier := range []string{"redis", "near"} {
		for _, age := range []string{"1s", "10s", "1m0s"} {
			series := func(result string) float64 {
				return in.counter(t, `warmcache_consistency_checks_total{age="`+age+`",result="`+result+`",tier="`+tier+`"}`)
			}
			ok, bad, errs := series("consistent"), series("inconsistent"), series("error")
			if tier == "redis" && age == "10s" && ok+bad == 0 {
				t.Errorf("%s: the consistency monitor checked no Redis entry at 10s", label)
			}
			parts = append(parts, fmt.Sprintf("%s at %s %.0f of %.0f consistent (%s), %.0f checks failed by a fault",
				tier, age, ok, ok+bad, nines(ok, bad), errs))
		}
	}
	repaired := in.counter(t, `warmcache_consistency_repairs_total{result="ok"}`)
	unrepaired := in.counter(t, `warmcache_consistency_repairs_total{result="unrepaired"}`)
	failed := in.counter(t, `warmcache_consistency_repairs_total{result="error"}`)
	within := in.counter(t, `warmcache_consistency_repair_seconds_bucket{le="10"}`)
	total := in.counter(t, `warmcache_consistency_repair_seconds_count`)
	sum := in.counter(t, `warmcache_consistency_repair_seconds_sum`)
	mean := time.Duration(0)
	if total > 0 {
		mean = time.Duration(sum / total * float64(time.Second))
	}
	t.Logf("%s: consistency monitor: %s; dropped %.0f samples; %.0f inconsistencies repaired (%.0f within 10s of being found, mean %v), %.0f not repaired, %.0f repairs failed",
		label, strings.Join(parts, "; "), in.counter(t, "warmcache_consistency_dropped_total"),
		repaired, within, mean.Round(time.Millisecond), unrepaired, failed)
	if total > within || unrepaired > 0 || failed > 0 {
		t.Errorf("%s: of the inconsistencies found, %.0f were repaired later than 10s after being found, %.0f not repaired, %.0f repairs failed",
			label, total-within, unrepaired, failed)
	}
}

// nines prints a fraction consistent as nines: -log10 of the fraction
// inconsistent, or, with none inconsistent, what the samples can show at
// best.
func nines(ok, bad float64) string {
	switch n := ok + bad; {
	case n == 0:
		return "no samples"
	case bad == 0:
		return fmt.Sprintf("none inconsistent: at least %.1f nines as far as %.0f samples show", math.Log10(n), n)
	default:
		return fmt.Sprintf("%.1f nines", -math.Log10(bad/n))
	}
}
