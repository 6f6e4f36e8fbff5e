package pgstore_test

import (
	"errors"
	"testing"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
)

func TestWriteTransaction(t *testing.T) {
	for _, appendOptimized := range []bool{false, true} {
		name := "upsert"
		if appendOptimized {
			name = "append_optimized"
		}
		t.Run(name, func(t *testing.T) {
			eachTarget(t, func(t *testing.T, tg target) {
				widgets := widgetsNamespace()
				s := mustOpenStore(t, newDatabase(t, schema), tg, widgets)
				if appendOptimized {
					if err := s.UseAppendOptimizedWrites(widgets.Name); err != nil {
						t.Fatal(err)
					}
				}
				checkWrite(t, s, widgets)
			})
		})
	}
}

// checkWrite checks that a Write of several changes commits all or none of
// them, and the create-only and absent-ok writes.
func checkWrite(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace) {
	ctx := testContext(t)
	k := func(raw string) warmcache.Key { return key(t, ns, raw) }
	seeded, err := s.Write(ctx, ns, []warmcache.Write{
		{Key: k("1"), Value: []byte(`{"n": 1}`)},
		{Key: k("2"), Value: []byte(`{"n": 2}`)},
		{Key: k("3"), Value: []byte(`{"n": 3}`)},
	})
	if err != nil || len(seeded) != 3 {
		t.Fatalf("Write of three upserts = %v, %v", seeded, err)
	}
	for i, e := range seeded {
		if !e.Found || e.Version == 0 || (i > 0 && e.Version <= seeded[i-1].Version) {
			t.Fatalf("entry %d = %+v; want found at growing versions", i, e)
		}
	}

	entries, err := s.Write(ctx, ns, []warmcache.Write{
		{Key: k("1"), Value: []byte(`{"n": 10}`), IfMatch: &seeded[0].Version},
		{Key: k("2"), Delete: true},
		{Key: k("4"), Value: []byte(`{"n": 4}`), IfAbsent: true},
		{Key: k("5"), Delete: true, AbsentOK: true},
		{Key: k("1"), Value: []byte(`{"n": 11}`)},
	})
	if err != nil {
		t.Fatalf("Write of mixed changes: %v", err)
	}
	if entries[1].Found || entries[1].Version <= seeded[2].Version {
		t.Errorf("delete entry = %+v; want absent at a new version", entries[1])
	}
	if e := entries[3]; e.Found || e.Version != 0 || e.Value != nil {
		t.Errorf("delete of an absent key with AbsentOK = %+v; want the zero entry", entries[3])
	}
	if entries[4].Version <= entries[0].Version {
		t.Errorf("the second write of key 1 is at version %d, not after %d", entries[4].Version, entries[0].Version)
	}
	want := map[string]string{"1": `{"n": 11}`, "3": `{"n": 3}`, "4": `{"n": 4}`}
	checkRows := func(what string) {
		t.Helper()
		got, err := s.LookupMany(ctx, ns, []warmcache.Key{k("1"), k("2"), k("3"), k("4"), k("5")})
		if err != nil {
			t.Fatal(err)
		}
		for i, raw := range []string{"1", "2", "3", "4", "5"} {
			if string(got[i].Value) != want[raw] || got[i].Found != (want[raw] != "") {
				t.Errorf("%s: key %s = %q (found %v), want %q", what, raw, got[i].Value, got[i].Found, want[raw])
			}
		}
	}
	checkRows("after the mixed write")

	failures := []struct {
		name  string
		last  warmcache.Write
		wantE error
	}{
		{"stale version", warmcache.Write{}, nil}, // set below
		{"create of an existing key", warmcache.Write{Key: k("1"), Value: []byte(`{}`), IfAbsent: true}, warmcache.ErrVersionMismatch},
		{"delete of an absent key", warmcache.Write{Key: k("2"), Delete: true}, warmcache.ErrNotFound},
		{"absent-ok delete at a version", warmcache.Write{Key: k("2"), Delete: true, AbsentOK: true, IfMatch: &seeded[1].Version}, warmcache.ErrVersionMismatch},
		{"value the table refuses", warmcache.Write{Key: k("3"), Value: []byte(`not json`)}, warmcache.ErrInvalidValue},
	}
	stale := seeded[0].Version // key 1 has moved on since
	failures[0].last = warmcache.Write{Key: k("1"), Value: []byte(`{}`), IfMatch: &stale}
	failures[0].wantE = warmcache.ErrVersionMismatch
	for _, f := range failures {
		_, err := s.Write(ctx, ns, []warmcache.Write{
			{Key: k("3"), Value: []byte(`{"n": "changed"}`)},
			{Key: k("6"), Value: []byte(`{"n": 6}`)},
			{Key: k("4"), Delete: true},
			f.last,
		})
		if !errors.Is(err, f.wantE) {
			t.Errorf("%s: err = %v, want %v", f.name, err, f.wantE)
		}
		checkRows("after a failed write (" + f.name + ")")
	}
}
