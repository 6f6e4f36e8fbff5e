package harness

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// AtRate calls do(0), do(1), ... at rate calls a second for d, each call
// in its own goroutine when it is due (open loop: a slow answer does not
// delay the next call), and returns the latency of each, from its start to
// its answer, or the first error.
func AtRate(rate int, d time.Duration, do func(int) error) ([]time.Duration, error) {
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Go(func() {
			t := time.Now()
			errs[i] = do(i)
			lat[i] = time.Since(t)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return lat, nil
}

// RatePath is one path of CompareAtRate: a name, and one request.
type RatePath struct {
	Name string
	Do   func(int) error
}

// CompareAtRate sends each path open-loop at rate requests a second for d
// (AtRate), one path after the other, in rounds alternating rounds; it
// logs each attack's p50, p90 and p99 and reports each path's p50 and p90
// over all its rounds in µs.
func CompareAtRate(b *testing.B, rate int, d time.Duration, rounds int, paths []RatePath) {
	b.Helper()
	lat := make(map[string][]time.Duration)
	for range rounds {
		for _, p := range paths {
			l, err := AtRate(rate, d, p.Do)
			if err != nil {
				b.Fatalf("%s: %v", p.Name, err)
			}
			lat[p.Name] = append(lat[p.Name], l...)
			slices.Sort(l)
			b.Logf("%-16s p50 %6d µs  p90 %6d µs  p99 %6d µs", p.Name, l[len(l)/2].Microseconds(), l[len(l)*9/10].Microseconds(), l[len(l)*99/100].Microseconds())
		}
	}
	for _, p := range paths {
		l := lat[p.Name]
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)/2].Microseconds()), p.Name+"-p50-µs")
		b.ReportMetric(float64(l[len(l)*9/10].Microseconds()), p.Name+"-p90-µs")
	}
}
