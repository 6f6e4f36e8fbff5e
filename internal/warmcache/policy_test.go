package warmcache_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestLifetimes: the core decides how long each entry lives in the hot
// tier and when it goes stale: the namespace's TTL for a row, its
// NegativeTTL for a key a read found absent, at least the TombstoneTTL for
// a delete, each spread by the jitter; a row is kept MaxStale longer than
// it is fresh.
func TestLifetimes(t *testing.T) {
	const tombstone = 45 * time.Second
	jittered := widgets()
	jittered.Name, jittered.TTL, jittered.NegativeTTL, jittered.TTLJitter, jittered.MaxStale = "jittered", 10*time.Minute, 20*time.Second, 0.2, time.Minute
	defaults := widgets()
	defaults.Name = "defaults"
	longNegative := widgets()
	longNegative.Name, longNegative.NegativeTTL, longNegative.TTLJitter = "long-negative", time.Minute, 0.1

	clk := memtier.NewClock()
	hot, warm := memtier.NewHot(clk.Now), memtier.NewWarm()
	svc, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{jittered, defaults, longNegative}, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{Now: clk.Now, TombstoneTTL: tombstone})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Each case makes key hold its kind of entry.
	present := func(ns *warmcache.Namespace, key string) {
		if _, err := svc.Put(ctx, ns.Name, key, []byte(`1`), nil); err != nil {
			t.Fatal(err)
		}
	}
	readAbsent := func(ns *warmcache.Namespace, key string) {
		if _, err := svc.Get(ctx, ns.Name, key); err == nil {
			t.Fatal("an absent key was found")
		}
	}
	deleted := func(ns *warmcache.Namespace, key string) {
		present(ns, key)
		if err := svc.Delete(ctx, ns.Name, key, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, tt := range []struct {
		name  string
		ns    *warmcache.Namespace
		make  func(*warmcache.Namespace, string)
		fresh time.Duration // before jitter
		stale time.Duration // kept after freshness
	}{
		{"present", jittered, present, 10 * time.Minute, time.Minute},
		{"read absent", jittered, readAbsent, 20 * time.Second, 0},
		{"delete absent", jittered, deleted, tombstone, 0},
		{"present default", defaults, present, 5 * time.Minute, 0},
		{"read absent default", defaults, readAbsent, 30 * time.Second, 0},
		{"delete absent default", defaults, deleted, tombstone, 0},
		{"delete absent negative longer than tombstone", longNegative, deleted, time.Minute, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lo := time.Duration(float64(tt.fresh) * (1 - tt.ns.TTLJitter))
			hi := time.Duration(float64(tt.fresh) * (1 + tt.ns.TTLJitter))
			if strings.HasPrefix(tt.name, "delete") {
				lo = max(lo, tombstone)
			}
			seen := map[time.Duration]bool{}
			const samples = 20
			for j := range samples {
				key := strconv.Itoa(i*100 + j + 1)
				tt.make(tt.ns, key)
				e, ok := hot.Peek(tt.ns.Name, key)
				if !ok {
					t.Fatalf("key %s not cached", key)
				}
				fresh := e.FreshUntil.Sub(clk.Now())
				if fresh < lo || fresh > hi {
					t.Errorf("fresh for %v, want within [%v, %v]", fresh, lo, hi)
				}
				if keep := hot.Keep(tt.ns.Name, key); keep != fresh+tt.stale {
					t.Errorf("kept for %v, want %v fresh and %v stale", keep, fresh, tt.stale)
				}
				seen[fresh] = true
			}
			if tt.ns.TTLJitter > 0 && len(seen) < 2 {
				t.Errorf("%d fills with jitter %v all got the same lifetime", samples, tt.ns.TTLJitter)
			}
		})
	}
}

// TestNearLifetime: the core decides how long the near cache keeps an
// entry: the namespace's NearTTL, cut short at the entry's hot-tier
// freshness, and not at all for a namespace without NearTTL.
func TestNearLifetime(t *testing.T) {
	clk := memtier.NewClock()
	near := widgets()
	near.NearTTL = time.Second
	off := widgets()
	off.Name = "off"
	svc, err := warmcache.NewService(memtier.NewHot(clk.Now), memtier.NewWarm(), []*warmcache.Namespace{near, off}, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	row := warmcache.Entry{Value: []byte(`1`), Version: 1, Found: true}
	soon := row
	soon.FreshUntil = clk.Now().Add(100 * time.Millisecond)
	later := row
	later.FreshUntil = clk.Now().Add(time.Hour)
	for _, tt := range []struct {
		name string
		ns   *warmcache.Namespace
		e    warmcache.Entry
		want time.Duration
	}{
		{"NearTTL", near, row, time.Second},
		{"NearTTL before freshness ends", near, later, time.Second},
		{"cut at freshness", near, soon, 100 * time.Millisecond},
		{"namespace without NearTTL", off, row, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := warmcache.NearLife(svc, tt.ns, tt.e)
			if tt.want == 0 && got > 0 || tt.want != 0 && got != tt.want {
				t.Errorf("nearLife = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("marks outlive the longest read", func(t *testing.T) {
		hot, warm := warmcache.DefaultHotTimeout, warmcache.DefaultWarmTimeout
		if got := warmcache.NearMarkTTL(hot, warm); got <= hot+warm {
			t.Errorf("NearMarkTTL(%v, %v) = %v, want more than a hot-tier miss and a warehouse read", hot, warm, got)
		}
	})
}
