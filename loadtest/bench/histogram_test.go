package bench_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// foldSizes is a scrape of a histogram with two series (a label the
// harness does not ask for), its buckets out of order, beside a histogram
// whose name extends it.
const foldSizes = `# HELP warmcache_write_fold_size Writes per folded warehouse write.
# TYPE warmcache_write_fold_size histogram
warmcache_write_fold_size_bucket{lane="a",le="2"} 7
warmcache_write_fold_size_bucket{lane="a",le="1"} 5
warmcache_write_fold_size_bucket{lane="a",le="4"} 9
warmcache_write_fold_size_bucket{lane="a",le="+Inf"} 10
warmcache_write_fold_size_sum{lane="a"} 40
warmcache_write_fold_size_count{lane="a"} 10
warmcache_write_fold_size_bucket{lane="b",le="1"} 1
warmcache_write_fold_size_bucket{lane="b",le="2"} 1
warmcache_write_fold_size_bucket{lane="b",le="4"} 3
warmcache_write_fold_size_bucket{lane="b",le="+Inf"} 3
warmcache_write_fold_size_sum{lane="b"} 9
warmcache_write_fold_size_count{lane="b"} 3
warmcache_write_fold_size_bytes_bucket{le="1"} 1000
`

func TestParseHistogram(t *testing.T) {
	for _, tc := range []struct {
		name    string
		match   map[string]string
		want    bench.Histogram
		wantErr bool
	}{
		{"series summed, +Inf as the count", nil, bench.Histogram{
			Buckets: []bench.Bucket{{UpperBound: 1, Count: 6}, {UpperBound: 2, Count: 8}, {UpperBound: 4, Count: 12}}, Count: 13, Sum: 49}, false},
		{"one series", map[string]string{"lane": "b"}, bench.Histogram{
			Buckets: []bench.Bucket{{UpperBound: 1, Count: 1}, {UpperBound: 2, Count: 1}, {UpperBound: 4, Count: 3}}, Count: 3, Sum: 9}, false},
		{"no such series", map[string]string{"lane": "c"}, bench.Histogram{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bench.ParseHistogram(foldSizes, "warmcache_write_fold_size", tc.match)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !slices.Equal(got.Buckets, tc.want.Buckets) || got.Count != tc.want.Count || got.Sum != tc.want.Sum {
				t.Errorf("ParseHistogram = %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := bench.ParseHistogram(foldSizes, "warmcache_batch_keys", nil); err == nil {
		t.Error("ParseHistogram found a histogram that is not in the text")
	}
	bad := strings.Replace(foldSizes, `le="4"} 9`, `le="four"} 9`, 1)
	if _, err := bench.ParseHistogram(bad, "warmcache_write_fold_size", nil); err == nil {
		t.Error("ParseHistogram accepted a bucket bound that is not a number")
	}
}

// hist returns a histogram with cumulative counts at the bounds 1, 2, 4, 8.
func hist(c1, c2, c4, c8, count, sum float64) bench.Histogram {
	return bench.Histogram{Buckets: []bench.Bucket{{UpperBound: 1, Count: c1}, {UpperBound: 2, Count: c2}, {UpperBound: 4, Count: c4}, {UpperBound: 8, Count: c8}},
		Count: count, Sum: sum}
}

func TestHistogramSince(t *testing.T) {
	before, after := hist(1, 2, 3, 4, 4, 10), hist(11, 22, 43, 104, 104, 480)
	got, err := after.Since(before)
	if err != nil {
		t.Fatal(err)
	}
	if want := hist(10, 20, 40, 100, 100, 470); !slices.Equal(got.Buckets, want.Buckets) || got.Count != want.Count || got.Sum != want.Sum {
		t.Errorf("Since = %+v, want %+v", got, want)
	}
	other := hist(1, 2, 3, 4, 4, 10)
	other.Buckets[2].UpperBound = 5
	for name, tc := range map[string]struct{ after, before bench.Histogram }{
		"other bounds":      {after, other},
		"fewer buckets":     {after, bench.Histogram{Buckets: before.Buckets[:3], Count: 4}},
		"a count went down": {before, after},
	} {
		if _, err := tc.after.Since(tc.before); err == nil {
			t.Errorf("%s: Since returned no error", name)
		}
	}
}

func TestHistogramWholeQuantile(t *testing.T) {
	// 10 folds of 1, 10 of 2, 20 of 3 or 4, 60 of 5 to 8: spread evenly,
	// 15 each of 5, 6, 7 and 8 (ranks 41-55, 56-70, 71-85, 86-100).
	h := hist(10, 20, 40, 100, 100, 470)
	overflow := hist(10, 20, 40, 100, 110, 2000) // 10 folds above 8
	gap := hist(0, 0, 10, 10, 10, 35)            // all folds of 3 or 4
	for _, tc := range []struct {
		name string
		h    bench.Histogram
		q    float64
		want float64 // NaN: none
	}{
		{"the first bucket holds 1 only", h, 0.10, 1},
		{"the second holds 2 only", h, 0.11, 2},
		{"the last rank of (2, 4]'s first half", h, 0.30, 3},
		{"the first of its second half", h, 0.31, 4},
		{"median: rank 50 of 41-55", h, 0.50, 5},
		{"rank 55, the last 5", h, 0.55, 5},
		{"rank 56, the first 6", h, 0.56, 6},
		{"rank 85, an exact multiple", h, 0.85, 7},
		{"p99: rank 99", h, 0.99, 8},
		{"the top", h, 1, 8},
		{"q = 0: the least observation's bucket", gap, 0, 3},
		{"empty buckets below", gap, 0.5, 3},
		{"upper half after empty buckets", gap, 0.6, 4},
		{"in +Inf: the highest finite bound", overflow, 0.99, 8},
		{"no observations", hist(0, 0, 0, 0, 0, 0), 0.5, math.NaN()},
		{"q above 1", h, 1.5, math.NaN()},
		{"q below 0", h, -0.1, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.h.WholeQuantile(tc.q, 1)
			if math.IsNaN(tc.want) != math.IsNaN(got) || !math.IsNaN(got) && got != tc.want {
				t.Errorf("WholeQuantile(%g, 1) = %g, want %g", tc.q, got, tc.want)
			}
		})
	}
	// Observations of at least 3 in a first bucket (0, 4]: 3 or 4.
	low := bench.Histogram{Buckets: []bench.Bucket{{UpperBound: 4, Count: 10}}, Count: 10, Sum: 35}
	if got, want := []float64{low.WholeQuantile(0.5, 3), low.WholeQuantile(0.6, 3)}, []float64{3, 4}; !slices.Equal(got, want) {
		t.Errorf("WholeQuantile from 3 = %v, want %v", got, want)
	}
}

func TestWriteFold(t *testing.T) {
	f := bench.NewWriteFold(hist(10, 20, 40, 100, 100, 470))
	if f.P50 != 5 || f.P99 != 8 || f.Mean != 4.7 {
		t.Errorf("NewWriteFold = P50 %g, P99 %g, mean %g; want 5, 8, 4.7", f.P50, f.P99, f.Mean)
	}
	if got := f.Alone(); math.Abs(got-10.0/470) > 1e-12 {
		t.Errorf("Alone = %g, want 10/470 (10 writes in folds of one, of 470)", got)
	}
	none := bench.NewWriteFold(hist(0, 0, 0, 0, 0, 0))
	if none.P50 != 0 || none.P99 != 0 || none.Mean != 0 || !math.IsNaN(none.Alone()) {
		t.Errorf("NewWriteFold without folds = %+v (alone %g); want zeros and NaN", none, none.Alone())
	}
}
