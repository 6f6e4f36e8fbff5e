package warmcache

import (
	"strconv"
	"testing"
)

// TestOwnWritesAreBounded checks that ownWrites keeps at most
// maxOwnWrites keys, forgetting the oldest first, and that a key written
// again keeps its one place.
func TestOwnWritesAreBounded(t *testing.T) {
	o := newOwnWrites()
	ns := &Namespace{Name: "widgets"}
	key := func(i int) Key { return Key{Text: strconv.Itoa(i)} }
	for i := range maxOwnWrites + 10 {
		o.record(ns, []Key{key(i)}, []Entry{{Version: int64(i + 1)}}, 1)
		o.record(ns, []Key{key(i)}, []Entry{{Version: int64(i + 1)}}, 1) // again: no second place
	}
	if n := len(o.version); n != maxOwnWrites {
		t.Fatalf("ownWrites keeps %d keys, want %d", n, maxOwnWrites)
	}
	for i := range 10 {
		if o.covers(ns, key(i), int64(i+1), 1) {
			t.Fatalf("key %d, among the oldest, is still remembered", i)
		}
	}
	last := maxOwnWrites + 9
	if !o.covers(ns, key(last), int64(last+1), 1) {
		t.Fatalf("the newest key is forgotten")
	}
	if o.covers(ns, key(last), int64(last+1), 1) {
		t.Fatalf("a write is remembered after its change came back")
	}
}
