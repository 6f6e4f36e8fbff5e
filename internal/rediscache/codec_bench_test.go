package rediscache_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/zdict"
)

// benchCodecs returns the codecs the benchmarks compare.
func benchCodecs() []warmcache.Codec {
	return []warmcache.Codec{warmcache.CodecNone, warmcache.CodecZstd, warmcache.CodecZstdDict}
}

// codecFixture returns a fixture whose namespace "widgets" has a dictionary
// trained on 2,000 widget documents, as `warmcache dict train` makes one.
func codecFixture(b *testing.B) *fixture {
	b.Helper()
	f := newFixture(b, rediscache.Options{})
	d, err := zdict.Train(widgetDocs(2000, 1), widgetDocs(200, 2), zdict.Options{})
	if err != nil {
		b.Fatalf("TrainDictionary: %v", err)
	}
	addDictionary(b, f.cache, "widgets", d)
	return f
}

// BenchmarkCodecEncode measures encoding one widget document for Redis, as a
// fill does, and reports the stored payload's size.
func BenchmarkCodecEncode(b *testing.B) {
	f := codecFixture(b)
	docs := widgetDocs(1000, 3)
	for _, codec := range benchCodecs() {
		b.Run("codec="+string(codec), func(b *testing.B) {
			ns := &warmcache.Namespace{Name: "widgets", Codec: codec}
			var stored, json int
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				doc := docs[i%len(docs)]
				v, err := f.cache.EncodeValue(ns, present(1, string(doc)))
				if err != nil {
					b.Fatal(err)
				}
				stored += len(v) - rediscache.HeaderLen
				json += len(doc)
			}
			b.ReportMetric(float64(stored)/float64(b.N), "payload-bytes/op")
			b.ReportMetric(float64(json)/float64(stored), "ratio")
		})
	}
}

// BenchmarkCodecDecode measures decoding one stored widget document, as Get
// does after the round trip.
func BenchmarkCodecDecode(b *testing.B) {
	f := codecFixture(b)
	docs := widgetDocs(1000, 3)
	for _, codec := range benchCodecs() {
		b.Run("codec="+string(codec), func(b *testing.B) {
			ns := &warmcache.Namespace{Name: "widgets", Codec: codec}
			stored := make([][]byte, len(docs))
			for i, doc := range docs {
				v, err := f.cache.EncodeValue(ns, present(1, string(doc)))
				if err != nil {
					b.Fatal(err)
				}
				stored[i] = v
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, ok := f.cache.DecodeValue(ns, stored[i%len(stored)]); !ok {
					b.Fatal("value does not decode")
				}
			}
		})
	}
}

// BenchmarkGetCodec measures a Get hit of a widget document, one at a time:
// the Redis round trip and the decoding.
func BenchmarkGetCodec(b *testing.B) {
	f := codecFixture(b)
	const n = 1000
	docs := widgetDocs(n, 3)
	ctx := context.Background()
	for _, codec := range benchCodecs() {
		b.Run("codec="+string(codec), func(b *testing.B) {
			ns := &warmcache.Namespace{Name: "widgets", Codec: codec}
			keys := make([]warmcache.Key, n)
			entries := make([]warmcache.Entry, n)
			for i := range keys {
				keys[i] = warmcache.Key{Text: string(codec) + ":" + strconv.Itoa(i)}
				entries[i] = present(1, string(docs[i]))
			}
			if err := fillMany(testContext(b), f.cache, ns, keys, entries); err != nil {
				b.Fatalf("FillMany: %v", err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, hit, err := getOne(ctx, f.cache, ns, keys[i%n]); err != nil || !hit {
					b.Fatalf("Get: hit %v, err %v", hit, err)
				}
			}
		})
	}
}

// BenchmarkRedisMemory fills 100,000 widget documents under each codec, on
// the fixture's own prefix, and reports the Redis memory they take: the
// growth of INFO memory's used_memory (which other clients of the server
// disturb) and MEMORY USAGE of every 100th key. The keys are deleted
// afterwards. Run it alone, once:
//
//	go test -run '^$' -bench RedisMemory -benchtime 1x ./internal/rediscache
func BenchmarkRedisMemory(b *testing.B) {
	const entries = 100_000
	const batch = 1000
	f := codecFixture(b)
	ctx := context.Background()
	for _, codec := range benchCodecs() {
		b.Run("codec="+string(codec), func(b *testing.B) {
			ns := &warmcache.Namespace{Name: "widgets", Codec: codec}
			for range b.N {
				before := usedMemory(b, f)
				keys := make([]warmcache.Key, 0, batch)
				values := make([]warmcache.Entry, 0, batch)
				for i := range entries {
					keys = append(keys, warmcache.Key{Text: strconv.Itoa(i)})
					values = append(values, present(int64(i+1), string(widgetDoc(i+1))))
					if len(keys) == batch {
						if err := fillMany(ctx, f.cache, ns, keys, values); err != nil {
							b.Fatalf("FillMany: %v", err)
						}
						keys, values = keys[:0], values[:0]
					}
				}
				grown := usedMemory(b, f) - before
				var sampled, n int64
				pipe := f.raw.Pipeline()
				var cmds []*redis.IntCmd
				for i := 0; i < entries; i += 100 {
					cmds = append(cmds, pipe.MemoryUsage(ctx, f.redisKey(ns, strconv.Itoa(i)), 0))
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatalf("MEMORY USAGE: %v", err)
				}
				for _, c := range cmds {
					sampled += c.Val()
					n++
				}
				b.ReportMetric(float64(grown)/entries, "used_memory-bytes/entry")
				b.ReportMetric(float64(sampled)/float64(n), "memory_usage-bytes/entry")
				b.ReportMetric(float64(grown)/(1<<20), "used_memory-MiB")
				deleteKeys(b, f, ns, entries)
			}
		})
	}
}

// usedMemory returns INFO memory's used_memory.
func usedMemory(b *testing.B, f *fixture) int64 {
	b.Helper()
	info, err := f.raw.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatalf("INFO memory: %v", err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	b.Fatal("INFO memory has no used_memory")
	return 0
}

// deleteKeys deletes keys 0..n-1 of ns in pipelines.
func deleteKeys(b *testing.B, f *fixture, ns *warmcache.Namespace, n int) {
	b.Helper()
	ctx := context.Background()
	for start := 0; start < n; start += 1000 {
		keys := make([]string, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			keys = append(keys, f.redisKey(ns, strconv.Itoa(i)))
		}
		if err := f.raw.Unlink(ctx, keys...).Err(); err != nil {
			b.Fatalf("UNLINK: %v", err)
		}
	}
}
