package warmcache_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// countedExpirer is the in-memory warehouse that counts the sweeper's
// scans (DeleteExpired calls) and says when one deleted a row.
type countedExpirer struct {
	*memtier.Warm
	scans   atomic.Int64
	deleted chan struct{}
	mu      sync.Mutex
	at      []time.Time // when each scan began
}

func (c *countedExpirer) DeleteExpired(ctx context.Context, ns *warmcache.Namespace, limit int) ([]warmcache.Key, []warmcache.Entry, error) {
	c.scans.Add(1)
	c.mu.Lock()
	c.at = append(c.at, time.Now())
	c.mu.Unlock()
	keys, entries, err := c.Warm.DeleteExpired(ctx, ns, limit)
	if len(keys) > 0 {
		select {
		case c.deleted <- struct{}{}:
		default:
		}
	}
	return keys, entries, err
}

// runSweeper serves a namespace whose rows expire, on the clock now (nil:
// the wall clock), with RunSweeper running until the test ends.
func runSweeper(t *testing.T, interval, maxIdle time.Duration, now func() time.Time) (*warmcache.Service, *countedExpirer) {
	t.Helper()
	warm := &countedExpirer{Warm: memtier.NewWarm(), deleted: make(chan struct{}, 1)}
	ns := widgets()
	ns.ExpiresColumn = "expires_at"
	svc, err := warmcache.NewService(memtier.NewHot(nil), warm, []*warmcache.Namespace{ns}, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{SweepInterval: interval, SweepMaxIdle: maxIdle, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); svc.RunSweeper(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return svc, warm
}

// TestSweeperRestsWhenIdle counts the sweeper's scans of a namespace with
// nothing to expire: each empty sweep doubles the wait from the interval
// up to the bound, so over 2 s at a 20ms interval and a 320ms bound it
// scans at most about 11 times (20+40+80+160+320 ms, then every 320 ms),
// where a sweep every interval would scan about 100 times. A busy machine
// only makes the count smaller.
func TestSweeperRestsWhenIdle(t *testing.T) {
	_, warm := runSweeper(t, 20*time.Millisecond, 320*time.Millisecond, nil)
	time.Sleep(2 * time.Second)
	if n := warm.scans.Load(); n > 14 || n < 1 {
		t.Errorf("%d scans in 2 s of idle at a 20ms interval, backing off to 320ms; want 1 to 14", n)
	}
}

// TestSweeperOnTheServiceClock runs the sweeper on an Options.Now that
// stands still, then moves. While it stands, nothing comes due, so the
// sweeper does not scan; it still waits on real timers for what the clock
// says is left (20ms here), reading the clock about 100 times a second,
// where a sweeper that spun would read it millions of times. Once the
// clock moves past the interval, a scan follows within a rest.
func TestSweeperOnTheServiceClock(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var reads, moved atomic.Int64
	now := func() time.Time {
		reads.Add(1)
		return start.Add(time.Duration(moved.Load()))
	}
	_, warm := runSweeper(t, 20*time.Millisecond, 320*time.Millisecond, now)
	time.Sleep(time.Second)
	if n := warm.scans.Load(); n != 0 {
		t.Errorf("%d scans in 1 s on a clock that stands still; want none", n)
	}
	if n := reads.Load(); n > 1000 {
		t.Errorf("the clock read %d times in 1 s of a sweeper at a 20ms interval: it spins", n)
	}
	moved.Store(int64(time.Second))
	for deadline := time.Now().Add(time.Second); warm.scans.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no scan within 1 s of the clock moving 1 s forward, past the 20ms interval")
		}
	}
}

// TestSweeperWokenByAnExpiry checks that a write that sets an expiry wakes
// a sweeper that rests: the row is deleted by a sweep that the backoff
// alone would not have run yet. The sweeper starts at 1ms and doubles its
// rest on each empty sweep; after about 2 s its rest is about 2 s, and the
// row, written then with a 50ms TTL, must be deleted before the next sweep
// of the backoff's schedule (the last scan plus twice the last gap).
func TestSweeperWokenByAnExpiry(t *testing.T) {
	svc, warm := runSweeper(t, time.Millisecond, time.Minute, nil)
	time.Sleep(2200 * time.Millisecond)
	warm.mu.Lock()
	n := len(warm.at)
	if n < 3 {
		warm.mu.Unlock()
		t.Fatalf("%d scans in 2.2 s; want the backoff's first ones", n)
	}
	last, gap := warm.at[n-1], warm.at[n-1].Sub(warm.at[n-2])
	warm.mu.Unlock()
	scheduled := last.Add(2 * gap) // the backoff's next scan, at the earliest
	ttl := 50 * time.Millisecond
	start := time.Now()
	if _, err := svc.Transact(context.Background(), "widgets", []warmcache.Op{{Key: "1", Value: []byte(`1`), TTL: ttl}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-warm.deleted:
	case <-time.After(time.Until(scheduled)):
		t.Fatalf("the row that expired %v after its write is not deleted %v after it, though the backoff's next scan is due then (last gap %v): the write did not wake the sweeper",
			ttl, time.Since(start), gap)
	}
	if time.Since(start) < ttl {
		t.Errorf("deleted %v after the write, before its %v expiry", time.Since(start), ttl)
	}
	if warm.Len() != 0 {
		t.Errorf("the warehouse holds %d rows after the sweep, want none", warm.Len())
	}
}
