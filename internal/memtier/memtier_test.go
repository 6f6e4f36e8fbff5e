package memtier_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

var ns = &warmcache.Namespace{Name: "widgets"}

func key(s string) warmcache.Key { return warmcache.Key{Text: s} }

func present(v int64, value string) warmcache.Entry {
	return warmcache.Entry{Value: []byte(value), Version: v, Found: true}
}

// TestHotVersionRules: the in-memory hot tier orders fills by version as
// the Redis tier does.
func TestHotVersionRules(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		first, then warmcache.Entry
		want        warmcache.Entry
	}{
		{"newer replaces", present(1, `1`), present(2, `2`), present(2, `2`)},
		{"older is refused", present(2, `2`), present(1, `1`), present(2, `2`)},
		{"equal version renews", present(2, `2`), present(2, `"two"`), present(2, `"two"`)},
		{"a delete replaces its version", present(2, `2`), warmcache.Entry{Version: 3}, warmcache.Entry{Version: 3}},
		{"a row does not replace a delete at its version", warmcache.Entry{Version: 3}, present(3, `3`), warmcache.Entry{Version: 3}},
		{"a read's absent entry does not replace a row", present(2, `2`), warmcache.Entry{}, present(2, `2`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := memtier.NewHot(nil)
			for _, e := range []warmcache.Entry{tc.first, tc.then} {
				if err := h.FillMany(ctx, ns, []warmcache.Fill{{Key: key("k"), Entry: e, Keep: time.Minute}}); err != nil {
					t.Fatal(err)
				}
			}
			es, hits, err := h.GetMany(ctx, ns, []warmcache.Key{key("k"), key("other")})
			if err != nil || !hits[0] || hits[1] {
				t.Fatalf("GetMany hits %v, %v; want k only", hits, err)
			}
			if got := es[0]; got.Version != tc.want.Version || got.Found != tc.want.Found || string(got.Value) != string(tc.want.Value) {
				t.Errorf("cached %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestHotKeep: an entry is gone once its Keep has passed.
func TestHotKeep(t *testing.T) {
	ctx := context.Background()
	clk := memtier.NewClock()
	h := memtier.NewHot(clk.Now)
	if err := h.FillMany(ctx, ns, []warmcache.Fill{{Key: key("k"), Entry: present(1, `1`), Keep: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if _, hit := h.Peek("widgets", "k"); !hit {
		t.Fatal("gone at the end of its Keep, want kept until past it")
	}
	clk.Advance(time.Millisecond)
	if _, hits, _ := h.GetMany(ctx, ns, []warmcache.Key{key("k")}); hits[0] {
		t.Fatal("still cached past its Keep")
	}
	h.SetDown(true)
	if _, _, err := h.GetMany(ctx, ns, []warmcache.Key{key("k")}); !errors.Is(err, warmcache.ErrUnavailable) {
		t.Fatalf("GetMany of a tier that is down: %v, want ErrUnavailable", err)
	}
}

// TestWarmWrites: versions grow, preconditions hold, and a transaction
// applies all its writes or none.
func TestWarmWrites(t *testing.T) {
	ctx := context.Background()
	w := memtier.NewWarm()
	w.Set("widgets", "a", []byte(`1`), 10)
	out, err := w.Write(ctx, ns, []warmcache.Write{{Key: key("a"), Value: []byte(`2`)}, {Key: key("b"), Value: []byte(`3`)}})
	if err != nil || out[0].Version <= 10 || out[1].Version <= out[0].Version {
		t.Fatalf("Write = %+v, %v; want growing versions above 10", out, err)
	}
	stale := int64(10)
	_, err = w.Write(ctx, ns, []warmcache.Write{{Key: key("c"), Value: []byte(`4`)}, {Key: key("a"), Value: []byte(`5`), IfMatch: &stale}})
	if !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Fatalf("Write with a stale IfMatch: %v, want ErrVersionMismatch", err)
	}
	if _, ok := w.Row("widgets", "c"); ok {
		t.Fatal("a failed transaction wrote its first write")
	}
	del, err := w.Write(ctx, ns, []warmcache.Write{{Key: key("b"), Delete: true}})
	if err != nil || del[0].Found || del[0].Version <= out[1].Version {
		t.Fatalf("delete = %+v, %v; want an absent entry at a new version", del, err)
	}
	if _, err := w.Write(ctx, ns, []warmcache.Write{{Key: key("b"), Delete: true}}); !errors.Is(err, warmcache.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	got, err := w.LookupMany(ctx, ns, []warmcache.Key{key("a"), key("b")})
	if err != nil || !got[0].Found || string(got[0].Value) != `2` || got[1].Found {
		t.Fatalf("LookupMany = %+v, %v", got, err)
	}
	if w.Lookups() != 1 || w.Keys() != 2 {
		t.Errorf("counted %d reads of %d keys, want 1 of 2", w.Lookups(), w.Keys())
	}
}
