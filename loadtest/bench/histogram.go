package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Histogram is a Prometheus histogram as the service exposes it: the
// cumulative count of observations at or below each finite bucket bound,
// the count of all of them (the +Inf bucket) and their sum. The +Inf
// bucket is Count, so that the histogram encodes as JSON.
type Histogram struct {
	Buckets    []Bucket
	Count, Sum float64
}

// Bucket is one finite bucket of a Histogram: the observations at or
// below UpperBound, counted cumulatively.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// ParseHistogram reads histogram metric from text in Prometheus exposition
// format: its _bucket, _count and _sum series whose labels include every
// pair of match, summed over the series that differ in other labels. It
// returns an error when the metric has no bucket there, or a bucket's
// bound is not a number.
func ParseHistogram(text, metric string, match map[string]string) (Histogram, error) {
	byBound := map[float64]float64{}
	var badBound error
	eachSample(text, metric+"_bucket", match, func(labels string, v float64) {
		le := labelValue(labels, "le")
		bound, err := strconv.ParseFloat(le, 64)
		if err != nil {
			badBound = fmt.Errorf("bench: %s_bucket: bound %q: %w", metric, le, err)
			return
		}
		if !math.IsInf(bound, 1) {
			byBound[bound] += v
		}
	})
	if badBound != nil {
		return Histogram{}, badBound
	}
	if len(byBound) == 0 {
		return Histogram{}, fmt.Errorf("bench: no %s_bucket series in the metrics", metric)
	}
	h := Histogram{Count: SumSamples(text, metric+"_count", match), Sum: SumSamples(text, metric+"_sum", match)}
	for bound, n := range byBound {
		h.Buckets = append(h.Buckets, Bucket{UpperBound: bound, Count: n})
	}
	slices.SortFunc(h.Buckets, func(a, b Bucket) int { return cmp.Compare(a.UpperBound, b.UpperBound) })
	return h, nil
}

// Since returns what h counted after before was taken, both scraped from
// one process. It returns an error when their buckets differ, or a count
// went down (the process restarted in between).
func (h Histogram) Since(before Histogram) (Histogram, error) {
	if len(h.Buckets) != len(before.Buckets) {
		return Histogram{}, fmt.Errorf("bench: histogram of %d buckets after %d", len(h.Buckets), len(before.Buckets))
	}
	d := Histogram{Buckets: make([]Bucket, len(h.Buckets)), Count: h.Count - before.Count, Sum: h.Sum - before.Sum}
	for i, b := range h.Buckets {
		if b.UpperBound != before.Buckets[i].UpperBound {
			return Histogram{}, fmt.Errorf("bench: histogram bucket %d bound %g after %g", i, b.UpperBound, before.Buckets[i].UpperBound)
		}
		d.Buckets[i] = Bucket{UpperBound: b.UpperBound, Count: b.Count - before.Buckets[i].Count}
		if d.Buckets[i].Count < 0 {
			return Histogram{}, fmt.Errorf("bench: histogram bucket %g went down: the process restarted", b.UpperBound)
		}
	}
	if d.Count < 0 {
		return Histogram{}, fmt.Errorf("bench: histogram count went down: the process restarted")
	}
	return d, nil
}

// WholeQuantile estimates the q-quantile (0 ≤ q ≤ 1) of observations that
// are whole numbers of at least least, on whole bucket bounds: the
// nearest-rank quantile (the observation of rank ⌈q × Count⌉) if each
// bucket's observations were spread evenly over the whole numbers it holds
// (a bucket (4, 8] holds 5, 6, 7 and 8), the whole-number form of the
// linear interpolation of Prometheus's histogram_quantile. It is exact
// where a bucket holds one number. A rank in the +Inf bucket gives the
// highest finite bound. It returns NaN without observations.
func (h Histogram) WholeQuantile(q, least float64) float64 {
	if !h.quantiles(q) {
		return math.NaN()
	}
	rank := max(1, math.Ceil(q*h.Count-1e-9))
	i, below := h.bucketOf(rank)
	if i == len(h.Buckets) {
		return h.Buckets[i-1].UpperBound
	}
	lo, hi := math.Floor(h.lowerBound(i, least-1)), math.Floor(h.Buckets[i].UpperBound)
	if lo >= hi {
		return hi
	}
	step := math.Ceil((hi-lo)*(rank-below)/(h.Buckets[i].Count-below) - 1e-9)
	return lo + min(max(step, 1), hi-lo)
}

// quantiles reports whether h has a q-quantile: it has observations and
// 0 ≤ q ≤ 1.
func (h Histogram) quantiles(q float64) bool {
	return h.Count > 0 && len(h.Buckets) > 0 && q >= 0 && q <= 1
}

// bucketOf returns the index of the first bucket whose cumulative count
// reaches rank and is not zero, and the observations in the buckets
// before it; len(h.Buckets) when rank is in the +Inf bucket.
func (h Histogram) bucketOf(rank float64) (int, float64) {
	below := 0.0
	for i, b := range h.Buckets {
		if b.Count >= rank && b.Count > 0 {
			return i, below
		}
		below = b.Count
	}
	return len(h.Buckets), below
}

// lowerBound is the lower bound of bucket i: the upper bound of the one
// before, or lowest for the first.
func (h Histogram) lowerBound(i int, lowest float64) float64 {
	if i == 0 {
		return lowest
	}
	return h.Buckets[i-1].UpperBound
}

// Mean is Sum / Count, or NaN without observations.
func (h Histogram) Mean() float64 {
	if !(h.Count > 0) {
		return math.NaN()
	}
	return h.Sum / h.Count
}

// AtMost returns the observations at or below bound, a bucket's upper
// bound; NaN when no bucket has that bound.
func (h Histogram) AtMost(bound float64) float64 {
	for _, b := range h.Buckets {
		if b.UpperBound == bound {
			return b.Count
		}
	}
	return math.NaN()
}
