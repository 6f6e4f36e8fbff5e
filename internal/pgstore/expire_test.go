package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/pgstore"
	migrations "github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestExpiryQueryAndLoad checks the expiry where the warm tier's contract
// does not reach, on every packed storage of the lane, on PostgreSQL and
// on Greenplum: a containment query leaves out expired rows and returns
// each row's expiry; a bulk load writes rows that never expire, clearing
// the expiry of the rows it replaces, and brings an expired key back even
// with the value it had.
func TestExpiryQueryAndLoad(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			tables := packedLaneTables()
			dsn := migrated(t, w, tables)
			namespaces := namespacesOf(tables)
			s := laneStore(t, dsn, namespaces...)
			for _, ns := range namespaces {
				t.Run(ns.Name, func(t *testing.T) { checkExpiryQueryAndLoad(t, s, ns) })
			}
		})
	}
}

func checkExpiryQueryAndLoad(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tag := "exp-" + testenv.RandomSuffix(t)
	doc := func(n int) []byte { return fmt.Appendf(nil, `{"n": %d, "tag": %q}`, n, tag) }
	write := func(k int, ttl time.Duration) warmcache.Entry {
		t.Helper()
		es, err := s.Write(ctx, ns, []warmcache.Write{{Key: key(t, ns, fmt.Sprint(k)), Value: doc(k), TTL: ttl}})
		if err != nil {
			t.Fatalf("write %d: %v", k, err)
		}
		return es[0]
	}
	write(1, time.Millisecond)
	hour := write(2, time.Hour)
	write(3, 0)
	write(4, time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for {
		es, err := s.LookupMany(ctx, ns, []warmcache.Key{key(t, ns, "1"), key(t, ns, "4")})
		if err != nil {
			t.Fatal(err)
		}
		if !es[0].Found && !es[1].Found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rows with a TTL of 1ms still read as present after 5s")
		}
		time.Sleep(time.Millisecond)
	}
	rows, err := s.Query(ctx, ns, fmt.Appendf(nil, `{"tag": %q}`, tag), 10, nil)
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if len(rows) != 2 || rows[0].Key.Text != "2" || rows[1].Key.Text != "3" {
		t.Fatalf("Query = %v, want the live keys 2 and 3", rows)
	}
	if !rows[0].Entry.ExpiresAt.Equal(hour.ExpiresAt) || !rows[1].Entry.ExpiresAt.IsZero() {
		t.Errorf("Query's expiries = %v, %v; want %v and none", rows[0].Entry.ExpiresAt, rows[1].Entry.ExpiresAt, hour.ExpiresAt)
	}

	// Key 1 expired, key 2 expires in an hour: a load of both, key 1
	// with its old value, leaves both live for good.
	load := &sliceRows{rows: []warmcache.LoadRow{
		{Line: 1, Key: key(t, ns, "1"), Value: doc(1)},
		{Line: 2, Key: key(t, ns, "2"), Value: doc(2)},
	}}
	if _, err := s.Load(ctx, ns, load); err != nil {
		t.Fatalf("Load: %v", err)
	}
	es, err := s.LookupMany(ctx, ns, []warmcache.Key{key(t, ns, "1"), key(t, ns, "2")})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		if !e.Found || !e.ExpiresAt.IsZero() {
			t.Errorf("key %d after the load = %s expiring %v, want present without an expiry", i+1, e.Value, e.ExpiresAt)
		}
	}
}

// TestFirstWriteOverExpiredRow writes a key with a TTL, lets it expire, and
// creates it again (IfAbsent) before any sweep: the purge of the expired
// row is logged as a delete (which change capture and polling apply), and
// the new row's version must be above that delete's, or the caches would
// take the key as absent after the write. On PostgreSQL, whose delete
// trigger logs deletes.
func TestFirstWriteOverExpiredRow(t *testing.T) {
	w := testenv.Warehouses()[0]
	tb := bytesTable("blobs", migrations.Storage{})
	ns := tb.Namespace
	dsn := migrated(t, w, []migrations.Table{tb})
	s := laneStore(t, dsn, ns)
	ctx := testContext(t)
	k := key(t, ns, "app||lease")
	if _, err := s.Write(ctx, ns, []warmcache.Write{{Key: k, Value: []byte("a"), TTL: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	es, err := s.Write(ctx, ns, []warmcache.Write{{Key: k, Value: []byte("b"), IfAbsent: true, TTL: time.Hour}})
	if err != nil {
		t.Fatalf("a first write over an expired row: %v", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var logged int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM warmcache_deletes WHERE key = $1", k.Text).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if logged == 0 || logged >= es[0].Version {
		t.Fatalf("the purge was logged at version %d and the new row has %d; want a logged delete below the row", logged, es[0].Version)
	}
	if got, err := s.Lookup(ctx, ns, k); err != nil || !got.Found || string(got.Value) != "b" || got.Version != es[0].Version {
		t.Fatalf("Lookup = %+v, %v; want the new row", got, err)
	}
}

// TestWriteJudgesExpiryAfterItsLocks holds a key's write lock while the
// key's row expires, with an If-Match write of the row's version waiting
// for it: a read made meanwhile finds the key absent, so the write, which
// runs once the lock is released, must find it absent too and fail, on
// both dialects.
func TestWriteJudgesExpiryAfterItsLocks(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			tb := bytesTable("blobs", migrations.Storage{})
			ns := tb.Namespace
			dsn := migrated(t, w, []migrations.Table{tb})
			s := laneStore(t, dsn, ns)
			ctx := testContext(t)
			k := key(t, ns, "app||k")
			es, err := s.Write(ctx, ns, []warmcache.Write{{Key: k, Value: []byte("a"), TTL: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", pgstore.KeyLockHash(ns, k)); err != nil {
				t.Fatal(err)
			}
			v := es[0].Version
			done := make(chan error, 1)
			go func() {
				_, err := s.Write(ctx, ns, []warmcache.Write{{Key: k, Value: []byte("b"), IfMatch: &v, TTL: time.Hour}})
				done <- err
			}()
			time.Sleep(time.Until(es[0].ExpiresAt.Add(200 * time.Millisecond)))
			got, err := s.Lookup(ctx, ns, k)
			if err != nil || got.Found {
				t.Fatalf("Lookup after the expiry = %+v, %v; want absent", got, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, warmcache.ErrVersionMismatch) {
				t.Fatalf("an If-Match write that waited past the expiry: %v; want a version mismatch, as the read found the key absent", err)
			}
		})
	}
}
