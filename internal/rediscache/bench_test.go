package rediscache_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// BenchmarkGetManyShape reads 16 keys, a folded batch's size under load:
// with GetMany (one MGET on a standalone server, and the values decoded),
// and with a plain client as one MGET and as a pipeline of GETs (the shape
// Cluster keeps), the two shapes without decoding. Besides time per batch it reports the CPU per batch of this
// process and, where the Redis server is local, of Redis, read from
// /proc, since on a shared core that is what a batch costs:
//
//	go test ./internal/rediscache -run '^$' -bench GetManyShape -cpu 1 -benchtime 20000x -count 3
func BenchmarkGetManyShape(b *testing.B) {
	f := newFixture(b, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "bench"}
	keys := fillKeys(b, f, ns, 16)
	ctx := context.Background()
	rks := make([]string, len(keys))
	for i, k := range keys {
		rks[i] = f.redisKey(ns, k.Text)
	}
	redisPID := f.raw.InfoMap(ctx, "server").Item("Server", "process_id")
	shapes := []struct {
		name string
		read func() error
	}{
		{"GetMany", func() error {
			_, hits, err := f.cache.GetMany(ctx, ns, keys)
			if err == nil && !hits[len(keys)-1] {
				err = errors.New("a miss")
			}
			return err
		}},
		{"mget", func() error { return f.raw.MGet(ctx, rks...).Err() }},
		{"pipeline", func() error {
			pipe := f.raw.Pipeline()
			cmds := make([]*redis.StringCmd, len(rks))
			for i, k := range rks {
				cmds[i] = pipe.Get(ctx, k)
			}
			_, err := pipe.Exec(ctx)
			return err
		}},
	}
	for _, s := range shapes {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			self0, redis0 := cpuOf("self"), cpuOf(redisPID)
			for b.Loop() {
				if err := s.read(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuOf("self")-self0)/float64(b.N), "cpu-ns/op")
			if redis0 >= 0 {
				b.ReportMetric(float64(cpuOf(redisPID)-redis0)/float64(b.N), "redis-cpu-ns/op")
			}
		})
	}
}

// cpuOf returns the user and system CPU of process pid ("self" for this
// one) in nanoseconds, from /proc, or -1 where it cannot be read.
func cpuOf(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil || pid == "" {
		return -1
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the whole line.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
}
