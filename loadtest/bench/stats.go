package bench

import (
	"math"
	"slices"
	"time"
)

// Latency summarises the latencies of one attack.
type Latency struct {
	P50, P90, P99, Max time.Duration
	// Count is the number of samples; zero means the summary is empty.
	Count int
}

// Percentiles returns the exact nearest-rank percentiles of ds. It sorts
// ds in place. An empty ds gives the zero Latency.
func Percentiles(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{
		P50:   nearestRank(ds, 0.50),
		P90:   nearestRank(ds, 0.90),
		P99:   nearestRank(ds, 0.99),
		Max:   ds[len(ds)-1],
		Count: len(ds),
	}
}

// nearestRank returns the smallest sample with at least q of the samples at
// or below it; sorted must be sorted and not empty.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Ratio returns measured / baseline, or NaN when either is not a positive,
// finite number (a baseline that was not measured gives no ratio).
func Ratio(measured, baseline float64) float64 {
	if !(baseline > 0) || math.IsInf(baseline, 0) || !(measured >= 0) || math.IsInf(measured, 0) {
		return math.NaN()
	}
	return measured / baseline
}
