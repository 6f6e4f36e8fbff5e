package bench

import (
	"context"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Closed is what a closed-loop attack measured.
type Closed struct {
	// Latencies are those of the successful requests (status below 300),
	// sorted.
	Latencies []time.Duration
	// Tags counts the X-Cache header of the successful requests ("" where
	// there was none).
	Tags map[string]int
	// Errors counts the requests that failed or were answered 300 or more.
	Errors int
	// Took is the wall time of the attack.
	Took time.Duration
}

// ClosedLoop attacks with workers clients, each sending the request next
// returns when its last one is answered, until d has passed (zero: no
// bound), ctx is done, or next returns nil. next is called from every
// worker at once.
func ClosedLoop(ctx context.Context, client *http.Client, workers int, d time.Duration, next func() *http.Request) Closed {
	start := time.Now()
	deadline := start.Add(d)
	parts := make([]Closed, workers)
	var wg sync.WaitGroup
	for w := range parts {
		wg.Add(1)
		go func(part *Closed) {
			defer wg.Done()
			part.Tags = map[string]int{}
			for (d == 0 || time.Now().Before(deadline)) && ctx.Err() == nil {
				req := next()
				if req == nil {
					return
				}
				part.send(ctx, client, req)
			}
		}(&parts[w])
	}
	wg.Wait()
	res := Closed{Tags: map[string]int{}, Took: time.Since(start)}
	for _, p := range parts {
		res.Latencies = append(res.Latencies, p.Latencies...)
		res.Errors += p.Errors
		for tag, n := range p.Tags {
			res.Tags[tag] += n
		}
	}
	slices.Sort(res.Latencies)
	return res
}

// send sends one request and counts its answer in c.
func (c *Closed) send(ctx context.Context, client *http.Client, req *http.Request) {
	t0 := time.Now()
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		c.Errors++
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		c.Errors++
		return
	}
	c.Latencies = append(c.Latencies, time.Since(t0))
	c.Tags[resp.Header.Get("X-Cache")]++
}

// Rate returns the successful requests per second.
func (c Closed) Rate() float64 { return float64(len(c.Latencies)) / c.Took.Seconds() }

// Quantile returns the latency at quantile q (0.5: the median) of the
// successful requests, or zero where there were none.
func (c Closed) Quantile(q float64) time.Duration {
	if len(c.Latencies) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(c.Latencies)))) - 1
	return c.Latencies[max(0, min(i, len(c.Latencies)-1))]
}
