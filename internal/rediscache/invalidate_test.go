package rediscache_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// invalidation is one call of a subscription's onInvalidate.
type invalidation struct {
	ns, key string
	version int64
}

// subscriber records what a subscription delivers.
type subscriber struct {
	invalidations chan invalidation
	resyncs       chan struct{}
}

// subscribe starts inv.Subscribe for the rest of the test and waits for its
// first resync, which says the subscription is in place.
func subscribe(tb testing.TB, inv *rediscache.Invalidations) *subscriber {
	tb.Helper()
	s := &subscriber{invalidations: make(chan invalidation, 100), resyncs: make(chan struct{}, 10)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		inv.Subscribe(ctx, func(ns, key string, version int64) {
			s.invalidations <- invalidation{ns, key, version}
		}, func() { s.resyncs <- struct{}{} })
	})
	tb.Cleanup(func() { cancel(); wg.Wait() })
	s.waitResync(tb)
	return s
}

func (s *subscriber) waitResync(tb testing.TB) {
	tb.Helper()
	select {
	case <-s.resyncs:
	case <-time.After(5 * time.Second):
		tb.Fatal("no subscription confirmed within 5s")
	}
}

func (s *subscriber) next(tb testing.TB) invalidation {
	tb.Helper()
	select {
	case m := <-s.invalidations:
		return m
	case <-time.After(5 * time.Second):
		tb.Fatal("no invalidation delivered within 5s")
		return invalidation{}
	}
}

func newInvalidations(tb testing.TB, f *fixture, reg prometheus.Registerer) *rediscache.Invalidations {
	tb.Helper()
	inv, err := rediscache.NewInvalidations(f.cache, reg, nil)
	if err != nil {
		tb.Fatalf("NewInvalidations: %v", err)
	}
	return inv
}

