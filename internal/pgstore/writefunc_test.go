package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// roundTrips is a pgx tracer that counts what a pool sends: each query and
// each batch is one round trip.
type roundTrips struct{ n, batches atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	r.batches.Add(1)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestWriteFunction checks that on PostgreSQL a write of one key, plain or
// conditional, upsert or delete, is one round trip through the table's
// write function, directly and through PgBouncer, with the answers of the
// statements it replaces; that a transaction of several writes is one
// round trip too; that with the setting off none is created and writes
// take their transaction; and that a function dropped while the store runs
// costs no write.
func TestWriteFunction(t *testing.T) {
	widgets := widgetsNamespace()
	stmts, err := pgstore.Statements(widgets, false)
	if err != nil {
		t.Fatal(err)
	}
	signature := stmts.WriteSignature()
	if signature == "" || stmts.WriteCall == "" {
		t.Fatalf("the widgets statements have no write function: %+v", stmts)
	}
	for _, tg := range []target{targets()[1], targets()[4]} {
		t.Run(tg.name, func(t *testing.T) {
			dsn := newDatabase(t, schema+seed)
			trips := &roundTrips{}
			opts := options(t, dsn, tg)
			opts.Tracer = trips
			log := &testproc.SyncBuffer{}
			s := openLogged(t, opts, log, widgets)
			if !functionExists(t, dsn, signature) {
				t.Errorf("Open did not create %s", signature)
			}
			writesInOneRoundTrip(t, s, widgets, trips)
			ctx := testContext(t)
			k := func(raw string) warmcache.Key { return key(t, widgets, raw) }

			// Dropped behind the store's back: writes go on, with a warning.
			execSQL(t, dsn, "DROP FUNCTION "+signature)
			for range 2 {
				if _, err := s.Put(ctx, widgets, k("12"), []byte(`{}`), nil); err != nil {
					t.Fatalf("Put after the function was dropped: %v", err)
				}
			}
			if got := log.String(); strings.Count(got, "the write function is gone") != 1 {
				t.Errorf("log after the function was dropped = %q, want one warning", got)
			}
		})
	}

	t.Run("off", func(t *testing.T) {
		dsn := newDatabase(t, schema+seed)
		opts := options(t, dsn, targets()[1])
		opts.WriteFunction = pgstore.FunctionOff
		s := openLogged(t, opts, &testproc.SyncBuffer{}, widgets)
		if functionExists(t, dsn, signature) {
			t.Fatalf("Open with the write function off created %s", signature)
		}
		if _, err := s.Put(testContext(t), widgets, key(t, widgets, "10"), []byte(`{}`), nil); err != nil {
			t.Fatal(err)
		}
	})
}

// writesInOneRoundTrip checks that each write of one key, plain or
// conditional, upsert or delete, refused or not, and a transaction of
// several, is one round trip of s, as trips counts them.
func writesInOneRoundTrip(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace, trips *roundTrips) {
	t.Helper()
	ctx := testContext(t)
	k := func(raw string) warmcache.Key { return key(t, ns, raw) }
	one := func(what string, write func() error) {
		t.Helper()
		before := trips.n.Load()
		err := write()
		if got := trips.n.Load() - before; got != 1 {
			t.Errorf("%s took %d round trips, want 1", what, got)
		}
		if err != nil && !errors.Is(err, warmcache.ErrVersionMismatch) && !errors.Is(err, warmcache.ErrNotFound) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	var put warmcache.Entry
	one("a put", func() (err error) { put, err = s.Put(ctx, ns, k("10"), []byte(`{"n": 10}`), nil); return err })
	if !put.Found || string(put.Value) != `{"n": 10}` || put.Version == 0 {
		t.Fatalf("Put = %+v", put)
	}
	var again warmcache.Entry
	one("a conditional put", func() (err error) {
		again, err = s.Put(ctx, ns, k("10"), []byte(`{"n": 11}`), &put.Version)
		return err
	})
	if again.Version <= put.Version || string(again.Value) != `{"n": 11}` {
		t.Fatalf("conditional Put = %+v after version %d", again, put.Version)
	}
	one("a stale conditional put", func() error {
		_, err := s.Put(ctx, ns, k("10"), []byte(`{}`), &put.Version)
		if !errors.Is(err, warmcache.ErrVersionMismatch) {
			t.Errorf("stale conditional Put: err = %v, want ErrVersionMismatch", err)
		}
		return err
	})
	one("a stale conditional delete", func() error {
		_, err := s.Delete(ctx, ns, k("10"), &put.Version)
		if !errors.Is(err, warmcache.ErrVersionMismatch) {
			t.Errorf("stale conditional Delete: err = %v, want ErrVersionMismatch", err)
		}
		return err
	})
	var deleted int64
	one("a conditional delete", func() (err error) { deleted, err = s.Delete(ctx, ns, k("10"), &again.Version); return err })
	if deleted <= again.Version {
		t.Errorf("Delete at version %d, not after %d", deleted, again.Version)
	}
	one("a delete of an absent key", func() error {
		_, err := s.Delete(ctx, ns, k("10"), nil)
		if !errors.Is(err, warmcache.ErrNotFound) {
			t.Errorf("Delete of an absent key: err = %v, want ErrNotFound", err)
		}
		return err
	})
	if _, err := s.Put(ctx, ns, k("2"), []byte(`{"name": "dos"}`), nil); err != nil {
		t.Fatal(err)
	}
	one("a transaction of three writes", func() error {
		entries, err := s.Write(ctx, ns, []warmcache.Write{
			{Key: k("1"), Value: []byte(`{"name": "uno"}`)},
			{Key: k("2"), Delete: true},
			{Key: k("11"), Delete: true, AbsentOK: true},
		})
		if err == nil && (entries[1].Version <= entries[0].Version || entries[2].Found || entries[2].Version != 0) {
			t.Errorf("Write = %+v", entries)
		}
		return err
	})
}

// TestWriteFunctionLane checks the write function on both dialects' heap
// tables, Greenplum's included: each write of one key, and a transaction
// of several, is one round trip; an append-optimized table has none.
func TestWriteFunctionLane(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			tables := packedLaneTables()
			dsn := migrated(t, w, tables)
			for _, tb := range tables {
				ns := tb.Namespace
				t.Run(ns.Name, func(t *testing.T) {
					trips := &roundTrips{}
					s, err := openStore(t, pgstore.Options{DSN: dsn, MaxConns: 2, Tracer: trips}, prometheus.NewRegistry(), ns)
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					if !tb.Storage.AppendOptimized || !w.Greenplum {
						writesInOneRoundTrip(t, s, ns, trips)
						return
					}
					before := trips.n.Load()
					if _, err := s.Put(testContext(t), ns, key(t, ns, "10"), []byte(`{"n": 10}`), nil); err != nil {
						t.Fatal(err)
					}
					if got := trips.n.Load() - before; got < 2 {
						t.Errorf("a put of an append-optimized table took %d round trips: it has no write function, so it takes its transaction", got)
					}
				})
			}
		})
	}
}
