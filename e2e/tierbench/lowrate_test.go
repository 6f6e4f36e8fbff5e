package tierbench_test

import (
	"context"
	"fmt"
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
	harness.CompareAtRate(b, rate, runFor, rounds, []harness.RatePath{
		{Name: "core-fold64", Do: coreGet(folded)},
		{Name: "core-fold1", Do: coreGet(single)},
		{Name: "redis-get", Do: func(i int) error { return t.raw.Get(ctx, t.prefix+"w:"+strconv.Itoa(i%hot+1)).Err() }},
	})
}
