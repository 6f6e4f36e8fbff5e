package rediscache_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// benchValue is a JSON document of about 460 bytes, the size the hot path
// is measured with.
var benchValue = []byte(`{"id":1,"name":"` + strings.Repeat("w", 430) + `","ok":true}`)

// fillKeys fills n keys named 0..n-1 and returns them.
func fillKeys(b *testing.B, f *fixture, ns *warmcache.Namespace, n int) []warmcache.Key {
	b.Helper()
	keys := make([]warmcache.Key, n)
	entries := make([]warmcache.Entry, n)
	for i := range keys {
		keys[i] = warmcache.Key{Text: strconv.Itoa(i)}
		entries[i] = present(1, string(benchValue))
	}
	if err := fillMany(testContext(b), f.cache, ns, keys, entries); err != nil {
		b.Fatalf("FillMany: %v", err)
	}
	return keys
}

func BenchmarkGet(b *testing.B) {
	f := newFixture(b, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "bench"}
	key := fillKeys(b, f, ns, 1)[0]
	ctx := context.Background()
	b.SetBytes(int64(len(benchValue)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, hit, err := getOne(ctx, f.cache, ns, key); err != nil || !hit {
				b.Errorf("Get: hit %v, err %v", hit, err)
				return
			}
		}
	})
}

func BenchmarkGetMany(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			f := newFixture(b, rediscache.Options{})
			ns := &warmcache.Namespace{Name: "bench"}
			keys := fillKeys(b, f, ns, n)
			ctx := context.Background()
			b.SetBytes(int64(n * len(benchValue)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, hits, err := f.cache.GetMany(ctx, ns, keys)
					if err != nil || !hits[n-1] {
						b.Errorf("GetMany: err %v", err)
						return
					}
				}
			})
		})
	}
}
