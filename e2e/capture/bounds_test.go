package capture_test

import (
	"context"
	"sync"
	"testing"
	"time"
)

// The shape of the change capture runs: keys 1..freshKeys, written for
// writeFor by freshWriters writers while freshReaders readers GET them.
const (
	freshKeys    = 200
	freshWriters = 2
	freshReaders = 4
	writeFor     = 4 * time.Second
)

// run writes and reads concurrently for writeFor and returns the reads.
func run(t testing.TB, s *stack, in *instance) []read {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), writeFor)
	defer cancel()
	var reads []read
	var wg sync.WaitGroup
	wg.Go(func() { reads = readers(ctx, in, s.keys, freshReaders) })
	s.writers(t, ctx, freshWriters)
	wg.Wait()
	return reads
}

func logReport(t testing.TB, mode string, s *stack, rep report) {
	t.Helper()
	writes := 0
	s.history.mu.Lock()
	for _, st := range s.history.states {
		writes += len(st) - 1
	}
	s.history.mu.Unlock()
	t.Logf("%s: %d writes in SQL, %d reads over REST, %d stale reads (answer older than a state committed more than 1s before); lag p50 %v, p99 %v, max %v (%d states measured)",
		mode, writes, rep.reads, rep.stale, rep.p50.Round(time.Millisecond), rep.p99.Round(time.Millisecond),
		rep.max.Round(time.Millisecond), len(rep.lags))
}

// TestChangeCapture: with change capture, p99 lag ≤ 1s and no key
// is stale 1s after the writers stop.
func TestChangeCapture(t *testing.T) {
	s := newStack(t, freshKeys)
	in := s.startInstance(t, "capture", map[string]string{"WARMCACHE_FRESHNESS": "capture"})
	waitMode(t, in, "capture", 15*time.Second)
	s.prewarm(t, in)
	rep := analyze(s.history, run(t, s, in), time.Second)
	logReport(t, "change capture", s, rep)
	if len(rep.lags) < 100 {
		t.Fatalf("only %d states measured", len(rep.lags))
	}
	if rep.p99 > time.Second {
		t.Errorf("lag p99 %v, want ≤ 1s", rep.p99)
	}
	time.Sleep(time.Second)
	stale, err := s.staleKeys(in)
	if err != nil {
		t.Fatalf("read every key: %v", err)
	}
	if len(stale) > 0 {
		t.Errorf("%d keys stale 1s after the writers stopped, such as %v", len(stale), stale[:min(5, len(stale))])
	}
}

// TestPolling: with polling every second, the lag is ≤ the
// interval + 1s, and no key is stale that long after the writers stop.
func TestPolling(t *testing.T) {
	const interval = time.Second
	s := newStack(t, freshKeys)
	in := s.startInstance(t, "poll", map[string]string{"WARMCACHE_FRESHNESS": "poll", "WARMCACHE_POLL_INTERVAL": interval.String()})
	waitMode(t, in, "poll", 15*time.Second)
	s.prewarm(t, in)
	rep := analyze(s.history, run(t, s, in), interval+time.Second)
	logReport(t, "polling every "+interval.String(), s, rep)
	if len(rep.lags) < 100 {
		t.Fatalf("only %d states measured", len(rep.lags))
	}
	if rep.p99 > interval+time.Second {
		t.Errorf("lag p99 %v, want ≤ %v", rep.p99, interval+time.Second)
	}
	if rep.stale > 0 {
		t.Errorf("%d reads answered a state older than one committed %v before", rep.stale, interval+time.Second)
	}
	time.Sleep(interval + time.Second)
	stale, err := s.staleKeys(in)
	if err != nil {
		t.Fatalf("read every key: %v", err)
	}
	if len(stale) > 0 {
		t.Errorf("%d keys stale %v after the writers stopped, such as %v", len(stale), interval+time.Second, stale[:min(5, len(stale))])
	}
}

// waitMode waits until the instance reports mode.
func waitMode(t testing.TB, in *instance, mode string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for in.mode() != mode {
		if time.Since(start) > limit {
			t.Fatalf("%s: mode %q, not %q within %v", in.name, in.mode(), mode, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}
