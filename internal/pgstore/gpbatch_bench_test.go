package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// gpBenchRows is the size of the Greenplum benchmark's table.
const gpBenchRows = 100_000

// BenchmarkGreenplumBatch measures, on a real Greenplum cluster, how many
// keys per second a batch of random keys reads at 1 to 8 clients, four
// ways, all in the simple protocol:
//
//   - single: the store's Lookup of each key, one round trip each, each
//     direct-dispatched to its key's segment;
//   - statements: one `key = $1` statement per key, all in one round trip
//     (a pgx.Batch, which the simple protocol sends as one multi-statement
//     query), each direct-dispatched;
//   - by_segment: one `= ANY` per segment's keys, with that segment named
//     (gp_segment_id), in one round trip: the segments are read from the
//     table beforehand, the best any client-side hashing could do;
//   - any: the store's LookupMany, one `= ANY` of the batch's keys.
//
// Each reports keys/s; only the ratios between them carry to another
// cluster. A client is a goroutine with a connection of its own.
func BenchmarkGreenplumBatch(b *testing.B) {
	dsn := testenv.NewGreenplumDatabase(b)
	ctx := context.Background()
	execSQL(b, dsn, fmt.Sprintf(`CREATE TABLE widgets (key bigint PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL) DISTRIBUTED BY (key);
INSERT INTO widgets SELECT g, jsonb_build_object('id', g, 'name', 'widget ' || g, 'color', (ARRAY['red','green','blue'])[g %% 3 + 1], 'note', repeat('x', 40 + g %% 100)), g
FROM generate_series(1, %d) g;
ANALYZE widgets;`, gpBenchRows))
	widgets := widgetsNamespace()
	widgets.Writable = false
	s, err := openStore(b, pgstore.Options{DSN: dsn, MaxConns: 8}, prometheus.NewRegistry(), widgets)
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	pool := gpBenchPool(b, dsn)
	segment := make([]int32, gpBenchRows+1)
	rows, err := pool.Query(ctx, "SELECT key, gp_segment_id FROM widgets")
	if err != nil {
		b.Fatal(err)
	}
	var k int64
	var seg int32
	if _, err := pgx.ForEachRow(rows, []any{&k, &seg}, func() error { segment[k] = seg; return nil }); err != nil {
		b.Fatal(err)
	}
	stmts, err := pgstore.Statements(widgets, false)
	if err != nil {
		b.Fatal(err)
	}
	bySegment := stmts.LookupMany + " AND gp_segment_id = $2::int"

	ways := []struct {
		name string
		read func(ctx context.Context, keys []warmcache.Key) (int, error)
	}{
		{"single", func(ctx context.Context, keys []warmcache.Key) (int, error) {
			found := 0
			for _, k := range keys {
				e, err := s.Lookup(ctx, widgets, k)
				if err != nil {
					return 0, err
				}
				if e.Found {
					found++
				}
			}
			return found, nil
		}},
		{"statements", func(ctx context.Context, keys []warmcache.Key) (int, error) {
			batch := &pgx.Batch{}
			for _, k := range keys {
				batch.Queue(stmts.Lookup, k.Int)
			}
			return countBatch(pool.SendBatch(ctx, batch), len(keys))
		}},
		{"by_segment", func(ctx context.Context, keys []warmcache.Key) (int, error) {
			groups := map[int32][]int64{}
			for _, k := range keys {
				groups[segment[k.Int]] = append(groups[segment[k.Int]], k.Int)
			}
			batch := &pgx.Batch{}
			for seg, ints := range groups {
				batch.Queue(bySegment, ints, seg)
			}
			return countBatch(pool.SendBatch(ctx, batch), len(groups))
		}},
		{"any", func(ctx context.Context, keys []warmcache.Key) (int, error) {
			entries, err := s.LookupMany(ctx, widgets, keys)
			found := 0
			for _, e := range entries {
				if e.Found {
					found++
				}
			}
			return found, err
		}},
	}
	for _, n := range []int{8, 64} {
		for _, clients := range []int{1, 2, 4, 8} {
			for _, way := range ways {
				b.Run(fmt.Sprintf("keys=%d/clients=%d/%s", n, clients, way.name), func(b *testing.B) {
					gpBenchClients(b, clients, n, way.read)
				})
			}
		}
	}
}

// gpBenchPool returns a pool of 8 connections to dsn in the simple
// protocol, with the session settings of key lookups.
func gpBenchPool(b *testing.B, dsn string) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, stmt := range dialect.SessionSettings("") {
			if _, err := c.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// countBatch reads the results of statements queued statements, each
// rows of (key or value, ...), and returns the rows.
func countBatch(br pgx.BatchResults, statements int) (int, error) {
	found := 0
	for range statements {
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return 0, err
		}
		for rows.Next() {
			found++
		}
		if err := rows.Err(); err != nil {
			br.Close()
			return 0, err
		}
	}
	return found, br.Close()
}

// gpBenchClients runs b.N batches of n random keys with clients
// goroutines, checks that every key was found, and reports keys/s.
func gpBenchClients(b *testing.B, clients, n int, read func(context.Context, []warmcache.Key) (int, error)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(b.N)))
			keys := make([]warmcache.Key, n)
			seen := make(map[int64]bool, n)
			for next.Add(1) <= int64(b.N) {
				clear(seen)
				for i := range keys {
					k := int64(rng.IntN(gpBenchRows) + 1)
					for seen[k] {
						k = int64(rng.IntN(gpBenchRows) + 1)
					}
					seen[k] = true
					keys[i] = warmcache.Key{Text: fmt.Sprint(k), Int: k}
				}
				found, err := read(context.Background(), keys)
				if err == nil && found != n {
					err = fmt.Errorf("found %d of %d keys", found, n)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "keys/s")
	b.ReportMetric(0, "ns/op")
}
