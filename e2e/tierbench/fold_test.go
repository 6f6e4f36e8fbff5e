package tierbench_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

const rows = 200_000

// tiers are a migrated and seeded warehouse and a Redis key prefix, which
// the services of the benchmarks share.
type tiers struct {
	ns     *warmcache.Namespace
	dsn    string
	addr   string
	raw    *redis.Client
	prefix string
}

func newTiers(b *testing.B) tiers {
	b.Helper()
	ctx := context.Background()
	dsn := testenv.NewDatabase(b)
	ns := &warmcache.Namespace{Name: "w", Table: "w", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version",
		TTL: time.Hour, NegativeTTL: time.Hour}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	m, err := schema.OpenMigrator(ctx, conn, []schema.Table{{Namespace: ns, Managed: true, Storage: schema.Storage{Partitions: 8}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO w SELECT i, jsonb_build_object('widget', jsonb_build_object('id', i::text, 'debug', 'on', 'title', 'Sample Konfabulator Widget')), nextval('warmcache_version_seq') FROM generate_series(1, $1::int) i`, rows); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE w"); err != nil {
		b.Fatal(err)
	}
	addr := testenv.RedisAddr(b)
	prefix := "bench-" + testenv.RandomSuffix(b) + ":"
	raw := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() {
		flush(raw, prefix)
		raw.Close()
	})
	return tiers{ns: ns, dsn: dsn, addr: addr, raw: raw, prefix: prefix}
}

func flush(raw *redis.Client, prefix string) {
	ctx := context.Background()
	iter := raw.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			raw.Del(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		raw.Del(ctx, batch...)
	}
}

// service builds a gateway over the tiers whose core folds up to fold
// concurrent reads, and returns its core. It is closed when b ends.
func (t tiers) service(b *testing.B, fold int) *warmcache.Service {
	b.Helper()
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN": t.dsn,
		"WARMCACHE_REDIS_ADDRS":  t.addr,
		"WARMCACHE_REDIS_PREFIX": t.prefix,
		"WARMCACHE_FRESHNESS":    "off",
	}
	cfg := harness.Config(b, env)
	cfg.Namespaces = []*warmcache.Namespace{t.ns}
	g := harness.Open(b, cfg, harness.Options{
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		SkipDoctor: true,
		Redis:      func(o *rediscache.Options) { o.PoolSize = 64 },
		Core: func(o *warmcache.Options) {
			o.MaxBatchFold, o.MaxWarmInflight = fold, 64
			o.WarmTimeout, o.HotTimeout = 10*time.Second, time.Second
		},
	})
	return g.Service()
}

// BenchmarkMiss reads distinct cold keys from 32 goroutines: every read
// goes to the warehouse. fold=64 folds concurrent misses into one query;
// fold=1 sends one query per miss.
func BenchmarkMiss(b *testing.B) {
	t := newTiers(b)
	var next atomic.Int64
	for _, fold := range []int{1, 64} {
		b.Run("fold="+strconv.Itoa(fold), func(b *testing.B) {
			svc := t.service(b, fold)
			flush(t.raw, t.prefix)
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := next.Add(1)%rows + 1
					if _, err := svc.Get(context.Background(), "w", strconv.FormatInt(k, 10)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkHit reads warm keys from 32 goroutines: every read is a Redis
// hit. fold=64 pipelines concurrent GETs; fold=1 sends one GET per read.
func BenchmarkHit(b *testing.B) {
	t := newTiers(b)
	const hot = 10_000
	warmSvc := t.service(b, 64)
	for k := 1; k <= hot; k++ {
		if _, err := warmSvc.Get(context.Background(), "w", strconv.Itoa(k)); err != nil {
			b.Fatal(err)
		}
	}
	for _, fold := range []int{1, 64} {
		b.Run("fold="+strconv.Itoa(fold), func(b *testing.B) {
			svc := t.service(b, fold)
			var next atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := next.Add(1)%hot + 1
					if _, err := svc.Get(context.Background(), "w", strconv.FormatInt(k, 10)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
