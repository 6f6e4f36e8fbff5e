package rediscache_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

// fixture is a Cache on the test Redis with its own key prefix, the registry
// its metrics are on, and a plain client to look at the keys.
type fixture struct {
	cache  *rediscache.Cache
	reg    *prometheus.Registry
	raw    *redis.Client
	prefix string
}

// newFixture returns a fixture whose keys are deleted when the test ends.
// opts.Addrs and opts.Prefix are set by the fixture.
func newFixture(tb testing.TB, opts rediscache.Options) *fixture {
	tb.Helper()
	addr := testenv.RedisAddr(tb)
	opts.Addrs = []string{addr}
	opts.Prefix = "wctest:" + testenv.RandomSuffix(tb) + ":"
	reg := prometheus.NewRegistry()
	cache, err := rediscache.New(opts, reg, nil)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	raw := redis.NewClient(&redis.Options{Addr: addr})
	f := &fixture{cache: cache, reg: reg, raw: raw, prefix: opts.Prefix}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := raw.Scan(ctx, 0, opts.Prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := raw.Del(ctx, iter.Val()).Err(); err != nil {
				tb.Errorf("cleanup: del %s: %v", iter.Val(), err)
			}
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("cleanup: scan: %v", err)
		}
		if err := cache.Close(); err != nil {
			tb.Errorf("cleanup: close cache: %v", err)
		}
		if err := raw.Close(); err != nil {
			tb.Errorf("cleanup: close client: %v", err)
		}
	})
	return f
}

// redisKey is the key the cache uses for key in ns.
func (f *fixture) redisKey(ns *warmcache.Namespace, key string) string {
	return f.prefix + ns.Name + ":" + key
}

