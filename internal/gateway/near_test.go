package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/gateway"
	"github.com/warmcache/warmcache/internal/testproc"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestNearCacheTracking opens a gateway with its near cache on, once with
// key tracking (the default) and once without, fills its near cache with a
// key, and deletes the key in Redis with a plain client, as an operator
// would: with tracking the gateway stops serving the key from its near
// cache; without, it goes on, which shows that the check can fail.
func TestNearCacheTracking(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		dropped bool
	}{{"bcast", true}, {"off", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Near.Bytes = 1 << 20
			cfg.Near.Tracking = tc.mode
			for i := range cfg.Namespaces {
				if cfg.Namespaces[i].Name == "widgets" {
					// Longer than the test: only a drop ends the entry.
					cfg.Namespaces[i].NearTTL = time.Hour
				}
			}
			ctx := context.Background()
			g, err := gateway.Open(ctx, cfg, gateway.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.Close() })
			svc := g.Service()
			if _, err := svc.Put(ctx, "widgets", "5", []byte(`{"n":5}`), nil); err != nil {
				t.Fatal(err)
			}
			source := func() warmcache.Source {
				it, err := svc.Get(ctx, "widgets", "5")
				if err != nil {
					t.Fatal(err)
				}
				return it.Source
			}
			testproc.Eventually(t, 10*time.Second, "a read from the near cache", func() bool {
				return source() == warmcache.SourceNear
			})

			raw := redis.NewClient(&redis.Options{Addr: cfg.Redis.Addrs[0]})
			t.Cleanup(func() { _ = raw.Close() })
			if n, err := raw.Del(ctx, cfg.Redis.Prefix+"widgets:5").Result(); err != nil || n != 1 {
				t.Fatalf("DEL the key in Redis: %d, %v", n, err)
			}
			if tc.dropped {
				testproc.Eventually(t, 10*time.Second, "a read that is not from the near cache after the DEL", func() bool {
					return source() != warmcache.SourceNear
				})
				return
			}
			// Without tracking, nothing tells the near cache: it
			// serves the key again and again.
			for range 3 {
				if got := source(); got != warmcache.SourceNear {
					t.Fatalf("without tracking, a read after the DEL came from %q, want %q", got, warmcache.SourceNear)
				}
			}
		})
	}
}
