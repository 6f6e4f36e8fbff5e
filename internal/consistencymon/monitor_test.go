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
	for gathered(t, reg, "warmcache_consistency_repairs_total", map[string]string{"result": "ok"}) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the repair was not counted as ok")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := gathered(t, reg, "warmcache_consistency_repairs_total", map[string]string{"result": "unrepaired"}); n != 0 {
		t.Errorf("%v repairs unrepaired, want 0", n)
	}
	n, sum := repairHistogram(t, reg)
	if n != 1 || sum <= 0 || sum > 1 {
		t.Errorf("repair time: %v observations summing to %vs, want one under a second", n, sum)
	}
}

// repairHistogram returns the count and the sum of
// warmcache_consistency_repair_seconds.
func repairHistogram(t *testing.T, reg *prometheus.Registry) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "warmcache_consistency_repair_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return 0, 0
}

// checks returns the Redis checks of result at age 10ms.
func checks(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	return gathered(t, reg, "warmcache_consistency_checks_total", map[string]string{"age": "10ms", "tier": "redis", "result": result})
}

// gathered returns the value of the counter name whose labels include
// want.
func gathered(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