// testContext returns a context that ends with the test, with a deadline that is
// generous for a local Redis.
func testContext(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// testKeep is how long the tests keep the entries they fill.
const testKeep = 10 * time.Minute

// fillOne fills e for key, kept for testKeep and, unless e says otherwise,
// fresh as long, as the core fills.
func fillOne(ctx context.Context, c *rediscache.Cache, ns *warmcache.Namespace, key warmcache.Key, e warmcache.Entry) error {
	return fillMany(ctx, c, ns, []warmcache.Key{key}, []warmcache.Entry{e})
}

// fillMany fills entries for keys as fillOne does; an error when their
// numbers differ.
func fillMany(ctx context.Context, c *rediscache.Cache, ns *warmcache.Namespace, keys []warmcache.Key, entries []warmcache.Entry) error {
	if len(keys) != len(entries) {
		return fmt.Errorf("%d keys and %d entries", len(keys), len(entries))
	}
	fills := make([]warmcache.Fill, len(keys))
	for i := range keys {
		fills[i] = warmcache.Fill{Key: keys[i], Entry: entries[i], Keep: testKeep}
		if fills[i].Entry.FreshUntil.IsZero() {
			fills[i].Entry.FreshUntil = time.Now().Add(testKeep)
		}
	}
	return c.FillMany(ctx, ns, fills)
}

// getOne reads one key, as a batch of one.
func getOne(ctx context.Context, c *rediscache.Cache, ns *warmcache.Namespace, key warmcache.Key) (warmcache.Entry, bool, error) {
	entries, hits, err := c.GetMany(ctx, ns, []warmcache.Key{key})
	if err != nil {
		return warmcache.Entry{}, false, err
	}
	return entries[0], hits[0], nil
}

// fill fills e for key and fails the test on error.
func (f *fixture) fill(tb testing.TB, ns *warmcache.Namespace, key string, e warmcache.Entry) {
	tb.Helper()
	if err := fillOne(testContext(tb), f.cache, ns, warmcache.Key{Text: key}, e); err != nil {
		tb.Fatalf("Fill(%s, %+v): %v", key, e, err)
	}
}

// get reads key and fails the test on error.
func (f *fixture) get(tb testing.TB, ns *warmcache.Namespace, key string) (warmcache.Entry, bool) {
	tb.Helper()
	e, hit, err := getOne(testContext(tb), f.cache, ns, warmcache.Key{Text: key})
	if err != nil {
		tb.Fatalf("Get(%s): %v", key, err)
	}
	return e, hit
}

func present(version int64, value string) warmcache.Entry {
	return warmcache.Entry{Value: []byte(value), Version: version, Found: true}
}

func absent(version int64) warmcache.Entry {
	return warmcache.Entry{Version: version}
}

// sameEntry reports whether got is want, comparing values byte for byte.
func sameEntry(got, want warmcache.Entry) bool {
	return got.Found == want.Found && got.Version == want.Version && string(got.Value) == string(want.Value)
}

func TestRoundTrip(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "widgets"}
	tests := []struct {
		name   string
		entry  warmcache.Entry
		stored string // the raw Redis value
	}{
		{"present", present(42, `{"id":42,"name":"bolt"}`), `1P00000000000000000042{"id":42,"name":"bolt"}`},
		{"present keeps bytes", present(7, " { \"b\" : [1, 2.50, \"é\\u00e9\"] }\n"), "1P00000000000000000007 { \"b\" : [1, 2.50, \"é\\u00e9\"] }\n"},
		{"present max version", present(1<<63-1, `0`), `1P09223372036854775807` + `0`},
		{"read absent", absent(0), `1A00000000000000000000`},
		{"delete absent", absent(9), `1A00000000000000000009`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.fill(t, ns, tt.name, tt.entry)
			got, hit := f.get(t, ns, tt.name)
			if !hit || !sameEntry(got, tt.entry) {
				t.Errorf("Get = %+v, hit %v; want %+v, hit true", got, hit, tt.entry)
			}
			raw, err := f.raw.Get(testContext(t), f.redisKey(ns, tt.name)).Result()
			if err != nil {
				t.Fatalf("raw get: %v", err)
			}
			// The stored form is the 22-byte head of tt.stored, 13 digits of
			// fresh-until milliseconds in the future, then the payload.
			if len(raw) < 35 || raw[:22] != tt.stored[:22] || raw[35:] != tt.stored[22:] {
				t.Fatalf("stored %q, want %q with a fresh-until inserted at byte 22", raw, tt.stored)
			}
			fresh, err := strconv.ParseInt(raw[22:35], 10, 64)
			if err != nil || fresh <= time.Now().UnixMilli() {
				t.Errorf("fresh-until %q is not a time in the future", raw[22:35])
			}
		})
	}
	t.Run("miss", func(t *testing.T) {
		if got, hit := f.get(t, ns, "never-filled"); hit {
			t.Errorf("Get = %+v, hit true; want a miss", got)
		}
		if n := promregtest.Value(t, f.reg, "warmcache_redis_errors_total", "op", "get"); n != 0 {
			t.Errorf("errors_total{op=get} = %v after a miss, want 0", n)
		}
		if n := promregtest.Value(t, f.reg, "warmcache_redis_duration_seconds", "op", "get"); n == 0 {
			t.Errorf("duration_seconds{op=get} has no samples")
		}
	})
	t.Run("negative version refused", func(t *testing.T) {
		err := fillOne(testContext(t), f.cache, ns, warmcache.Key{Text: "negative"}, present(-1, `1`))
		if err == nil {
			t.Fatal("Fill with version -1 succeeded, want an error")
		}
		if _, hit := f.get(t, ns, "negative"); hit {
			t.Error("a fill with a negative version stored something")
		}
	})
}

// TestHotTierContract holds the Redis tier to the hot tier's contract,
// on the system clock: Redis expires keys in real time.
func TestHotTierContract(t *testing.T) {
	tiertest.Hot(t, func(t *testing.T) (warmcache.Hot, tiertest.Clock) {
		return newFixture(t, rediscache.Options{}).cache, nil
	})
}

// TestFillForeignValues: a fill replaces a value that is not the cache's,
// and the version in the header of a value in a later format still orders
// fills.
func TestFillForeignValues(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "widgets"}
	t.Run("foreign value replaced", func(t *testing.T) {
		if err := f.raw.Set(testContext(t), f.redisKey(ns, "foreign"), "not ours", 0).Err(); err != nil {
			t.Fatalf("raw set: %v", err)
		}
		f.fill(t, ns, "foreign", present(1, `"v1"`))
		if got, hit := f.get(t, ns, "foreign"); !hit || !sameEntry(got, present(1, `"v1"`)) {
			t.Errorf("Get = %+v, hit %v; want the filled entry", got, hit)
		}
	})
	t.Run("later format compared by version", func(t *testing.T) {
		// A value of an unknown format is a miss for Get, but its header
		// still orders fills.
		if err := f.raw.Set(testContext(t), f.redisKey(ns, "later"), "zP00000000000000000005payload", 0).Err(); err != nil {
			t.Fatalf("raw set: %v", err)
		}
		f.fill(t, ns, "later", present(4, `"v4"`))
		raw, err := f.raw.Get(testContext(t), f.redisKey(ns, "later")).Result()
		if err != nil || raw != "zP00000000000000000005payload" {
			t.Errorf("after an older fill the key holds %q (err %v), want the later format's value", raw, err)
		}
	})
}

