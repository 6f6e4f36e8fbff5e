package service_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/testenv"
)

// TestTTLEndToEnd writes items with a TTL through the whole service, on
// PostgreSQL and on Greenplum, for the built-in heap namespace (widgets,
// with the near cache on) and the append-optimized one (widgets_archive on
// Greenplum):
//   - REST's ?ttl= and gRPC's ttl_seconds set the expiry, which reads come
//     back with (Warmcache-Expires, Item.expires_at);
//   - Redis keeps the item no longer than its TTL;
//   - the item reads as absent within a second of its expiry, from every
//     tier: reads race the expiry instant from several clients, and no
//     read that starts after the expiry returns the value;
//   - the sweeper then deletes the row and counts it in
//     warmcache_expired_rows_deleted_total.
func TestTTLEndToEnd(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			dsn := w.NewDatabase(t)
			migrateAndSeed(t, dsn, 10)
			prefix := "ttl-" + testenv.RandomSuffix(t) + ":"
			s := startServing(t, map[string]string{
				"WARMCACHE_POSTGRES_DSN":     dsn,
				"WARMCACHE_PG_MAX_CONNS":     "4",
				"WARMCACHE_REDIS_ADDRS":      redisAddr,
				"WARMCACHE_REDIS_PREFIX":     prefix,
				"WARMCACHE_HOT_TIMEOUT":      "1s",
				"WARMCACHE_NEAR_CACHE_BYTES": "1048576",
				"WARMCACHE_SWEEP_INTERVAL":   "200ms",
			}, 2)
			rc := redis.NewClient(&redis.Options{Addr: redisAddr})
			t.Cleanup(func() { rc.Close() })
			for i, ns := range laneNamespaces {
				t.Run(ns, func(t *testing.T) {
					key := fmt.Sprint(1001 + i)
					checkTTLExpiry(t, s.http, rc, prefix, dsn, ns, key)
					checkTTLGRPC(t, s.grpc, ns, fmt.Sprint(2001+i))
				})
			}
		})
	}
}

