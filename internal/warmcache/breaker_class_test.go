package warmcache_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// scriptedWarm answers every call with the error set last, as an adapter
// that has classified it would; a nil error reads an absent key. cancel,
// when set, is called when a call arrives (its client goes away then), and
// the call waits for its context.
type scriptedWarm struct {
	mu     sync.Mutex
	err    error
	cancel context.CancelFunc
}

func (w *scriptedWarm) set(err error, cancel context.CancelFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err, w.cancel = err, cancel
}

func (w *scriptedWarm) answer(ctx context.Context) error {
	w.mu.Lock()
	err, cancel := w.err, w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-ctx.Done()
		return fmt.Errorf("read: %w", ctx.Err())
	}
	return err
}

func (w *scriptedWarm) Lookup(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key) (warmcache.Entry, error) {
	return warmcache.Entry{}, w.answer(ctx)
}

func (w *scriptedWarm) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, error) {
	return make([]warmcache.Entry, len(keys)), w.answer(ctx)
}

func (w *scriptedWarm) Write(ctx context.Context, ns *warmcache.Namespace, writes []warmcache.Write) ([]warmcache.Entry, error) {
	if err := w.answer(ctx); err != nil {
		return nil, err
	}
	out := make([]warmcache.Entry, len(writes))
	for i, wr := range writes {
		out[i] = warmcache.Entry{Value: wr.Value, Version: 1, Found: !wr.Delete}
	}
	return out, nil
}

func (w *scriptedWarm) Ping(ctx context.Context) error { return nil }

func breakerService(t *testing.T, warm warmcache.Warm, threshold int) *warmcache.Service {
	t.Helper()
	svc, err := warmcache.NewService(memtier.NewHot(nil), warm, []*warmcache.Namespace{itemsNamespace()}, prometheus.NewRegistry(),
		slog.New(slog.DiscardHandler), warmcache.Options{BreakerThreshold: threshold, MaxBatchFold: 1})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func breakerOpen(err error) bool {
	return errors.Is(err, warmcache.ErrUnavailable) && strings.Contains(err.Error(), "circuit breaker open")
}

// Errors the warehouse answers about the request (a constraint the value
// violates) or about the service's own SQL (a bug) never open the breaker,
// however many: only the warehouse failing does. A bug is not reported as
// the warehouse being unavailable.
func TestBreakerCountsOnlyWarehouseFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		opens bool
		want  error // what Put's error wraps; nil: neither a client error nor unavailable
	}{
		{"check violation", fmt.Errorf("%w: new row violates check constraint", warmcache.ErrInvalidValue), false, warmcache.ErrInvalidValue},
		{"too large for an index", fmt.Errorf("%w: index row size exceeds maximum", warmcache.ErrTooLarge), false, warmcache.ErrTooLarge},
		{"deadlock", fmt.Errorf("%w: deadlock detected", warmcache.ErrConflict), false, warmcache.ErrConflict},
		{"feature not supported", errors.New("pgstore: put: ERROR: DELETE RETURNING is not supported (SQLSTATE 0A000)"), false, nil},
		{"connection refused", fmt.Errorf("%w: dial tcp: connection refused", warmcache.ErrUnavailable), true, warmcache.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warm := &scriptedWarm{}
			svc := breakerService(t, warm, 3)
			warm.set(tc.err, nil)
			for i := range 12 {
				_, err := svc.Put(context.Background(), "items", "1", []byte(`{}`), nil)
				if breakerOpen(err) {
					if !tc.opens {
						t.Fatalf("put %d: breaker opened after %q", i, tc.err)
					}
					return
				}
				switch {
				case tc.want != nil && !errors.Is(err, tc.want):
					t.Fatalf("put %d: %v, want it to wrap %v", i, err, tc.want)
				case tc.want == nil && (errors.Is(err, warmcache.ErrUnavailable) || err == nil):
					t.Fatalf("put %d: a bug answered as %v, want an unclassified error (500)", i, err)
				}
			}
			if tc.opens {
				t.Fatal("12 warehouse failures did not open the breaker")
			}
			// Another client's write still reaches the warehouse.
			warm.set(nil, nil)
			if _, err := svc.Put(context.Background(), "items", "2", []byte(`{}`), nil); err != nil {
				t.Fatalf("a good write after %q: %v", tc.err, err)
			}
		})
	}
}

// A client that cancels its read counts for nothing: not as a success that
// would reset the count of warehouse failures, nor as a failure.
func TestBreakerIgnoresCancelledReads(t *testing.T) {
	warm := &scriptedWarm{}
	svc := breakerService(t, warm, 2)
	down := fmt.Errorf("%w: connection reset", warmcache.ErrUnavailable)
	warm.set(down, nil)
	if _, err := svc.MGet(context.Background(), "items", []string{"1"}); !errors.Is(err, warmcache.ErrUnavailable) || breakerOpen(err) {
		t.Fatalf("first failure: %v", err)
	}
	// Cancelled reads, many of them: a success would reset the count.
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		warm.set(nil, cancel)
		if _, err := svc.MGet(ctx, "items", []string{"1"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled read: %v, want context.Canceled", err)
		}
	}
	warm.set(down, nil)
	if _, err := svc.MGet(context.Background(), "items", []string{"1"}); breakerOpen(err) || !errors.Is(err, warmcache.ErrUnavailable) {
		t.Fatalf("second failure: %v", err)
	}
	_, err := svc.MGet(context.Background(), "items", []string{"1"})
	if !breakerOpen(err) {
		t.Fatalf("after two failures with cancelled reads between them: %v, want the breaker open", err)
	}
}

// pingCounter is a hot and warm tier whose pings are counted and take a
// while, as a round trip does.
type pingCounter struct {
	*memtier.Hot
	pings atomic.Int64
}

func (p *pingCounter) Ping(ctx context.Context) error {
	p.pings.Add(1)
	time.Sleep(5 * time.Millisecond)
	return nil
}

type pingWarm struct {
	*scriptedWarm
	pings atomic.Int64
}

func (p *pingWarm) Ping(ctx context.Context) error {
	p.pings.Add(1)
	time.Sleep(5 * time.Millisecond)
	return nil
}

// A flood of readiness probes pings each tier once per second at most,
// however many probes arrive at once: a probe never takes a warehouse
// connection of its own.
func TestReadinessFloodPingsOnce(t *testing.T) {
	hot, warm := &pingCounter{Hot: memtier.NewHot(nil)}, &pingWarm{scriptedWarm: &scriptedWarm{}}
	clock := memtier.NewClockAt(time.Unix(1000, 0))
	svc, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{itemsNamespace()}, prometheus.NewRegistry(),
		slog.New(slog.DiscardHandler), warmcache.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	flood := func() {
		var wg sync.WaitGroup
		for range 500 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, st := range svc.Readiness(context.Background()) {
					if st.Err != nil {
						t.Errorf("tier %s: %v", st.Tier, st.Err)
					}
				}
			}()
		}
		wg.Wait()
	}
	flood()
	if h, w := hot.pings.Load(), warm.pings.Load(); h != 1 || w != 1 {
		t.Fatalf("500 concurrent probes pinged Redis %d and the warehouse %d times, want once each", h, w)
	}
	flood() // within the second: the cached answer
	if w := warm.pings.Load(); w != 1 {
		t.Fatalf("probes within a second of the last pinged the warehouse again (%d pings)", w)
	}
	clock.Advance(1100 * time.Millisecond)
	flood()
	if w := warm.pings.Load(); w != 2 {
		t.Fatalf("after a second, the warehouse was pinged %d times in all, want 2", w)
	}
}