// TestKeep: an entry lives in Redis for the Keep its fill gives, and keeps
// the freshness the core gave it; the lifetimes are the core's policy.
func TestKeep(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "keep"}
	fresh := time.UnixMilli(time.Now().Add(time.Minute).UnixMilli())
	for _, tt := range []struct {
		name  string
		entry warmcache.Entry
		keep  time.Duration
	}{
		{"present", present(1, `1`), 10 * time.Minute},
		{"absent", absent(0), 20 * time.Second},
		{"tombstone", absent(3), 45 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.entry
			e.FreshUntil = fresh
			if err := f.cache.FillMany(testContext(t), ns, []warmcache.Fill{{Key: warmcache.Key{Text: tt.name}, Entry: e, Keep: tt.keep}}); err != nil {
				t.Fatalf("FillMany: %v", err)
			}
			ttl, err := f.raw.PTTL(testContext(t), f.redisKey(ns, tt.name)).Result()
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			// PTTL counts down from the fill, so allow for the time the
			// test takes.
			const slack = 2 * time.Second
			if ttl < tt.keep-slack || ttl > tt.keep {
				t.Errorf("PTTL = %v, want %v", ttl, tt.keep)
			}
			got, hit := f.get(t, ns, tt.name)
			if !hit || !got.FreshUntil.Equal(fresh) {
				t.Errorf("read back %+v, hit %v; want fresh until %v", got, hit, fresh)
			}
		})
	}
}

// TestGetManyForeignValue: among the keys of a GetMany, a value that is
// not the cache's is a miss, and no error; the order, the length and the
// empty call are the hot tier's contract (TestHotTierContract).
func TestGetManyForeignValue(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "widgets"}
	f.fill(t, ns, "a", present(1, `{"a":1}`))
	if err := f.raw.Set(testContext(t), f.redisKey(ns, "odd"), "9P00000000000000000001{}", 0).Err(); err != nil {
		t.Fatalf("raw set: %v", err)
	}
	entries, hits, err := f.cache.GetMany(testContext(t), ns, []warmcache.Key{{Text: "odd"}, {Text: "a"}})
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if hits[0] || !hits[1] || !sameEntry(entries[1], present(1, `{"a":1}`)) {
		t.Errorf("GetMany(odd, a) = %+v, hits %v; want a miss, then a's entry", entries, hits)
	}
	if n := promregtest.Value(t, f.reg, "warmcache_redis_errors_total", "op", "get_many"); n != 0 {
		t.Errorf("errors_total{op=get_many} = %v with misses only, want 0", n)
	}
}

// TestGetManyOneCommand: a GetMany of several keys on a standalone server
// is one MGET, and a key that holds nothing, or a value of another type,
// is a miss among the hits, with no error; so is a key of another type
// read alone.
func TestGetManyOneCommand(t *testing.T) {
	calls := &callCounter{}
	f := newFixture(t, rediscache.Options{Instrument: func(c redis.UniversalClient) error {
		c.AddHook(calls)
		return nil
	}})
	ns := &warmcache.Namespace{Name: "widgets"}
	ctx := testContext(t)
	f.fill(t, ns, "a", present(1, `{"a":1}`))
	f.fill(t, ns, "gone", absent(4))
	f.fill(t, ns, "b", present(2, `{"b":2}`))
	if err := f.raw.HSet(ctx, f.redisKey(ns, "hash"), "field", "value").Err(); err != nil {
		t.Fatalf("raw hset: %v", err)
	}
	keys := []warmcache.Key{{Text: "a"}, {Text: "none"}, {Text: "gone"}, {Text: "hash"}, {Text: "b"}}
	calls.reset()
	entries, hits, err := f.cache.GetMany(ctx, ns, keys)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	calls.mu.Lock()
	sent, pipelines := slices.Clone(calls.sent), calls.pipelines
	calls.mu.Unlock()
	if !slices.Equal(sent, []string{"mget"}) || pipelines != 0 {
		t.Errorf("GetMany of %d keys sent %v and %d pipelines, want one mget", len(keys), sent, pipelines)
	}
	wantHits := []bool{true, false, true, false, true}
	if !slices.Equal(hits, wantHits) {
		t.Fatalf("hits = %v, want %v", hits, wantHits)
	}
	if _, hits, err := f.cache.GetMany(ctx, ns, keys[3:4]); err != nil {
		t.Errorf("GetMany of the hash's key alone: %v, want a miss", err)
	} else if hits[0] {
		t.Error("GetMany of the hash's key alone is a hit, want a miss")
	}
	for i, want := range map[int]warmcache.Entry{0: present(1, `{"a":1}`), 2: absent(4), 4: present(2, `{"b":2}`)} {
		if !sameEntry(entries[i], want) {
			t.Errorf("%s: entry %+v, want %+v", keys[i].Text, entries[i], want)
		}
	}
}