func TestInvalidationsRoundTrip(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	reg := prometheus.NewRegistry()
	pub := newInvalidations(t, f, reg)
	sub := subscribe(t, newInvalidations(t, f, nil))
	ctx := testContext(t)
	ns := &warmcache.Namespace{Name: "widgets.v2"}

	sent := []invalidation{
		{"widgets.v2", "42", 7},
		{"widgets.v2", "a key: with spaces/and ünïcode", 1<<62 + 3},
		{"widgets.v2", "-9", 1},
	}
	for _, m := range sent {
		if err := pub.Publish(ctx, ns, warmcache.Key{Text: m.key}, m.version); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	// Malformed messages from elsewhere on the channel are skipped.
	for _, payload := range []string{"", "no-separators", "ns\x00key", "\x00k\x001", "ns\x00\x001", "ns\x00k\x00v1"} {
		if err := f.raw.Publish(ctx, pub.Channel(), payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Publish(ctx, ns, warmcache.Key{Text: "last"}, 9); err != nil {
		t.Fatal(err)
	}
	var got []invalidation
	for range len(sent) + 1 {
		got = append(got, sub.next(t))
	}
	want := append(slices.Clone(sent), invalidation{"widgets.v2", "last", 9})
	if !slices.Equal(got, want) {
		t.Errorf("delivered %+v, want %+v", got, want)
	}
	if n := promregtest.Value(t, reg, "warmcache_invalidations_published_total", "result", "ok"); n != 4 {
		t.Errorf("published ok = %v, want 4", n)
	}
}

func TestInvalidationsChannelFollowsPrefix(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	inv := newInvalidations(t, f, nil)
	if want := f.prefix + "invalidate"; inv.Channel() != want {
		t.Errorf("Channel() = %q, want %q", inv.Channel(), want)
	}
}

func TestInvalidationsResyncAfterReconnect(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ctx := testContext(t)
	before := pubsubClients(t, f)
	reg := prometheus.NewRegistry()
	sub := subscribe(t, newInvalidations(t, f, reg))
	var ours []string
	for _, id := range pubsubClients(t, f) {
		if !slices.Contains(before, id) {
			ours = append(ours, id)
		}
	}
	if len(ours) == 0 {
		t.Fatal("found no new pub/sub connection")
	}
	// Another test's subscription may have started meanwhile; a kill only
	// makes it resync.
	for _, id := range ours {
		if err := f.raw.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
			t.Fatalf("client kill: %v", err)
		}
	}
	sub.waitResync(t)
	if n := promregtest.Value(t, reg, "warmcache_invalidation_resyncs_total"); n != 2 {
		t.Errorf("resyncs = %v, want 2", n)
	}
	// The new subscription delivers.
	pub := newInvalidations(t, f, nil)
	if err := pub.Publish(ctx, &warmcache.Namespace{Name: "n"}, warmcache.Key{Text: "k"}, 3); err != nil {
		t.Fatal(err)
	}
	if got := sub.next(t); got != (invalidation{"n", "k", 3}) {
		t.Errorf("after reconnect delivered %+v", got)
	}
}

// pubsubClients lists the ids of the Redis connections in pub/sub mode.
func pubsubClients(tb testing.TB, f *fixture) []string {
	tb.Helper()
	list, err := f.raw.ClientList(testContext(tb)).Result()
	if err != nil {
		tb.Fatalf("client list: %v", err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " cmd=subscribe") && !strings.Contains(line, " sub=1") {
			continue
		}
		for _, field := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(field, "id="); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

func TestNewInvalidationsRegisterConflict(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	reg := prometheus.NewRegistry()
	newInvalidations(t, f, reg)
	if _, err := rediscache.NewInvalidations(f.cache, reg, nil); err == nil {
		t.Fatal("second NewInvalidations on one registry succeeded")
	}
}

// TestFillPublish checks that a write's fill and its invalidation go out
// together: the fill under the version rules, the invalidation whether the
// fill stored anything or not, and, for several keys, each key's.
func TestFillPublish(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	reg := prometheus.NewRegistry()
	inv := newInvalidations(t, f, reg)
	sub := subscribe(t, inv)
	ns := &warmcache.Namespace{Name: "widgets"}
	ctx := testContext(t)
	f.fill(t, ns, "7", present(5, `"v5"`))

	publish := func(fills ...warmcache.Fill) {
		t.Helper()
		if fillErr, publishErr := inv.FillPublish(ctx, ns, fills); fillErr != nil || publishErr != nil {
			t.Fatalf("FillPublish = %v, %v", fillErr, publishErr)
		}
		for _, fl := range fills {
			want := invalidation{ns.Name, fl.Key.Text, fl.Entry.Version}
			if got := sub.next(t); got != want {
				t.Fatalf("delivered %+v, want %+v", got, want)
			}
		}
	}
	publish(warmcache.Fill{Key: warmcache.Key{Text: "7"}, Entry: present(6, `"v6"`), Keep: testKeep, Cached: true})
	if got, hit := f.get(t, ns, "7"); !hit || !sameEntry(got, present(6, `"v6"`)) {
		t.Fatalf("after a newer write's fill: Get = %+v, %v; want version 6", got, hit)
	}
	publish(warmcache.Fill{Key: warmcache.Key{Text: "7"}, Entry: present(4, `"v4"`), Keep: testKeep, Cached: true})
	if got, hit := f.get(t, ns, "7"); !hit || !sameEntry(got, present(6, `"v6"`)) {
		t.Fatalf("after an older fill: Get = %+v, %v; want version 6 kept", got, hit)
	}
	publish(warmcache.Fill{Key: warmcache.Key{Text: "8"}, Entry: present(9, `"v9"`), Keep: testKeep},
		warmcache.Fill{Key: warmcache.Key{Text: "9"}, Entry: present(10, `"v10"`), Keep: testKeep, Cached: true})
	for key, want := range map[string]warmcache.Entry{"8": present(9, `"v9"`), "9": present(10, `"v10"`)} {
		if got, hit := f.get(t, ns, key); !hit || !sameEntry(got, want) {
			t.Errorf("key %s: Get = %+v, %v; want %+v", key, got, hit, want)
		}
	}
	if n := promregtest.Value(t, reg, "warmcache_invalidations_published_total", "result", "ok"); n != 4 {
		t.Errorf("published ok = %v, want 4", n)
	}
}

// callCounter counts the calls a go-redis client sends: single commands
// and pipelines, each one round trip.
type callCounter struct {
	mu                  sync.Mutex
	commands, pipelines int
	sent                []string // the names of the single commands
	piped               []string // the names of the last pipeline's commands
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.commands++
		c.sent = append(c.sent, cmd.Name())
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		c.pipelines++
		c.piped = c.piped[:0]
		for _, cmd := range cmds {
			c.piped = append(c.piped, cmd.Name())
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (c *callCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commands, c.pipelines, c.sent, c.piped = 0, 0, nil, nil
}

// TestFillPublishFoldInOneRoundTrip checks that the fills of a fold of
// writes and their invalidations go to Redis as one pipeline, that each
// fill keeps its own outcome by version, and that a fill whose script the
// node lost is sent again with the script.
func TestFillPublishFoldInOneRoundTrip(t *testing.T) {
	calls := &callCounter{}
	f := newFixture(t, rediscache.Options{Instrument: func(c redis.UniversalClient) error {
		c.AddHook(calls)
		return nil
	}})
	inv := newInvalidations(t, f, nil)
	sub := subscribe(t, inv)
	ns := &warmcache.Namespace{Name: "widgets"}
	ctx := testContext(t)
	f.fill(t, ns, "1", present(5, `"v5"`))
	f.fill(t, ns, "2", present(9, `"v9"`))

	// A first write opens the pool's connection, whose handshake is
	// commands of its own.
	warm := warmcache.Fill{Key: warmcache.Key{Text: "0"}, Entry: present(1, `"v1"`), Keep: testKeep, Cached: true}
	if fillErr, publishErr := inv.FillPublish(ctx, ns, []warmcache.Fill{warm}); fillErr != nil || publishErr != nil {
		t.Fatalf("FillPublish = %v, %v", fillErr, publishErr)
	}
	sub.next(t)

	fold := []warmcache.Fill{
		{Key: warmcache.Key{Text: "1"}, Entry: present(6, `"v6"`), Keep: testKeep, Cached: true}, // newer: replaces
		{Key: warmcache.Key{Text: "2"}, Entry: present(8, `"v8"`), Keep: testKeep, Cached: true}, // older: kept out
		{Key: warmcache.Key{Text: "3"}, Entry: present(2, `"v2"`), Keep: testKeep, Cached: true}, // absent: stored
	}
	calls.reset()
	if fillErr, publishErr := inv.FillPublish(ctx, ns, fold); fillErr != nil || publishErr != nil {
		t.Fatalf("FillPublish = %v, %v", fillErr, publishErr)
	}
	calls.mu.Lock()
	commands, pipelines, piped := calls.commands, calls.pipelines, slices.Clone(calls.piped)
	calls.mu.Unlock()
	if pipelines != 1 || commands != 0 {
		t.Errorf("a fold of 3 writes took %d pipelines and %d single commands, want 1 pipeline", pipelines, commands)
	}
	if want := []string{"evalsha", "publish", "evalsha", "publish", "evalsha", "publish"}; !slices.Equal(piped, want) {
		t.Errorf("the pipeline sent %v, want %v", piped, want)
	}
	for _, fl := range fold {
		want := invalidation{ns.Name, fl.Key.Text, fl.Entry.Version}
		if got := sub.next(t); got != want {
			t.Fatalf("delivered %+v, want %+v", got, want)
		}
	}
	for key, want := range map[string]warmcache.Entry{"1": present(6, `"v6"`), "2": present(9, `"v9"`), "3": present(2, `"v2"`)} {
		if got, hit := f.get(t, ns, key); !hit || !sameEntry(got, want) {
			t.Errorf("key %s: Get = %+v, %v; want %+v", key, got, hit, want)
		}
	}

	// A node that lost its scripts (a restart, SCRIPT FLUSH) is sent the
	// script itself, and the fills still land.
	if err := f.raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	again := []warmcache.Fill{
		{Key: warmcache.Key{Text: "1"}, Entry: present(7, `"v7"`), Keep: testKeep, Cached: true},
		{Key: warmcache.Key{Text: "3"}, Entry: present(3, `"v3"`), Keep: testKeep, Replace: true},
	}
	if fillErr, publishErr := inv.FillPublish(ctx, ns, again); fillErr != nil || publishErr != nil {
		t.Fatalf("FillPublish after SCRIPT FLUSH = %v, %v", fillErr, publishErr)
	}
	for key, want := range map[string]warmcache.Entry{"1": present(7, `"v7"`), "3": present(3, `"v3"`)} {
		if got, hit := f.get(t, ns, key); !hit || !sameEntry(got, want) {
			t.Errorf("after SCRIPT FLUSH, key %s: Get = %+v, %v; want %+v", key, got, hit, want)
		}
	}
}
