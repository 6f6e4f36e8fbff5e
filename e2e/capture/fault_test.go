package capture_test

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/testproc"
)

// faultKeys is the number of keys of a fault test; every one is cached
// before the fault, so that a change that is lost stays visible as a stale
// key (the TTL is 10 minutes).
const faultKeys = 100

// recoverLimit bounds how long the caches may take to converge after a
// fault ends; the measured time is reported.
const recoverLimit = 20 * time.Second

// capturing starts an instance with change capture and waits until it
// holds the slot.
func capturing(t testing.TB, s *stack, name string) *instance {
	t.Helper()
	in := s.startInstance(t, name, map[string]string{"WARMCACHE_FRESHNESS": "capture"})
	waitMode(t, in, "capture", 15*time.Second)
	return in
}

// capturingFault starts instance "a" of s holding the slot, with the fault
// keys read once through it, as each fault begins.
func capturingFault(t testing.TB, s *stack) (*stack, *instance) {
	t.Helper()
	in := capturing(t, s, "a")
	s.prewarm(t, in)
	return s, in
}

// during runs writers while fault runs, and stops them once fault has
// returned and they have written for at least a second more.
func during(t testing.TB, s *stack, fault func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.writers(t, ctx, 2) })
	time.Sleep(500 * time.Millisecond)
	fault()
	time.Sleep(time.Second)
	cancel()
	wg.Wait()
}

// settle checks that nothing written is lost (every key converges to its
// last committed state) and that the bound is back: a write of every key
// after the fault is served within the time reported.
func settle(t testing.TB, s *stack, in *instance, conn *pgx.Conn, what string) {
	t.Helper()
	lost := s.converge(t, in, recoverLimit)
	s.writeEach(t, conn)
	back := s.converge(t, in, recoverLimit)
	t.Logf("%s: every change written around the fault served %v after the writers stopped; a write of all %d keys afterwards served within %v",
		what, lost.Round(time.Millisecond), len(s.keys), back.Round(time.Millisecond))
}

// slotPID returns the pid of the walsender that streams the slot, 0 when
// none does.
func slotPID(t testing.TB, conn *pgx.Conn) int32 {
	t.Helper()
	var pid *int32
	err := conn.QueryRow(context.Background(), `SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'warmcache_test'`).Scan(&pid)
	if err != nil && err != pgx.ErrNoRows {
		t.Fatalf("read the slot: %v", err)
	}
	if pid == nil {
		return 0
	}
	return *pid
}

// TestFaultCapture runs each fault on a cluster, a Redis and instances of
// its own, the faults side by side.
func TestFaultCapture(t *testing.T) {
	t.Run("holder killed", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, faultKeys)
		a := capturing(t, s, "a")
		b := s.startInstance(t, "b", map[string]string{"WARMCACHE_FRESHNESS": "capture"})
		waitMode(t, b, "standby", 15*time.Second)
		s.prewarm(t, b)
		var takeover time.Duration
		during(t, s, func() {
			_ = a.proc.Stop(t, syscall.SIGKILL)
			takeover = waitMode(t, b, "capture", 15*time.Second)
		})
		t.Logf("holder killed with SIGKILL: the standby holds the slot %v later", takeover.Round(time.Millisecond))
		settle(t, s, b, s.connect(t), "holder killed")
	})

	t.Run("walsender terminated", func(t *testing.T) {
		t.Parallel()
		s, in := capturingFault(t, newStack(t, faultKeys))
		conn := s.connect(t)
		during(t, s, func() {
			pid := slotPID(t, conn)
			if pid == 0 {
				t.Fatal("no walsender streams the slot")
			}
			if _, err := conn.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatalf("terminate the walsender: %v", err)
			}
			took := testproc.Eventually(t, 15*time.Second, "the slot streamed again", func() bool {
				p := slotPID(t, conn)
				return p != 0 && p != pid
			})
			t.Logf("walsender %d terminated: streaming again %v later", pid, took.Round(time.Millisecond))
		})
		settle(t, s, in, conn, "walsender terminated")
	})

	t.Run("redis down during apply", func(t *testing.T) {
		t.Parallel()
		s, in := capturingFault(t, newStack(t, faultKeys))
		during(t, s, func() {
			s.redis.Freeze(t)
			time.Sleep(2 * time.Second) // the writes go on; their apply fails
			s.redis.Thaw(t)
		})
		settle(t, s, in, s.connect(t), "Redis frozen for 2s during apply")
	})

	t.Run("slot dropped", func(t *testing.T) {
		t.Parallel()
		s, in := capturingFault(t, newStack(t, faultKeys))
		conn := s.connect(t)
		during(t, s, func() {
			// An administrator can drop only a slot nobody streams: the
			// walsender is terminated first, and the drop is tried until
			// it comes before the service takes the slot again.
			start := time.Now()
			for {
				if pid := slotPID(t, conn); pid != 0 {
					_, _ = conn.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
				}
				_, err := conn.Exec(context.Background(), `SELECT pg_drop_replication_slot('warmcache_test')`)
				if err == nil {
					break
				}
				if time.Since(start) > 15*time.Second {
					t.Fatalf("drop the slot: %v", err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			testproc.Eventually(t, 15*time.Second-time.Since(start), "the slot created again and streamed", func() bool {
				return slotPID(t, conn) != 0
			})
			t.Logf("slot dropped: created again and streamed %v later", time.Since(start).Round(time.Millisecond))
		})
		settle(t, s, in, conn, "slot dropped")
	})

	t.Run("postgres restarted", func(t *testing.T) {
		t.Parallel()
		s, in := capturingFault(t, newStack(t, faultKeys))
		during(t, s, func() {
			s.pg.Stop(t)
			s.pg.Start(t)
			start := time.Now()
			waitMode(t, in, "capture", 30*time.Second)
			t.Logf("PostgreSQL restarted: the slot is held again %v later", time.Since(start).Round(time.Millisecond))
		})
		settle(t, s, in, s.connect(t), "PostgreSQL restarted")
	})

	t.Run("slot invalidated by max_slot_wal_keep_size", func(t *testing.T) {
		t.Parallel()
		s, in := capturingFault(t, newStackWith(t, faultKeys, "wal_level=logical", "max_slot_wal_keep_size=1MB"))
		_ = in.proc.Stop(t, syscall.SIGTERM)
		conn := s.connect(t)
		// Written while nobody consumes the slot, and then lost with it.
		s.writeEach(t, conn)
		ctx := context.Background()
		if _, err := conn.Exec(ctx, `CREATE TABLE filler (x bigint)`); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for {
			var status *string
			if err := conn.QueryRow(ctx, `SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'warmcache_test'`).Scan(&status); err != nil {
				t.Fatalf("read the slot: %v", err)
			}
			if status != nil && *status == "lost" {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("the slot is still %v after 30s of WAL switches and checkpoints", *status)
			}
			for _, sql := range []string{`INSERT INTO filler VALUES (1)`, `SELECT pg_switch_wal()`, `INSERT INTO filler VALUES (2)`, `SELECT pg_switch_wal()`, `CHECKPOINT`} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
		}
		t.Logf("slot invalidated (wal_status lost) %v after the instance stopped", time.Since(start).Round(time.Millisecond))
		b := capturing(t, s, "b")
		if log := b.logTail(); !strings.Contains(log, "invalidated") {
			t.Errorf("the new holder does not say that the slot was invalidated; log:\n%s", log)
		}
		settle(t, s, b, conn, "slot invalidated")
	})
}
