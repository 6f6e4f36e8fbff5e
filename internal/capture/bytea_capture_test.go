package capture_test

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/capture"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testproc"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// changes records what change capture applies, for the test to wait on.
type changes chan warmcache.Change

func (c changes) Apply(ctx context.Context, _ *warmcache.Namespace, chs []warmcache.Change) error {
	for _, ch := range chs {
		select {
		case c <- ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TestCaptureDecodesBytea inserts rows of a bytes namespace with SQL,
// outside the service, on a PostgreSQL cluster of its own with wal_level
// logical: change capture must hand the caches each row's bytes as
// written, every byte value and 1 MiB of random bytes (stored out of
// line), decoded from pgoutput's text form of bytea; and a row with an
// expiry as a refresh, which reads it with its expiry.
func TestCaptureDecodesBytea(t *testing.T) {
	pg := testproc.StartPostgres(t, "wal_level=logical", "max_wal_senders=10", "max_replication_slots=10", "wal_sender_timeout=10s")
	dsn := pg.CreateDatabase(t, "warmcache")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ns := &warmcache.Namespace{Name: "blobs", Table: "blobs", KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutBytes, ValueColumn: "body", VersionColumn: "version", ExpiresColumn: "expires_at", Writable: true}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	m, err := schema.OpenMigrator(ctx, conn, []schema.Table{{Namespace: ns, Managed: true}}, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	reg := prometheus.NewRegistry()
	store, err := pgstore.Open(ctx, pgstore.Options{DSN: dsn, MaxConns: 2}, []*warmcache.Namespace{ns}, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	gens, err := capture.NewGenerations(store, []*warmcache.Namespace{ns}, func(string, int64) bool { return true }, nil, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	got := make(changes, 16)
	r, err := capture.Start(ctx, capture.Options{Mode: capture.Capture, PostgreSQL: true, ReplicationDSN: dsn},
		[]*warmcache.Namespace{ns}, store, got, gens, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if r.Mode() != capture.ModeCapture {
		t.Fatalf("mode %q, want %q", r.Mode(), capture.ModeCapture)
	}

	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	random := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(21, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	want := map[string][]byte{"every-byte": every, "1MiB": random, "empty": {}}
	for key, v := range want {
		if _, err := conn.Exec(ctx, "INSERT INTO blobs (key, body) VALUES ($1, $2)", key, v); err != nil {
			t.Fatalf("insert %s: %v", key, err)
		}
	}
	for len(want) > 0 {
		select {
		case ch := <-got:
			v, ok := want[ch.Key.Text]
			if !ok {
				continue
			}
			if ch.Refresh || !ch.Entry.Found || !bytes.Equal(ch.Entry.Value, v) || ch.Entry.Version == 0 {
				t.Fatalf("change of %s: refresh %v, found %v, %d bytes, version %d; want the %d bytes inserted",
					ch.Key.Text, ch.Refresh, ch.Entry.Found, len(ch.Entry.Value), ch.Entry.Version, len(v))
			}
			delete(want, ch.Key.Text)
		case <-ctx.Done():
			t.Fatalf("change capture did not deliver %d rows", len(want))
		}
	}

	// A row with an expiry is read again from the warehouse, which returns
	// the expiry with it, so that no cache keeps its value past it.
	if _, err := conn.Exec(ctx, "INSERT INTO blobs (key, body, expires_at) VALUES ('expiring', '\\x01', now() + interval '1 hour')"); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ch := <-got:
			if ch.Key.Text != "expiring" {
				continue
			}
			if !ch.Refresh || ch.Entry.Found {
				t.Fatalf("change of a row with an expiry: refresh %v, found %v; want a refresh from the warehouse, not its value without the expiry", ch.Refresh, ch.Entry.Found)
			}
			return
		case <-ctx.Done():
			t.Fatal("change capture did not deliver the row with an expiry")
		}
	}
}
