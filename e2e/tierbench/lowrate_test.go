package tierbench_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// BenchmarkHitLowRate takes apart the latency of a Redis hit through the
// core at a rate far below saturation, in one process: the core's Get of
// cached keys (folded, fold=64, and with folding off, fold=1) against one
// GET of the same Redis key with go-redis, each sent open-loop at 1,000
// reads a second for 3 s, in alternating rounds. It reports the p50 and
// p90 of each in µs (b.N is ignored; run it with -benchtime 1x): the
// core's less the GET's is what the read path adds to a Redis round trip.
func BenchmarkHitLowRate(b *testing.B) {
	const (
		rate   = 1000
		runFor = 3 * time.Second
		hot    = 100
		rounds = 2
	)
	t := newTiers(b)
	ctx := context.Background()
	folded, single := t.service(b, 64), t.service(b, 1)
	for k := 1; k <= hot; k++ {
		if _, err := folded.Get(ctx, "w", strconv.Itoa(k)); err != nil {
			b.Fatal(err)
		}
	}
	rawKey := t.prefix + "w:1"
	if err := t.raw.Get(ctx, rawKey).Err(); err != nil {
		b.Fatalf("GET %s: %v", rawKey, err)
	}
	coreGet := func(svc *warmcache.Service) func(int) error {
		return func(i int) error {
			it, err := svc.Get(ctx, "w", strconv.Itoa(i%hot+1))
			if err == nil && it.Source != warmcache.SourceHot {
				err = fmt.Errorf("read of %d answered by %q, want a Redis hit", i%hot+1, it.Source)
			}
			return err
		}
	}
	paths := []struct {
		name string
		do   func(int) error
	}{
		{"core-fold64", coreGet(folded)},
		{"core-fold1", coreGet(single)},
		{"redis-get", func(i int) error { return t.raw.Get(ctx, t.prefix+"w:"+strconv.Itoa(i%hot+1)).Err() }},
	}
	lat := make(map[string][]time.Duration)
	for range rounds {
		for _, p := range paths {
			d, err := harness.AtRate(rate, runFor, p.do)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			lat[p.name] = append(lat[p.name], d...)
			slices.Sort(d)
			b.Logf("%-12s p50 %6d µs  p90 %6d µs  p99 %6d µs", p.name, d[len(d)/2].Microseconds(), d[len(d)*9/10].Microseconds(), d[len(d)*99/100].Microseconds())
		}
	}
	for _, p := range paths {
		d := lat[p.name]
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds()), p.name+"-p50-µs")
		b.ReportMetric(float64(d[len(d)*9/10].Microseconds()), p.name+"-p90-µs")
	}
}
