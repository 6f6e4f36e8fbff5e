package coherence_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// These tests run two or three instances of
// the service in one process, as deployments would run: each one assembled
// as `warmcache serve` assembles it (harness.Open), with its own warehouse
// pool, Redis client, near cache and subscriptions, sharing one database
// and one Redis prefix.

const coherenceKeys = 16

// fleet is the shared warehouse and Redis of the instances.
type fleet struct {
	ns     *warmcache.Namespace
	dsn    string
	conn   *pgx.Conn
	prefix string
	addr   string
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	return newFleetOn(t, testenv.RedisAddr(t))
}

// newFleetOn is newFleet on the Redis at addr.
func newFleetOn(t *testing.T, addr string) *fleet {
	t.Helper()
	ctx := context.Background()
	f := &fleet{
		ns: &warmcache.Namespace{
			Name: "c", Table: "c", KeyColumn: "key", KeyType: warmcache.KeyBigint, Layout: warmcache.LayoutPacked,
			ValueColumn: "value", VersionColumn: "version", Writable: true,
			TTL: time.Minute, NegativeTTL: time.Minute,
			// Far longer than the test: only an invalidation can end an
			// entry, so a stale read cannot hide behind an expiry.
			NearTTL: time.Hour,
		},
		dsn:    testenv.NewDatabase(t),
		prefix: "coherence-" + testenv.RandomSuffix(t) + ":",
		addr:   addr,
	}
	conn, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	f.conn = conn
	m, err := schema.OpenMigrator(ctx, conn, []schema.Table{{Namespace: f.ns, Managed: true, Storage: schema.Storage{Partitions: 2}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO c SELECT i, '{"n":0}', nextval('warmcache_version_seq') FROM generate_series(0, $1::int - 1) i`, coherenceKeys); err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(&redis.Options{Addr: f.addr})
	t.Cleanup(func() {
		ks, _ := raw.Keys(context.Background(), f.prefix+"*").Result()
		if len(ks) > 0 {
			raw.Del(context.Background(), ks...)
		}
		raw.Close()
	})
	return f
}

// sqlVersion is the version the warehouse holds for key.
func (f *fleet) sqlVersion(t *testing.T, key int) int64 {
	t.Helper()
	var v int64
	if err := f.conn.QueryRow(context.Background(), `SELECT version FROM c WHERE key = $1`, key).Scan(&v); err != nil {
		t.Fatalf("read version of %d: %v", key, err)
	}
	return v
}

// key is the warmcache key of the integer i.
func key(i int) warmcache.Key { return warmcache.Key{Text: strconv.Itoa(i), Int: int64(i)} }

// instance is one running service.
type instance struct {
	url    string
	near   warmcache.Near
	reg    *prometheus.Registry
	client *http.Client
}

// noInvalidations drops every invalidation: instances that use it never tell
// each other about writes.
type noInvalidations struct{}

func (noInvalidations) Publish(context.Context, *warmcache.Namespace, warmcache.Key, int64) error {
	return nil
}

// start runs an instance. Unless publish is set, its writes are not
// published, though it still subscribes.
func (f *fleet) start(t *testing.T, publish bool) *instance {
	t.Helper()
	return f.startWith(t, startOptions{publish: publish})
}

// startOptions choose an instance's coherence paths. Every instance applies
// the versioned invalidations that the fleet publishes, as `warmcache serve`
// does whenever its near cache is on; an instance that should apply none
// is in a fleet whose instances publish none.
type startOptions struct {
	publish  bool // publish versioned invalidations of its writes
	tracking bool // apply Redis's key tracking
}

func (f *fleet) startWith(t *testing.T, o startOptions) *instance {
	t.Helper()
	tracking := "off"
	if o.tracking {
		tracking = "bcast"
	}
	// Generous hot-tier deadlines: a write whose cache update times out on
	// a busy machine leaves the old version in Redis, which is a fault, not
	// what these tests are about.
	cfg := harness.Config(t, map[string]string{
		"WARMCACHE_POSTGRES_DSN":        f.dsn,
		"WARMCACHE_PG_MAX_CONNS":        "4",
		"WARMCACHE_REDIS_ADDRS":         f.addr,
		"WARMCACHE_REDIS_PREFIX":        f.prefix,
		"WARMCACHE_HOT_TIMEOUT":         "1s",
		"WARMCACHE_WARM_TIMEOUT":        "5s",
		"WARMCACHE_NEAR_CACHE_BYTES":    strconv.Itoa(1 << 20),
		"WARMCACHE_NEAR_CACHE_TRACKING": tracking,
	})
	cfg.Namespaces = []*warmcache.Namespace{f.ns}
	in := &instance{}
	g := harness.Open(t, cfg, harness.Options{
		SkipDoctor: true,
		Redis: func(ro *rediscache.Options) {
			ro.ReadTimeout, ro.WriteTimeout = time.Second, time.Second
		},
		Core: func(co *warmcache.Options) {
			in.near = co.Near
			if !o.publish {
				co.Invalidations = noInvalidations{}
			}
		},
	})
	if in.near == nil {
		t.Fatal("the instance has no near cache")
	}
	in.reg = g.Registry()
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	in.url = srv.URL + "/v1/kv/c/"
	in.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	t.Cleanup(in.client.CloseIdleConnections)
	return in
}

// answer is what a GET or PUT returned.
type answer struct {
	version int64
	source  string // X-Cache
}

func (in *instance) do(method string, key int, body string) (answer, error) {
	req, err := http.NewRequest(method, in.url+strconv.Itoa(key), strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	res, err := in.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return answer{}, err
	}
	if res.StatusCode != http.StatusOK {
		return answer{}, fmt.Errorf("%s %d: status %d", method, key, res.StatusCode)
	}
	v, err := strconv.ParseInt(strings.Trim(res.Header.Get("ETag"), `"`), 10, 64)
	if err != nil {
		return answer{}, fmt.Errorf("%s %d: ETag %q: %w", method, key, res.Header.Get("ETag"), err)
	}
	return answer{version: v, source: res.Header.Get("X-Cache")}, nil
}

func (in *instance) get(t *testing.T, key int) answer {
	t.Helper()
	a, err := in.do(http.MethodGet, key, "")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (in *instance) put(t *testing.T, key int, n int) answer {
	t.Helper()
	a, err := in.do(http.MethodPut, key, fmt.Sprintf(`{"n":%d}`, n))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// waitDelivered waits until the instance's subscription has applied an
// invalidation of key k at version or later: its near cache holds no older
// entry of k.
func (in *instance) waitDelivered(t *testing.T, ns *warmcache.Namespace, k int, version int64) {
	t.Helper()
	testproc.Eventually(t, 5*time.Second, fmt.Sprintf("an invalidation of key %d at version %d delivered", k, version), func() bool {
		e, ok := in.near.Get(ns, key(k))
		return !ok || e.Version >= version
	})
}

// TestTwoInstancesWriteInvalidatesNearCache reads a key through both
// instances, so that B's near cache holds v1, writes v2 through A, and reads
// through B again.
func TestTwoInstancesWriteInvalidatesNearCache(t *testing.T) {
	for _, tc := range []struct {
		name    string
		publish bool
	}{
		// With invalidations, B serves v2 once the write is acknowledged
		// and its invalidation delivered.
		{"published", true},
		// Without them, B goes on serving v1 from its near cache: the
		// check above can fail.
		{"not published", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			a, b := f.start(t, tc.publish), f.start(t, tc.publish)
			const k = 3

			v1 := a.get(t, k)
			if got := b.get(t, k); got.version != v1.version || got.source != "hit" {
				t.Fatalf("first read through B = %+v, want version %d from Redis (hit)", got, v1.version)
			}
			if got := b.get(t, k); got.version != v1.version || got.source != string(warmcache.SourceNear) {
				t.Fatalf("second read through B = %+v, want version %d from its near cache (hit-l1)", got, v1.version)
			}

			v2 := a.put(t, k, 2)
			if v2.version <= v1.version {
				t.Fatalf("write answered version %d, not above %d", v2.version, v1.version)
			}
			if !tc.publish {
				if got := b.get(t, k); got.version != v1.version || got.source != string(warmcache.SourceNear) {
					t.Fatalf("without invalidations B answered %+v, want the stale version %d from hit-l1", got, v1.version)
				}
				return
			}
			b.waitDelivered(t, f.ns, k, v2.version)
			if got := b.get(t, k); got.version != v2.version {
				t.Fatalf("after the write and its invalidation B answered %+v, want version %d", got, v2.version)
			}
			if got := b.get(t, k); got.version != v2.version || got.source != string(warmcache.SourceNear) {
				t.Errorf("B's next read = %+v, want version %d from its near cache again", got, v2.version)
			}
			if got := a.get(t, k); got.version != v2.version {
				t.Errorf("A answered %+v after its own write, want version %d", got, v2.version)
			}
		})
	}
}

// TestTwoInstancesConverge races writes through A with reads through B, and
// checks that once the writes stop and their invalidations are delivered, B
// serves every key at the version the warehouse holds.
func TestTwoInstancesConverge(t *testing.T) {
	f := newFleet(t)
	a, b := f.start(t, true), f.start(t, true)
	const (
		writers   = 4
		perWriter = 40
		readers   = 4
	)
	for k := range coherenceKeys {
		b.get(t, k)
	}

	var stop atomic.Bool
	var nearHits atomic.Int64
	errs := make(chan error, writers+readers)
	var readWG, writeWG sync.WaitGroup
	for r := range readers {
		readWG.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for !stop.Load() {
				got, err := b.do(http.MethodGet, rng.IntN(coherenceKeys), "")
				if err != nil {
					errs <- err
					return
				}
				if got.source == string(warmcache.SourceNear) {
					nearHits.Add(1)
				}
			}
		})
	}
	for w := range writers {
		writeWG.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for i := range perWriter {
				if _, err := a.do(http.MethodPut, rng.IntN(coherenceKeys), fmt.Sprintf(`{"n":%d}`, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	writeWG.Wait()
	stop.Store(true)
	readWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if nearHits.Load() == 0 {
		t.Fatal("B never answered from its near cache: the test did not exercise it")
	}

	// Each acknowledged write published one invalidation; wait until B
	// has applied them all.
	testproc.Eventually(t, 10*time.Second, fmt.Sprintf("B to receive the %d invalidations", writers*perWriter), func() bool {
		return promregtest.Value(t, b.reg, "warmcache_invalidations_received_total", "result", "ok") >= writers*perWriter
	})
	for k := range coherenceKeys {
		want := f.sqlVersion(t, k)
		// Twice: the first read may fill the near cache, the second is
		// served from it.
		for range 2 {
			if got := b.get(t, k); got.version != want {
				t.Errorf("key %d: B answered %+v after the writes, want the warehouse's version %d", k, got, want)
			}
		}
	}
	t.Logf("B answered %d reads from its near cache during the writes", nearHits.Load())
}

// holds reports whether in's near cache holds key.
func (f *fleet) holds(in *instance, k int) bool {
	_, ok := in.near.Get(f.ns, key(k))
	return ok
}

// hold reads key through in until its near cache holds it.
func (f *fleet) hold(t *testing.T, in *instance, k int) {
	t.Helper()
	testproc.Eventually(t, 10*time.Second, fmt.Sprintf("key %d in the near cache", k), func() bool {
		in.get(t, k)
		return f.holds(in, k)
	})
}

// TestTrackingDropsNearEntries checks that a key held in instance A's near
// cache is dropped when anything changes it in Redis, with Redis's key
// tracking as A's only coherence path: no instance publishes its writes,
// so A applies no versioned invalidation.
func TestTrackingDropsNearEntries(t *testing.T) {
	tracked := startOptions{tracking: true}
	t.Run("another instance writes", func(t *testing.T) {
		f := newFleet(t)
		a, b := f.startWith(t, tracked), f.startWith(t, startOptions{})
		// The control: an instance without tracking keeps the key.
		c := f.startWith(t, startOptions{})
		const k = 1
		f.hold(t, a, k)
		f.hold(t, c, k)
		v2 := b.put(t, k, 2)
		testproc.Eventually(t, 10*time.Second, "A to drop the key B wrote", func() bool { return !f.holds(a, k) })
		if got := a.get(t, k); got.version != v2.version {
			t.Errorf("A answered %+v after B's write, want version %d", got, v2.version)
		}
		if got := c.get(t, k); got.source != string(warmcache.SourceNear) || got.version == v2.version {
			t.Errorf("the instance without tracking answered %+v, want the old version from its near cache", got)
		}
	})
	t.Run("another client sets and deletes", func(t *testing.T) {
		f := newFleet(t)
		a := f.startWith(t, tracked)
		raw := redis.NewClient(&redis.Options{Addr: f.addr})
		t.Cleanup(func() { raw.Close() })
		ctx := context.Background()
		const k = 2
		rk := f.prefix + f.ns.Name + ":" + strconv.Itoa(k)
		f.hold(t, a, k)
		if err := raw.Del(ctx, rk).Err(); err != nil {
			t.Fatal(err)
		}
		testproc.Eventually(t, 10*time.Second, "A to drop the key DEL deleted", func() bool { return !f.holds(a, k) })
		f.hold(t, a, k)
		// Setting the value it already has still changes the key.
		v, err := raw.Get(ctx, rk).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if err := raw.Set(ctx, rk, v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		testproc.Eventually(t, 10*time.Second, "A to drop the key SET wrote", func() bool { return !f.holds(a, k) })
	})
	t.Run("flush and reconnect drop everything", func(t *testing.T) {
		// A Redis of the test's own: it is flushed.
		srv := testproc.StartRedis(t)
		f := newFleetOn(t, srv.Addr)
		a := f.startWith(t, tracked)
		raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { raw.Close() })
		ctx := context.Background()
		holdAll := func() {
			for k := range 3 {
				f.hold(t, a, k)
			}
		}
		noneHeld := func() bool { return !f.holds(a, 0) && !f.holds(a, 1) && !f.holds(a, 2) }
		holdAll()
		if err := raw.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		testproc.Eventually(t, 10*time.Second, "A to drop every key after FLUSHDB", noneHeld)
		holdAll()
		// The tracking connection is A's only subscriber.
		if err := raw.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		testproc.Eventually(t, 10*time.Second, "A to drop every key after its tracking connection was killed", noneHeld)
		holdAll()
	})
}
