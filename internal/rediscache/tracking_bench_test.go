package rediscache_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/testproc"
)

// countingDropper counts the keys tracking reports.
type countingDropper struct{ drops atomic.Int64 }

func (d *countingDropper) Drop(string, string) { d.drops.Add(1) }
func (d *countingDropper) Clear()              {}

// BenchmarkTrackingWriteCost measures what key tracking costs Redis per
// write: SETs of 460-byte values under a tracked namespace, one at a time
// and in pipelines of 16, with 0, 1 and 4 instances tracking it (each a
// Tracking of its own). It reports Redis's own CPU time per SET
// (used_cpu_user + used_cpu_sys of INFO cpu), on a Redis of the
// benchmark's own, so that nothing else runs on it.
func BenchmarkTrackingWriteCost(b *testing.B) {
	srv := testproc.StartRedis(b)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = raw.Close() })
	c, err := rediscache.New(rediscache.Options{Addrs: []string{srv.Addr}, Prefix: "bench:"}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	value := strings.Repeat("x", 460)
	for _, subs := range []int{0, 1, 4} {
		for _, depth := range []int{1, 16} {
			b.Run(fmt.Sprintf("instances=%d/pipeline=%d", subs, depth), func(b *testing.B) {
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				d := &countingDropper{}
				for range subs {
					tr, err := rediscache.NewTracking(c, []string{"b"}, nil, nil)
					if err != nil {
						b.Fatal(err)
					}
					ready := make(chan struct{}, 1)
					wg.Go(func() { tr.Run(ctx, d, func() { ready <- struct{}{} }) })
					<-ready
					b.Cleanup(func() { _ = tr.Close() })
				}
				b.Cleanup(func() { cancel(); wg.Wait() })
				before := redisCPU(b, raw)
				sets := 0
				for b.Loop() {
					pipe := raw.Pipeline()
					for range depth {
						pipe.Set(ctx, "bench:b:"+strconv.Itoa(sets%100000), value, 0)
						sets++
					}
					if _, err := pipe.Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((redisCPU(b, raw)-before)*1e6/float64(sets), "redis-µs/set")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// redisCPU returns the CPU seconds Redis has used, user and system.
func redisCPU(tb testing.TB, raw *redis.Client) float64 {
	tb.Helper()
	info, err := raw.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("INFO cpu: %s: %v", line, err)
			}
			total += f
		}
	}
	return total
}