func TestFillMany(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "widgets"}
	f.fill(t, ns, "newer", present(9, `"v9"`))
	keys := []warmcache.Key{{Text: "x"}, {Text: "newer"}, {Text: "neg"}, {Text: "gone"}}
	fills := []warmcache.Entry{present(1, `"x1"`), present(3, `"v3"`), absent(0), absent(2)}
	want := []warmcache.Entry{present(1, `"x1"`), present(9, `"v9"`), absent(0), absent(2)}
	if err := fillMany(testContext(t), f.cache, ns, keys, fills); err != nil {
		t.Fatalf("FillMany: %v", err)
	}
	entries, hits, err := f.cache.GetMany(testContext(t), ns, keys)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	for i := range keys {
		if !hits[i] || !sameEntry(entries[i], want[i]) {
			t.Errorf("%s: entry %+v, hit %v; want %+v", keys[i].Text, entries[i], hits[i], want[i])
		}
	}
	t.Run("mismatched lengths", func(t *testing.T) {
		if err := fillMany(testContext(t), f.cache, ns, keys, fills[:1]); err == nil {
			t.Error("FillMany with 4 keys and 1 entry succeeded, want an error")
		}
	})
}

// TestFillAfterScriptFlush checks that fills load the script again when
// Redis has lost it (after a restart or SCRIPT FLUSH). The keys hold an
// older entry, so that the fills need the script: a fill of an empty key is
// a SET NX.
func TestFillAfterScriptFlush(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "widgets"}
	tests := []struct {
		name string
		fill func(ctx context.Context, key warmcache.Key, e warmcache.Entry) error
	}{
		{"Fill", func(ctx context.Context, key warmcache.Key, e warmcache.Entry) error {
			return fillOne(ctx, f.cache, ns, key, e)
		}},
		{"FillMany", func(ctx context.Context, key warmcache.Key, e warmcache.Entry) error {
			return fillMany(ctx, f.cache, ns, []warmcache.Key{key, {Text: key.Text + "-2"}}, []warmcache.Entry{e, e})
		}},
		{"FillCached", func(ctx context.Context, key warmcache.Key, e warmcache.Entry) error {
			return f.cache.FillMany(ctx, ns, []warmcache.Fill{{Key: key, Entry: e, Keep: testKeep, Cached: true}})
		}},
		{"FillManyCached", func(ctx context.Context, key warmcache.Key, e warmcache.Entry) error {
			return f.cache.FillMany(ctx, ns, []warmcache.Fill{{Key: key, Entry: e, Keep: testKeep, Cached: true},
				{Key: warmcache.Key{Text: key.Text + "-2"}, Entry: e, Keep: testKeep}})
		}},
		{"FillPublish", func(ctx context.Context, key warmcache.Key, e warmcache.Entry) error {
			inv, err := rediscache.NewInvalidations(f.cache, nil, nil)
			if err != nil {
				return err
			}
			fillErr, publishErr := inv.FillPublish(ctx, ns, []warmcache.Fill{{Key: key, Entry: e, Keep: testKeep, Cached: true}})
			return errors.Join(fillErr, publishErr)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.fill(t, ns, tt.name, present(1, `"v1"`))
			f.fill(t, ns, tt.name+"-2", present(1, `"v1"`))
			if err := f.raw.ScriptFlush(testContext(t)).Err(); err != nil {
				t.Fatalf("script flush: %v", err)
			}
			want := present(2, `"v2"`)
			if err := tt.fill(testContext(t), warmcache.Key{Text: tt.name}, want); err != nil {
				t.Fatalf("fill after script flush: %v", err)
			}
			if got, hit := f.get(t, ns, tt.name); !hit || !sameEntry(got, want) {
				t.Errorf("Get = %+v, hit %v; want %+v", got, hit, want)
			}
		})
	}
}

