package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
)

// TestNearCacheServe runs two `warmcache serve` instances on one database and
// one Redis prefix with the near cache on, and one with it off (the
// default): the environment alone turns the near cache on for the built-in
// widgets namespace, and a write through one instance reaches the other's.
func TestNearCacheServe(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	migrateAndSeed(t, dsn, 10)
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN": dsn,
		"WARMCACHE_REDIS_ADDRS":  testenv.RedisAddr(t),
		"WARMCACHE_REDIS_PREFIX": "near-" + testenv.RandomSuffix(t) + ":",
		// A busy machine under the race detector must not time out the
		// fill of a write, which would leave the old version in Redis.
		"WARMCACHE_HOT_TIMEOUT": "1s",
	}
	off := startServer(t, env)
	env["WARMCACHE_NEAR_CACHE_BYTES"] = "1048576"
	a, b := startServer(t, env), startServer(t, env)
	const key = "/v1/kv/widgets/7"

	call(t, "GET", a+key, "")
	// The first read through B comes from Redis (or from SQL, if A's fill
	// was slow), and later ones from B's near cache. Key tracking reports
	// each fill of the key to B, which drops its near entry; a report may
	// land after B cached the key, so B serves from its near cache once
	// the fills' reports have arrived, not necessarily on the second read.
	if r := call(t, "GET", b+key, ""); r.status != 200 {
		t.Fatalf("first GET through B = %d %s", r.status, r.body)
	}
	testproc.Eventually(t, 5*time.Second, "B serving the key from its near cache", func() bool {
		r := call(t, "GET", b+key, "")
		if r.status != 200 {
			t.Fatalf("GET through B = %d %s", r.status, r.body)
		}
		return r.header.Get("X-Cache") == "hit-l1"
	})
	for range 2 {
		if r := call(t, "GET", off+key, ""); r.status != 200 || r.header.Get("X-Cache") == "hit-l1" {
			t.Fatalf("GET with the near cache off = %d %q, want 200 from Redis or SQL", r.status, r.header.Get("X-Cache"))
		}
	}

	w := call(t, "PUT", a+key, `{"v": 2}`)
	if w.status != 200 {
		t.Fatalf("PUT = %d %s", w.status, w.body)
	}
	// B drops its entry when the invalidation arrives over Redis; until
	// then it may serve the old version, for a few milliseconds.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := call(t, "GET", b+key, "")
		if r.header.Get("ETag") == w.header.Get("ETag") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still serves ETag %s (%s) 5s after the write of %s", r.header.Get("ETag"), r.header.Get("X-Cache"), w.header.Get("ETag"))
		}
	}
	// Key tracking may have dropped B's entry before the write's
	// invalidation arrived over pub/sub, so B counts it a little later.
	testproc.Eventually(t, 5*time.Second, "B receiving the write's invalidation", func() bool {
		return metricValue(t, b, `warmcache_invalidations_received_total{result="ok"}`) >= 1
	})
	m := call(t, "GET", b+"/metrics", "")
	for _, name := range []string{"warmcache_near_cache_bytes", `warmcache_lookups_total{namespace="widgets",result="hit",tier="near"}`} {
		if !strings.Contains(m.body, name) {
			t.Errorf("/metrics of B lacks %s", name)
		}
	}
}
