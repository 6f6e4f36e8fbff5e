package harness

import (
	"sync"
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
