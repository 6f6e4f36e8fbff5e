package memtier_test

import (
	"context"
	"errors"
	"testing"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

var ns = &warmcache.Namespace{Name: "widgets"}

func key(s string) warmcache.Key { return warmcache.Key{Text: s} }

// TestHotTierContract holds the in-memory hot tier to the rules of the
// Redis tier, on a clock the suite moves.
func TestHotTierContract(t *testing.T) {
	tiertest.Hot(t, func(t *testing.T) (warmcache.Hot, tiertest.Clock) {
		clk := memtier.NewClock()
		return memtier.NewHot(clk.Now), clk
	})
}

// TestWarmTierContract holds the in-memory warehouse to the rules of the
// SQL one.
func TestWarmTierContract(t *testing.T) {
	tiertest.Warm(t, func(t *testing.T) tiertest.WarmTier {
		return tiertest.WarmTier{Warm: memtier.NewWarm(), Namespace: &warmcache.Namespace{Name: "widgets", Writable: true, ExpiresColumn: "expires_at"}}
	})
}

// TestHotDown: a tier taken down fails every call with ErrUnavailable.
func TestHotDown(t *testing.T) {
	ctx := context.Background()
	h := memtier.NewHot(nil)
	h.SetDown(true)
	if _, _, err := h.GetMany(ctx, ns, []warmcache.Key{key("k")}); !errors.Is(err, warmcache.ErrUnavailable) {
		t.Fatalf("GetMany of a tier that is down: %v, want ErrUnavailable", err)
	}
}

// TestWarmSetAndCounts: a row set by a writer that bypasses the service is
// read as it is and later writes take versions above it; reads are
// counted with their keys.
func TestWarmSetAndCounts(t *testing.T) {
	ctx := context.Background()
	w := memtier.NewWarm()
	w.Set("widgets", "a", []byte(`1`), 10)
	out, err := w.Write(ctx, ns, []warmcache.Write{{Key: key("a"), Value: []byte(`2`)}, {Key: key("b"), Value: []byte(`3`)}})
	if err != nil || out[0].Version <= 10 || out[1].Version <= out[0].Version {
		t.Fatalf("Write = %+v, %v; want growing versions above 10", out, err)
	}
	got, err := w.LookupMany(ctx, ns, []warmcache.Key{key("a"), key("c")})
	if err != nil || !got[0].Found || string(got[0].Value) != `2` || got[1].Found {
		t.Fatalf("LookupMany = %+v, %v", got, err)
	}
	if w.Lookups() != 1 || w.Keys() != 2 {
		t.Errorf("counted %d reads of %d keys, want 1 of 2", w.Lookups(), w.Keys())
	}
}
