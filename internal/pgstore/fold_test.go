package pgstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	migrations "github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestWriteEach checks that independent writes folded into one transaction
// keep their own outcomes: a matching If-Match and a failed one, the
// delete of an absent key with and without AbsentOK, a value the table
// refuses next to good ones; that what succeeds is written at growing
// versions, and that a fold of writes that all succeed is one round trip.
func TestWriteEach(t *testing.T) {
	for _, tg := range []target{targets()[1], targets()[4]} {
		t.Run(tg.name, func(t *testing.T) {
			people := peopleNamespace()
			dsn := newDatabase(t, schema+seed)
			trips := &roundTrips{}
			opts := options(t, dsn, tg)
			opts.Tracer = trips
			s, err := openStore(t, opts, prometheus.NewRegistry(), people)
			if err != nil {
				t.Fatal(err)
			}
			if !s.FoldsWrites(people) {
				t.Fatal("FoldsWrites(people) = false on PostgreSQL with the write function")
			}
			ctx := testContext(t)
			k := func(raw string) warmcache.Key { return key(t, people, raw) }
			ann, err := s.LookupMany(ctx, people, []warmcache.Key{k("1")})
			if err != nil {
				t.Fatal(err)
			}
			wrong := ann[0].Version + 1000
			writes := []warmcache.Write{
				{Key: k("1"), Value: []byte(`{"name": "Ann", "age": 42}`), IfMatch: &ann[0].Version},
				{Key: k("2"), Value: []byte(`{"name": "Bo"}`), IfMatch: &wrong},
				{Key: k("3"), Delete: true},
				{Key: k("4"), Delete: true, AbsentOK: true},
				{Key: k("5"), Value: []byte(`{"name": "Cy", "age": "old"}`)},
				{Key: k("6"), Value: []byte(`{"name": "Di"}`)},
				{Key: k("7"), Value: []byte(`{"name": "Ed"}`)},
			}
			entries, errs := s.WriteEach(ctx, people, writes)
			for i, want := range []error{nil, warmcache.ErrVersionMismatch, warmcache.ErrNotFound, nil, warmcache.ErrInvalidValue, nil, nil} {
				if (want == nil) != (errs[i] == nil) || (want != nil && !errors.Is(errs[i], want)) {
					t.Errorf("write %d (key %s): error %v, want %v", i, writes[i].Key.Text, errs[i], want)
				}
			}
			if !entries[0].Found || entries[0].Version <= ann[0].Version {
				t.Errorf("the matching If-Match wrote %+v, want a version above %d", entries[0], ann[0].Version)
			}
			if entries[3].Found || entries[3].Version != 0 {
				t.Errorf("the delete of an absent key that may be absent answered %+v, want absent at version 0", entries[3])
			}
			if !entries[5].Found || !entries[6].Found || entries[5].Version == entries[6].Version {
				t.Errorf("the plain upserts wrote %+v and %+v, want two distinct versions", entries[5], entries[6])
			}
			got, err := s.LookupMany(ctx, people, []warmcache.Key{k("1"), k("2"), k("5"), k("6"), k("7")})
			if err != nil {
				t.Fatal(err)
			}
			for i, found := range []bool{true, true, false, true, true} {
				if got[i].Found != found {
					t.Errorf("after the fold, key %d found = %v, want %v", i, got[i].Found, found)
				}
			}
			if got[0].Version != entries[0].Version || got[1].Version == entries[0].Version {
				t.Errorf("after the fold the rows are at %d and %d; the written one should be at %d", got[0].Version, got[1].Version, entries[0].Version)
			}

			before, batches := trips.n.Load(), trips.batches.Load()
			_, errs = s.WriteEach(ctx, people, []warmcache.Write{
				{Key: k("8"), Value: []byte(`{"name": "Fa"}`)},
				{Key: k("9"), Value: []byte(`{"name": "Gi"}`)},
				{Key: k("6"), Delete: true},
			})
			for i, err := range errs {
				if err != nil {
					t.Errorf("write %d: %v", i, err)
				}
			}
			if n := trips.n.Load() - before; n != 1 {
				t.Errorf("a fold of three writes took %d round trips, want 1", n)
			}
			if n := trips.batches.Load() - batches; n != 0 {
				t.Errorf("a fold of three writes that all apply sent %d batches, want one statement", n)
			}
		})
	}
}