// checkTTLExpiry writes key with a TTL of 2s, reads it from the tiers,
// races reads against its expiry and waits for the sweeper to delete it.
func checkTTLExpiry(t *testing.T, base string, rc *redis.Client, prefix, dsn, ns, key string) {
	url := base + "/v1/kv/" + ns + "/" + key
	put := call(t, "PUT", url+"?ttl=2", `{"ttl": true}`, "Content-Type", "application/json")
	if put.status != http.StatusOK {
		t.Fatalf("PUT ?ttl=2 = %d %s", put.status, put.body)
	}
	expires, err := time.Parse(time.RFC3339Nano, put.header.Get("Warmcache-Expires"))
	if err != nil {
		t.Fatalf("PUT answered Warmcache-Expires %q: %v", put.header.Get("Warmcache-Expires"), err)
	}
	if d := time.Until(expires); d <= 0 || d > 2*time.Second+500*time.Millisecond {
		t.Fatalf("the item expires in %v, want about 2s", d)
	}
	// The header has millisecond precision: the row expires within the
	// millisecond after it.
	deadline := expires.Add(time.Millisecond)

	sources := map[string]bool{}
	for range 3 {
		r := call(t, "GET", url, "")
		if r.status != http.StatusOK || r.header.Get("Warmcache-Expires") != put.header.Get("Warmcache-Expires") {
			t.Fatalf("GET before the expiry = %d %q, Warmcache-Expires %q; want the item expiring at %q",
				r.status, r.body, r.header.Get("Warmcache-Expires"), put.header.Get("Warmcache-Expires"))
		}
		sources[r.header.Get("X-Cache")] = true
	}
	if !sources["hit"] && !sources["hit-l1"] {
		t.Errorf("reads before the expiry came from %v, want the caches", sources)
	}
	redisKey := findRedisKey(t, rc, prefix+ns, key)
	if pttl := rc.PTTL(context.Background(), redisKey).Val(); pttl <= 0 || pttl > 2*time.Second {
		t.Errorf("Redis keeps %s for %v, want at most the item's TTL of 2s", redisKey, pttl)
	}

	// Readers race the expiry instant: each records when every read
	// started and what it answered.
	type read struct {
		start  time.Time
		status int
	}
	time.Sleep(time.Until(expires.Add(-300 * time.Millisecond)))
	var mu sync.Mutex
	var reads []read
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(deadline.Add(700 * time.Millisecond)) {
				start := time.Now()
				status := getStatus(url)
				mu.Lock()
				reads = append(reads, read{start, status})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var before, after, gone int
	firstGone := time.Time{}
	for _, r := range reads {
		switch {
		case r.status == http.StatusOK && !r.start.Before(deadline):
			t.Errorf("a read that started %v after the expiry returned the value", r.start.Sub(expires))
		case r.status == http.StatusOK:
			before++
		case r.status == http.StatusNotFound:
			gone++
			if !r.start.Before(deadline) {
				after++
			}
			if firstGone.IsZero() || r.start.Before(firstGone) {
				firstGone = r.start
			}
		default:
			t.Errorf("a read answered %d", r.status)
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("%d reads: %d returned the value before the expiry, %d found it gone after; want both", len(reads), before, after)
	}
	if firstGone.Before(expires.Add(-time.Second)) || firstGone.After(expires.Add(time.Second)) {
		t.Errorf("the item was first read as gone %v from its expiry, want within a second", firstGone.Sub(expires))
	}
	if v, err := rc.Get(context.Background(), redisKey).Bytes(); err == nil && len(v) > 1 && v[1] != 'A' {
		t.Errorf("Redis still holds the item after its expiry: %q", v)
	}

	// The sweeper deletes the row, as a delete of the service would.
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	waitFor(t, 30*time.Second, "the sweeper to delete the expired row", func() bool {
		var n int
		err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+ns+" WHERE key = $1::bigint", key).Scan(&n)
		return err == nil && n == 0
	})
	if n := metricValue(t, base, `warmcache_expired_rows_deleted_total{namespace="`+ns+`"}`); n < 1 {
		t.Errorf("warmcache_expired_rows_deleted_total of %s = %v, want at least 1", ns, n)
	}
	if r := call(t, "GET", url, ""); r.status != http.StatusNotFound {
		t.Errorf("GET after the sweep = %d %s, want 404", r.status, r.body)
	}
	if r := call(t, "PUT", url, `{"again": true}`, "Content-Type", "application/json"); r.status != http.StatusOK || r.header.Get("Warmcache-Expires") != "" {
		t.Errorf("PUT without a ttl after the sweep = %d %s, Warmcache-Expires %q; want 200 without an expiry", r.status, r.body, r.header.Get("Warmcache-Expires"))
	}
}

// checkTTLGRPC writes key with ttl_seconds over gRPC and reads back its
// expiry.
func checkTTLGRPC(t *testing.T, target, ns, key string) {
	ctx := context.Background()
	c := warmcachev1.NewCacheClient(dialGRPC(t, target))
	before := time.Now()
	put, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: ns, Key: key, Value: []byte(`{"g": 1}`), TtlSeconds: 60})
	if err != nil {
		t.Fatalf("Put with ttl_seconds: %v", err)
	}
	exp := put.GetItem().GetExpiresAt().AsTime()
	if exp.Before(before.Add(59*time.Second)) || exp.After(time.Now().Add(61*time.Second)) {
		t.Errorf("Put with ttl_seconds 60 answered expires_at %v, want about a minute from %v", exp, before)
	}
	got, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: ns, Key: key})
	if err != nil || !got.GetItem().GetExpiresAt().AsTime().Equal(exp) {
		t.Errorf("Get = %v, %v; want expires_at %v", got, err, exp)
	}
	put, err = c.Put(ctx, &warmcachev1.PutRequest{Namespace: ns, Key: key, Value: []byte(`{"g": 2}`)})
	if err != nil || put.GetItem().GetExpiresAt() != nil {
		t.Errorf("Put without ttl_seconds = %v, %v; want no expires_at", put, err)
	}
}

// getStatus reads url and returns the answer's status, or -1 when the
// request fails; it is for goroutines, which must not fail the test.
func getStatus(url string) int {
	res, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

// findRedisKey returns the Redis key of key in the namespace whose keys
// start with nsPrefix (a generation may follow the namespace's name).
func findRedisKey(t *testing.T, rc *redis.Client, nsPrefix, key string) string {
	t.Helper()
	var found []string
	iter := rc.Scan(context.Background(), 0, nsPrefix+"*:"+key, 1000).Iterator()
	for iter.Next(context.Background()) {
		found = append(found, iter.Val())
	}
	if err := iter.Err(); err != nil || len(found) != 1 {
		t.Fatalf("Redis keys of %s: %q, %v; want one", key, found, err)
	}
	return found[0]
}

// metricValue returns the value of one series of /metrics, or zero when it
// is absent.
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	r := call(t, "GET", base+"/metrics", "")
	for _, line := range strings.Split(r.body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}
