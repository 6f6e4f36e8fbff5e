package tiertest

import (
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// Dropper is a near cache that can drop a key whatever its version, for a
// change reported without one (nearcache.Cache.Drop, which Redis's key
// tracking feeds). Near runs the rules of Drop on a near cache that has it.
type Dropper interface {
	Drop(namespace, key string)
}

// NearMarkTTL is the MarkTTL that Near asks its near caches for: how long
// an invalidation, or a drop, refuses older versions.
const NearMarkTTL = 5 * time.Second

// NearLife is the lifetime that Near gives every Set: longer than the
// suite, so that only the version rules decide what a Get returns.
const NearLife = time.Hour

// Near runs the contract of warmcache.Near on the near caches that newNear
// returns: each remembers its marks for markTTL, on the Clock returned with
// it (required: marks expire on the near cache's clock). A near cache may
// decline to cache (admission, size bound), but the suite's few entries
// must all be admitted. Every Set is for NearLife.
//
// The rules (nearRules):
//   - Set: a newer version replaces an older one, an older one is refused,
//     an equal version renews the entry; an absent entry (a delete) wins
//     at its version; an absent entry of version zero (a key never
//     written) is cached only when nothing is;
//   - Invalidate(version): drops an older entry, keeps one at least that
//     version, and leaves a mark that refuses older stores, and admits
//     the written version, for MarkTTL; marks keep the highest version;
//   - Drop (when the near cache is a Dropper): drops the entry whatever its
//     version and leaves a mark at the dropped entry's version (a
//     dropped delete refuses a row at its version); it keeps an
//     invalidation's mark as it is, and leaves a key with nothing cached
//     alone;
//   - an entry carries its ExpiresAt (a row's TTL) and is kept for the
//     lifetime it is given, even past that expiry: the core judges it,
//     when the clock tells its time;
//   - namespaces are apart.
func Near(t *testing.T, newNear func(t *testing.T, markTTL time.Duration) (warmcache.Near, Clock)) {
	t.Helper()
	open := func(t *testing.T) (warmcache.Near, Clock) {
		t.Helper()
		n, clock := newNear(t, NearMarkTTL)
		if n == nil || clock == nil {
			t.Fatal("tiertest: newNear returned no near cache or no clock")
		}
		return n, clock
	}
	ns := &warmcache.Namespace{Name: "tiertest", NearTTL: time.Hour}
	key := warmcache.Key{Text: "7", Int: 7}
	for _, r := range nearRules {
		t.Run(r.name, func(t *testing.T) {
			n, clock := open(t)
			dropper, canDrop := n.(Dropper)
			for _, o := range r.ops {
				switch o.kind {
				case opSet:
					n.Set(ns, key, o.entry, NearLife)
				case opInvalidate:
					n.Invalidate(ns, key, o.version)
				case opDrop:
					if !canDrop {
						t.Skip("the near cache has no Drop")
					}
					dropper.Drop(ns.Name, key.Text)
				case opPassMark:
					clock.Advance(NearMarkTTL + time.Millisecond)
				}
			}
			got, ok := n.Get(ns, key)
			switch {
			case r.want == nil && ok:
				t.Errorf("Get = %s, want a miss", show(got))
			case r.want != nil && !ok:
				t.Errorf("Get missed, want %s", show(*r.want))
			case r.want != nil && !sameEntry(got, *r.want):
				t.Errorf("Get = %s, want %s", show(got), show(*r.want))
			}
		})
	}
	t.Run("an entry carries its expiry, which the core judges", func(t *testing.T) {
		n, clock := open(t)
		nearExpiry(t, n, clock)
	})
	t.Run("namespaces are apart", func(t *testing.T) {
		n, _ := open(t)
		other := &warmcache.Namespace{Name: ns.Name + "-other", NearTTL: time.Hour}
		n.Set(ns, key, present(5, `"v5"`), NearLife)
		n.Set(other, key, present(3, `"other"`), NearLife)
		n.Invalidate(other, warmcache.Key{Text: "8", Int: 8}, 9)
		n.Set(ns, warmcache.Key{Text: "8", Int: 8}, present(1, `"v1"`), NearLife)
		n.Invalidate(ns, key, 9)
		if got, ok := n.Get(other, key); !ok || !sameEntry(got, present(3, `"other"`)) {
			t.Errorf("the other namespace: Get = %s, %v; want its own entry, kept by an invalidation of this one", show(got), ok)
		}
		if got, ok := n.Get(ns, warmcache.Key{Text: "8", Int: 8}); !ok || !sameEntry(got, present(1, `"v1"`)) {
			t.Errorf("Get = %s, %v; want the entry that an invalidation of the other namespace leaves alone", show(got), ok)
		}
		if got, ok := n.Get(ns, key); ok {
			t.Errorf("Get = %s after its invalidation, want a miss", show(got))
		}
	})
}

// nearOpKind is what a step of a near rule does.
type nearOpKind int

const (
	opSet nearOpKind = iota
	opInvalidate
	opDrop
	opPassMark
)

// nearOp is one step of a near rule.
type nearOp struct {
	kind    nearOpKind
	entry   warmcache.Entry
	version int64
}

func set(e warmcache.Entry) nearOp            { return nearOp{kind: opSet, entry: e} }
func invalidate(v int64) nearOp               { return nearOp{kind: opInvalidate, version: v} }
func drop() nearOp                            { return nearOp{kind: opDrop} }
func passMark() nearOp                        { return nearOp{kind: opPassMark} }
func ops(steps ...nearOp) []nearOp            { return steps }
func want(e warmcache.Entry) *warmcache.Entry { return &e }

// nearRules are the near cache's version rules: steps on one key, and the
// entry a Get then returns (nil for a miss).
var nearRules = []struct {
	name string
	ops  []nearOp
	want *warmcache.Entry
}{
	{"nothing cached is a miss", ops(), nil},
	{"newer replaces older", ops(set(present(1, "1")), set(present(2, "2"))), want(present(2, "2"))},
	{"older never replaces newer", ops(set(present(2, "2")), set(present(1, "1"))), want(present(2, "2"))},
	{"same version renews", ops(set(present(2, "2")), set(present(2, `"two"`))), want(present(2, `"two"`))},
	{"delete replaces older row", ops(set(present(2, "2")), set(absent(3))), want(absent(3))},
	{"older row does not replace a delete", ops(set(absent(3)), set(present(2, "2"))), want(absent(3))},
	{"row at a delete's version does not replace it", ops(set(absent(3)), set(present(3, "3"))), want(absent(3))},
	{"newer row replaces a delete", ops(set(absent(3)), set(present(4, "4"))), want(present(4, "4"))},
	{"never-written absent key cached when nothing is", ops(set(absent(0))), want(absent(0))},
	{"never-written absent key does not replace a row", ops(set(present(1, "1")), set(absent(0))), want(present(1, "1"))},
	{"never-written absent key does not replace a delete", ops(set(absent(3)), set(absent(0))), want(absent(3))},
	{"invalidate drops older", ops(set(present(1, "1")), invalidate(2)), nil},
	{"invalidate drops an older delete", ops(set(absent(3)), invalidate(4)), nil},
	{"invalidate keeps same version", ops(set(present(2, "2")), invalidate(2)), want(present(2, "2"))},
	{"invalidate keeps a delete at its version", ops(set(absent(3)), invalidate(3)), want(absent(3))},
	{"invalidate keeps newer", ops(set(present(3, "3")), invalidate(2)), want(present(3, "3"))},
	{"invalidation refuses a late older read", ops(invalidate(2), set(present(1, "1"))), nil},
	{"invalidation refuses a late older read of a cached key", ops(set(present(1, "1")), invalidate(2), set(present(1, "1"))), nil},
	{"invalidation refuses an older delete", ops(invalidate(3), set(absent(2))), nil},
	{"invalidation admits the written version", ops(invalidate(2), set(present(2, "2"))), want(present(2, "2"))},
	{"invalidation admits a delete", ops(invalidate(2), set(absent(2))), want(absent(2))},
	{"invalidation refuses a never-written absent key", ops(invalidate(2), set(absent(0))), nil},
	{"invalidations keep the highest version", ops(invalidate(3), invalidate(2), set(present(2, "2"))), nil},
	{"invalidation is forgotten after MarkTTL", ops(invalidate(2), passMark(), set(present(1, "1"))), want(present(1, "1"))},
	{"drop removes an entry of any version", ops(set(present(9, "9")), drop()), nil},
	{"drop admits the dropped version again", ops(set(present(1, "1")), drop(), set(present(1, "1"))), want(present(1, "1"))},
	{"drop admits a newer version", ops(set(present(1, "1")), drop(), set(present(2, "2"))), want(present(2, "2"))},
	{"drop refuses an older version in the emptied place", ops(set(present(2, "2")), drop(), set(present(1, "1"))), nil},
	{"drop of a delete refuses the row it deleted", ops(set(absent(3)), drop(), set(present(2, "2"))), nil},
	{"drop of a delete refuses a row at its version", ops(set(absent(3)), drop(), set(present(3, "3"))), nil},
	{"drop of a delete admits the delete again", ops(set(absent(3)), drop(), set(absent(3))), want(absent(3))},
	{"drop of a delete admits a newer row", ops(set(absent(3)), drop(), set(present(4, "4"))), want(present(4, "4"))},
	{"drop's mark is forgotten after MarkTTL", ops(set(present(2, "2")), drop(), passMark(), set(present(1, "1"))), want(present(1, "1"))},
	{"drop of a key not cached leaves nothing", ops(drop(), set(present(1, "1"))), want(present(1, "1"))},
	{"drop keeps an invalidation's floor", ops(invalidate(3), drop(), set(present(2, "2"))), nil},
	{"drop keeps an invalidation's admission", ops(invalidate(3), drop(), set(present(3, "3"))), want(present(3, "3"))},
}