func TestUnknownFormatIsMiss(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "widgets"}
	tests := []struct {
		name string
		raw  string
	}{
		{"later format", `9P000000000000000000010000000000000{"a":1}`},
		{"short", `1P0001`},
		{"empty", ``},
		{"unknown kind", `1X00000000000000000001{}`},
		{"version not digits", `1P0000000000000000000a{}`},
		{"version past int64", `1P09223372036854775808{}`},
		{"version past uint64", `1P99999999999999999999{}`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := f.raw.Set(testContext(t), f.redisKey(ns, tt.name), tt.raw, 0).Err(); err != nil {
				t.Fatalf("raw set: %v", err)
			}
			if got, hit := f.get(t, ns, tt.name); hit {
				t.Errorf("Get = %+v, hit true; want a miss", got)
			}
			if n := promregtest.Value(t, f.reg, "warmcache_redis_unknown_format_total", "namespace", ns.Name); n != float64(i+1) {
				t.Errorf("unknown_format_total = %v, want %d", n, i+1)
			}
		})
	}
}

// silentServer accepts connections and never answers. It is closed when the
// test ends.
func silentServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// closedPort returns an address on which nothing listens.
func closedPort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		tb.Fatalf("close: %v", err)
	}
	return addr
}

func TestUnreachable(t *testing.T) {
	ns := &warmcache.Namespace{Name: "widgets"}
	key := warmcache.Key{Text: "k"}
	ops := []struct {
		name   string
		metric string
		call   func(ctx context.Context, c *rediscache.Cache) error
	}{
		{"Get", "get", func(ctx context.Context, c *rediscache.Cache) error {
			_, _, err := getOne(ctx, c, ns, key)
			return err
		}},
		{"GetMany", "get_many", func(ctx context.Context, c *rediscache.Cache) error {
			_, _, err := c.GetMany(ctx, ns, []warmcache.Key{key, {Text: "k2"}})
			return err
		}},
		{"Fill", "fill", func(ctx context.Context, c *rediscache.Cache) error {
			return fillOne(ctx, c, ns, key, present(1, `1`))
		}},
		{"FillMany", "fill_many", func(ctx context.Context, c *rediscache.Cache) error {
			return fillMany(ctx, c, ns, []warmcache.Key{key, {Text: "k2"}}, []warmcache.Entry{present(1, `1`), absent(0)})
		}},
		{"Ping", "ping", func(ctx context.Context, c *rediscache.Cache) error {
			return c.Ping(ctx)
		}},
	}
	servers := []struct {
		name    string
		addr    func(testing.TB) string
		timeout time.Duration // the context's
		// within bounds the time from the call to its return. A
		// refused connection fails long before the deadline; a server
		// that never answers is left at the deadline, with slack for a
		// loaded 2-core machine under the race detector.
		within time.Duration
	}{
		{"refused", closedPort, 2 * time.Second, 500 * time.Millisecond},
		{"silent", silentServer, 100 * time.Millisecond, 250 * time.Millisecond},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			// Timeouts far longer than the context's, so that only the
			// context can end the calls in time.
			c, err := rediscache.New(rediscache.Options{
				Addrs:       []string{srv.addr(t)},
				DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
			}, reg, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() { c.Close() })
			for _, op := range ops {
				t.Run(op.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), srv.timeout)
					defer cancel()
					deadline, _ := ctx.Deadline()
					limit := deadline.Add(srv.within - srv.timeout)
					err := op.call(ctx, c)
					if late := time.Since(limit); late > 0 {
						t.Errorf("returned %v after the call started, want within %v", srv.within+late, srv.within)
					}
					if err == nil {
						t.Fatal("succeeded against an unreachable Redis, want an error")
					}
					if errors.Is(err, redis.Nil) {
						t.Errorf("error %v is redis.Nil", err)
					}
					if n := promregtest.Value(t, reg, "warmcache_redis_errors_total", "op", op.metric); n < 1 {
						t.Errorf("errors_total{op=%s} = %v, want at least 1", op.metric, n)
					}
				})
			}
		})
	}
}

func TestNewRegisterConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := rediscache.New(rediscache.Options{}, reg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { first.Close() })
	if second, err := rediscache.New(rediscache.Options{}, reg, nil); err == nil {
		second.Close()
		t.Fatal("a second New on the same registry succeeded, want a registration error")
	}
}
