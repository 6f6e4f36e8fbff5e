package capture_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFallbackGenerationAndInvalidate runs against a PostgreSQL without
// logical replication: the instance says why at start and polls. Rows are
// then rewritten at their old versions (triggers off, as a replica-role
// bulk job does), which no watermark can see; a generation bumped in SQL
// retires them within the poll interval, and _invalidate refreshes a key
// at once.
func TestFallbackGenerationAndInvalidate(t *testing.T) {
	s := newStackWith(t, 10, "wal_level=replica")
	in := s.startInstance(t, "auto", nil)
	waitMode(t, in, "poll", 15*time.Second)
	if log := in.logTail(); !strings.Contains(log, "wal_level is replica, not logical") {
		t.Errorf("no clear message about wal_level at start; log:\n%s", log)
	}
	s.prewarm(t, in)
	conn := s.connect(t)
	ctx := context.Background()
	rewrite := func(key int64, seq int64) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `UPDATE widgets SET value = jsonb_build_object('k', key, 'seq', $2::bigint) WHERE key = $1`, key, seq); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// One key, invalidated by the API.
	rewrite(1, 100)
	time.Sleep(2 * time.Second) // two polls: the rewrite stays invisible to them
	if seq, _, _ := in.get(ctx, 1); seq != 0 {
		t.Fatalf("a rewrite at the same version was noticed without help (seq %d); the test shows nothing", seq)
	}
	res, err := in.client.Post(in.url+"/v1/kv/widgets/_invalidate", "application/json", bytes.NewReader([]byte(`{"keys":[1]}`)))
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("_invalidate answered %d", res.StatusCode)
	}
	if seq, _, _ := in.get(ctx, 1); seq != 100 {
		t.Errorf("after _invalidate, key 1 answers seq %d, want 100", seq)
	}

	// Every key, retired by a generation bumped in SQL.
	for k := int64(2); k <= 10; k++ {
		rewrite(k, 200)
	}
	if _, err := conn.Exec(ctx, `UPDATE warmcache_generations SET generation = generation + 1 WHERE namespace = 'widgets'`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		seq, _, _ := in.get(ctx, 10)
		if seq == 200 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("a generation bumped in SQL is not followed within 5s (key 10 answers seq %d)", seq)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("a generation bumped in SQL retired the namespace's entries %v later (poll interval 1s)", time.Since(start).Round(time.Millisecond))
	for k := int64(2); k <= 10; k++ {
		if seq, _, _ := in.get(ctx, k); seq != 200 {
			t.Errorf("key %d answers seq %d after the generation bump, want 200", k, seq)
		}
	}
}