// TestFoldedWrites checks, through the core over PostgreSQL, that
// concurrent single writes of distinct keys fold (the fold-size histogram
// sees folds of more than one write), that each answers for itself, that
// concurrent writes of one key all apply at distinct versions with the last
// read back, and that with folding off every write goes alone.
func TestFoldedWrites(t *testing.T) {
	people := peopleNamespace()
	dsn := newDatabase(t, schema+seed)
	store := mustOpenStore(t, dsn, targets()[4], people)
	for _, fold := range []int{8, 1} {
		t.Run(fmt.Sprintf("fold=%d", fold), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			svc, err := warmcache.NewService(memtier.NewHot(nil), store, []*warmcache.Namespace{people}, reg,
				slog.New(slog.DiscardHandler), warmcache.Options{WriteFold: fold, WriteLanes: 1})
			if err != nil {
				t.Fatal(err)
			}
			ctx := testContext(t)
			const writers = 32
			var wg sync.WaitGroup
			errs := make([]error, writers)
			items := make([]warmcache.Item, writers)
			for i := range writers {
				wg.Go(func() {
					key := fmt.Sprint(100 + i)
					value := fmt.Sprintf(`{"name": "w%d"}`, i)
					if i%4 == 3 {
						value = `{"name": "x", "age": "refused"}`
					}
					items[i], errs[i] = svc.Put(ctx, "people", key, []byte(value), nil)
				})
			}
			wg.Wait()
			for i := range writers {
				if i%4 == 3 {
					if !errors.Is(errs[i], warmcache.ErrInvalidValue) {
						t.Errorf("write %d of a refused value: %v, want ErrInvalidValue", i, errs[i])
					}
					continue
				}
				if errs[i] != nil || !items[i].Entry.Found || items[i].Entry.Version == 0 {
					t.Errorf("write %d: %+v, %v", i, items[i], errs[i])
				}
			}
			// One key, written concurrently: every write applies, at its
			// own version.
			versions := make([]int64, 8)
			for i := range versions {
				wg.Go(func() {
					it, err := svc.Put(ctx, "people", "500", []byte(fmt.Sprintf(`{"name": "v%d"}`, i)), nil)
					if err != nil {
						t.Errorf("write %d of one key: %v", i, err)
					}
					versions[i] = it.Entry.Version
				})
			}
			wg.Wait()
			seen := map[int64]bool{}
			var top int64
			for _, v := range versions {
				if seen[v] {
					t.Errorf("two writes of one key answered version %d", v)
				}
				seen[v], top = true, max(top, v)
			}
			it, err := svc.GetLatest(ctx, "people", "500")
			if err != nil || it.Entry.Version != top {
				t.Errorf("the key written concurrently reads %+v, %v; want the highest version answered, %d", it, err, top)
			}
			count, sum := promregtest.Histogram(t, reg, "warmcache_write_fold_size")
			if fold == 1 && count != 0 {
				t.Errorf("with folding off %d folds were counted, want none", count)
			}
			if fold > 1 && (count == 0 || sum <= float64(count) || sum > float64(fold*int(count))) {
				t.Errorf("%d folds of %v writes; want folds of more than one write, none above %d", count, sum, fold)
			}
		})
	}
}

// TestFoldStatement checks a fold's one statement on a table of the bytes
// layout with text keys and expiries: every byte value comes back as
// written, each write at its own version, a TTL as an expiry, a delete
// among puts, each fold one statement.
func TestFoldStatement(t *testing.T) {
	ns := bytesTable("blobs", migrations.Storage{}).Namespace
	dsn := newDatabase(t, bytesSchema)
	trips := &roundTrips{}
	opts := options(t, dsn, targets()[4])
	opts.Tracer = trips
	s, err := openStore(t, opts, prometheus.NewRegistry(), ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	k := func(raw string) warmcache.Key { return key(t, ns, raw) }
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	folds := [][]warmcache.Write{
		{
			{Key: k("every-byte"), Value: every},
			{Key: k("empty"), Value: []byte{}},
			{Key: k("for a minute"), Value: []byte("soon gone"), TTL: time.Minute},
		},
		{
			{Key: k("empty"), Delete: true},
			{Key: k("every-byte"), Value: every[1:]},
			{Key: k("never there"), Delete: true, AbsentOK: true},
		},
	}
	var top int64 // the highest version of the folds before
	for n, writes := range folds {
		seen, high := map[int64]bool{}, top
		before := trips.batches.Load()
		started := time.Now()
		entries, errs := s.WriteEach(ctx, ns, writes)
		if sent := trips.batches.Load() - before; sent != 0 {
			t.Errorf("fold %d sent %d batches, want one statement", n, sent)
		}
		keys := make([]warmcache.Key, len(writes))
		for i, w := range writes {
			keys[i] = w.Key
			if errs[i] != nil {
				t.Fatalf("fold %d, write %d (%s): %v", n, i, w.Key.Text, errs[i])
			}
			if w.AbsentOK {
				continue
			}
			if v := entries[i].Version; v <= top || seen[v] {
				t.Errorf("fold %d, write %d (%s) at version %d, want one of its own above %d", n, i, w.Key.Text, v, top)
			}
			seen[entries[i].Version], high = true, max(high, entries[i].Version)
		}
		top = high
		got, err := s.LookupMany(ctx, ns, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range writes {
			switch {
			case w.Delete && (got[i].Found || entries[i].Found):
				t.Errorf("fold %d: %s deleted, then read %+v (written %+v)", n, w.Key.Text, got[i], entries[i])
			case !w.Delete && (!got[i].Found || !bytes.Equal(got[i].Value, w.Value) || got[i].Version != entries[i].Version || !bytes.Equal(entries[i].Value, w.Value)):
				t.Errorf("fold %d: %s written as %q at %d, read %q at %d", n, w.Key.Text, entries[i].Value, entries[i].Version, got[i].Value, got[i].Version)
			}
		}
		if n == 0 {
			exp := entries[2].ExpiresAt
			if exp.Before(started.Add(time.Minute-5*time.Second)) || exp.After(time.Now().Add(time.Minute+5*time.Second)) {
				t.Errorf("a write with a TTL of a minute expires at %v, %v after it was sent", exp, exp.Sub(started))
			}
		}
	}
}
