package consistencymon_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/consistencymon"
	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
)

func widgets() *warmcache.Namespace {
	return &warmcache.Namespace{Name: "widgets", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true, TTL: time.Hour}
}

// TestMonitorCountsAndRepairs samples every update, checks each key
// shortly after, counts a consistent key and an inconsistent one (a Redis
// entry older than the warehouse's row, as a lost update leaves), and
// repairs the inconsistent one.
func TestMonitorCountsAndRepairs(t *testing.T) {
	reg := prometheus.NewRegistry()
	mon, err := consistencymon.New(consistencymon.Options{Rate: 1, Delays: []time.Duration{10 * time.Millisecond}}, reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	ns := widgets()
	svc, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{ns}, reg, slog.New(slog.NewTextHandler(io.Discard, nil)),
		warmcache.Options{Sampler: mon})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go mon.Run(ctx, svc)

	if _, err := svc.Put(ctx, "widgets", "1", []byte(`{"v":1}`), nil); err != nil {
		t.Fatal(err)
	}
	// Key 2 is written, then the warehouse moves on without the cache
	// hearing of it: Redis keeps the older version.
	if _, err := svc.Put(ctx, "widgets", "2", []byte(`{"v":1}`), nil); err != nil {
		t.Fatal(err)
	}
	row, _ := warm.Row("widgets", "2")
	warm.Set("widgets", "2", []byte(`{"v":2}`), row.Version+10)

	deadline := time.Now().Add(10 * time.Second)
	for {
		c, i := checks(t, reg, "consistent"), checks(t, reg, "inconsistent")
		if c >= 1 && i >= 1 {
			if i != 1 {
				t.Fatalf("%v inconsistent checks, want 1", i)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %v consistent and %v inconsistent checks, want 1 and 1", c, i)
		}
		time.Sleep(5 * time.Millisecond)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		e, _ := hot.Peek("widgets", "2")
		if e.Version == row.Version+10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis holds version %d of the inconsistent key, want it repaired to %d", e.Version, row.Version+10)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The repair is counted once a check after it found the key
	// consistent, with its time from finding the key inconsistent: well
	// under a second here.
	deadline = time.Now().Add(10 * time.Second)
	for promregtest.Value(t, reg, "warmcache_consistency_repairs_total", "result", "ok") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the repair was not counted as ok")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := promregtest.Value(t, reg, "warmcache_consistency_repairs_total", "result", "unrepaired"); n != 0 {
		t.Errorf("%v repairs unrepaired, want 0", n)
	}
	n, sum := promregtest.Histogram(t, reg, "warmcache_consistency_repair_seconds")
	if n != 1 || sum <= 0 || sum > 1 {
		t.Errorf("repair time: %v observations summing to %vs, want one under a second", n, sum)
	}
}

// checks returns the Redis checks of result at age 10ms.
func checks(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	return promregtest.Value(t, reg, "warmcache_consistency_checks_total", "age", "10ms", "tier", "redis", "result", result)
}
