package nearcache_test

// These benchmarks chose the library under the near cache: otter (v2) and
// ristretto (v2), both W-TinyLFU, with the same byte budget and the same
// weight per entry. Run them with
//
//	go test -run=NONE -bench=. -benchtime=1x ./internal/nearcache/   (hit ratio)
//	go test -run=NONE -bench=Throughput -cpu=2 ./internal/nearcache/
//
// docs/performance.md holds the numbers.

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/maypok86/otter/v2"

	"github.com/warmcache/warmcache/internal/nearcache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

const (
	benchKeys     = 1 << 17 // distinct hot keys
	benchValue    = 460     // bytes per value, the size of a widget document
	benchBudget   = 8 << 20 // bytes: room for about 14% of the keys
	benchOverhead = 128     // bytes added to each entry's weight
	zipfS         = 1.01
)

// contender is a cache under comparison, keyed by string.
type contender interface {
	get(key string) bool
	set(key string, value []byte)
}

type otterCache struct{ c *otter.Cache[string, []byte] }

func (o otterCache) get(k string) bool      { _, ok := o.c.GetIfPresent(k); return ok }
func (o otterCache) set(k string, v []byte) { o.c.Set(k, v) }

func newOtter(tb testing.TB) contender {
	c, err := otter.New(&otter.Options[string, []byte]{
		MaximumWeight: benchBudget,
		Weigher:       func(k string, v []byte) uint32 { return uint32(len(k) + len(v) + benchOverhead) },
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.StopAllGoroutines() })
	return otterCache{c}
}

type ristrettoCache struct {
	c *ristretto.Cache[string, []byte]
}

func (r ristrettoCache) get(k string) bool { _, ok := r.c.Get(k); return ok }
func (r ristrettoCache) set(k string, v []byte) {
	r.c.Set(k, v, int64(len(k)+len(v)+benchOverhead))
}

func newRistretto(tb testing.TB) contender {
	c, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
		NumCounters:        10 * benchBudget / (benchValue + benchOverhead),
		MaxCost:            benchBudget,
		BufferItems:        64,
		IgnoreInternalCost: true,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return ristrettoCache{c}
}

// nearCache is this package's Cache, for the cost of its version rules.
type nearCache struct {
	c  *nearcache.Cache
	ns *warmcache.Namespace
}

func (n nearCache) get(k string) bool {
	_, ok := n.c.Get(n.ns, warmcache.Key{Text: k})
	return ok
}
func (n nearCache) set(k string, v []byte) {
	n.c.Set(n.ns, warmcache.Key{Text: k}, warmcache.Entry{Value: v, Version: 1, Found: true}, n.ns.NearTTL)
}

func newNear(tb testing.TB) contender {
	c, err := nearcache.New(nearcache.Options{MaxBytes: benchBudget}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return nearCache{c, &warmcache.Namespace{Name: "b", NearTTL: 1 << 62}}
}

var contenders = []struct {
	name string
	new  func(testing.TB) contender
}{
	{"otter", newOtter},
	{"ristretto", newRistretto},
	{"nearcache", newNear},
}

func keyName(i uint64) string { return "k" + strconv.FormatUint(i, 10) }

// BenchmarkThroughput is cache-aside on zipf-distributed keys from every
// GOMAXPROCS goroutine: a Get, and a Set on a miss. It reports the hit ratio
// next to the time per operation.
func BenchmarkThroughput(b *testing.B) {
	value := make([]byte, benchValue)
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = keyName(uint64(i))
	}
	// The trace is drawn in advance so that the zipf generator is not
	// measured; goroutines start at different points of it.
	z := rand.NewZipf(rand.New(rand.NewPCG(5, 6)), zipfS, 1, benchKeys-1)
	trace := make([]string, 1<<20)
	for i := range trace {
		trace[i] = keys[z.Uint64()]
	}
	for _, tc := range contenders {
		b.Run(tc.name, func(b *testing.B) {
			c := tc.new(b)
			warm := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), zipfS, 1, benchKeys-1)
			for range 4 * benchKeys {
				k := keys[warm.Uint64()]
				if !c.get(k) {
					c.set(k, value)
				}
			}
			replay(b, c, trace, value)
		})
	}
}

// replay runs trace cache-aside on c from parallel goroutines, each from
// its own place in the trace, and reports the hit ratio.
func replay(b *testing.B, c contender, trace []string, value []byte) {
	var seed, hits, ops atomic.Uint64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(1)) * len(trace) / 7
		var h, n uint64
		for pb.Next() {
			k := trace[i%len(trace)]
			i++
			n++
			if c.get(k) {
				h++
			} else {
				c.set(k, value)
			}
		}
		hits.Add(h)
		ops.Add(n)
	})
	b.ReportMetric(float64(hits.Load())/float64(max(ops.Load(), 1)), "hit-ratio")
}

// BenchmarkHit is the near cache's hot path in the service: parallel Gets of
// zipf-distributed keys that all fit in the budget, so that after the warm-up
// nearly every Get hits, as in the l1 scenario.
func BenchmarkHit(b *testing.B) {
	const keysN = 4096 // about 2.4 MB of entries in an 8 MiB budget
	value := make([]byte, benchValue)
	z := rand.NewZipf(rand.New(rand.NewPCG(8, 9)), zipfS, 1, keysN-1)
	trace := make([]string, 1<<16)
	for i := range trace {
		trace[i] = keyName(z.Uint64())
	}
	for _, tc := range contenders {
		b.Run(tc.name, func(b *testing.B) {
			c := tc.new(b)
			for range 4 {
				for i := range uint64(keysN) {
					if k := keyName(i); !c.get(k) {
						c.set(k, value)
					}
				}
			}
			replay(b, c, trace, value)
		})
	}
}

// BenchmarkScanHitRatio replays one trace per contender: zipf accesses to a
// hot key space, cache-aside, interrupted every 100,000 accesses by a
// one-pass scan of 30,000 keys never seen before (twice what the budget
// holds). It reports the hit ratio of the zipf accesses alone, with and
// without the scans; time per operation is not the point here.
func BenchmarkScanHitRatio(b *testing.B) {
	const (
		accesses = 2_000_000
		period   = 100_000
		scan     = 30_000
	)
	value := make([]byte, benchValue)
	for _, tc := range contenders[:2] {
		for _, scans := range []bool{false, true} {
			name := tc.name + "/no-scan"
			if scans {
				name = tc.name + "/scan"
			}
			b.Run(name, func(b *testing.B) {
				var ratio float64
				for range b.N {
					c := tc.new(b)
					z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), zipfS, 1, benchKeys-1)
					cold := uint64(benchKeys)
					var hits int
					for i := range accesses {
						if scans && i%period == period-1 {
							for range scan {
								k := keyName(cold)
								cold++
								if !c.get(k) {
									c.set(k, value)
								}
							}
						}
						k := keyName(z.Uint64())
						if c.get(k) {
							hits++
						} else {
							c.set(k, value)
						}
					}
					ratio = float64(hits) / accesses
				}
				b.ReportMetric(ratio, "hit-ratio")
			})
		}
	}
}
