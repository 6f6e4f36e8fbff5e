package tiertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// WarmTier is a warm tier under test and the namespace the suite writes.
type WarmTier struct {
	Warm warmcache.Warm
	// Namespace is a writable namespace of Warm whose table stores any
	// JSON object, under keys of decimal digits (bigint or text keys).
	// The suite writes keys drawn at random, a different one for each
	// step, so the table need not be empty.
	Namespace *warmcache.Namespace
	// Invalid is a value the namespace's table refuses, with an error
	// that wraps warmcache.ErrInvalidValue. Nil leaves out the rules
	// that need one.
	Invalid []byte
}

// Warm runs the contract of warmcache.Warm on the tiers that newWarm
// returns.
//
// The rules:
//   - a write returns the entry a lookup then reads: for an upsert the
//     value (as the same JSON) and its new version, for a delete an absent
//     entry at the delete's version;
//   - a write's version exceeds every version the key had, deletes
//     included, and a transaction's versions ascend in its order;
//   - IfMatch: the row must exist at that version, or the write fails with
//     ErrVersionMismatch; IfAbsent: the key must not exist, or
//     ErrVersionMismatch;
//   - the delete of an absent key fails with ErrNotFound, unless AbsentOK,
//     when it returns the zero entry; an absent-ok delete at a version
//     fails with ErrVersionMismatch;
//   - a value the table refuses fails with ErrInvalidValue;
//   - a transaction applies all its writes in their order, or none: a
//     failing write rolls back the earlier ones;
//   - LookupMany's entries follow its keys, duplicates and absent keys
//     included;
//   - with an expiry column (Namespace.ExpiresColumn), the expiry rules of
//     warmExpiry: TTLs, expired rows read as absent, DeleteExpired.
func Warm(t *testing.T, newWarm func(t *testing.T) WarmTier) {
	t.Helper()
	// Keys are decimal numbers from a random base, so that the rules of
	// one run, and of runs on a shared table, never meet.
	var next atomic.Int64
	next.Store(rand.Int64N(1<<50) + 1<<40)
	open := func(t *testing.T) *warmTier {
		t.Helper()
		tier := newWarm(t)
		if tier.Warm == nil || tier.Namespace == nil {
			t.Fatal("tiertest: newWarm returned no tier or no namespace")
		}
		return &warmTier{WarmTier: tier, next: &next}
	}

	t.Run("a write returns what a lookup reads", func(t *testing.T) { warmWriteReads(t, open) })
	t.Run("an upsert's version exceeds the key's", func(t *testing.T) { warmUpsertVersion(t, open) })
	t.Run("a delete's version exceeds the key's", func(t *testing.T) { warmDeleteVersion(t, open) })
	t.Run("versions grow across deletes", func(t *testing.T) { warmVersionsAcrossDeletes(t, open) })
	t.Run("a delete of an absent key fails with ErrNotFound", func(t *testing.T) { warmDeleteAbsent(t, open) })
	t.Run("an absent-ok delete of an absent key returns the zero entry", func(t *testing.T) { warmAbsentOKDeleteAbsent(t, open) })
	t.Run("an absent-ok delete of a present key deletes it", func(t *testing.T) { warmAbsentOKDeletePresent(t, open) })
	t.Run("IfMatch at the key's version writes", func(t *testing.T) { warmIfMatch(t, open) })
	t.Run("a stale IfMatch fails with ErrVersionMismatch", func(t *testing.T) { warmStaleIfMatch(t, open) })
	t.Run("IfMatch on an absent key fails with ErrVersionMismatch", func(t *testing.T) { warmIfMatchAbsent(t, open) })
	t.Run("a delete at a version of an absent key fails with ErrNotFound", func(t *testing.T) { warmDeleteAtVersionAbsent(t, open) })
	t.Run("an absent-ok delete at a version of an absent key fails with ErrVersionMismatch", func(t *testing.T) { warmAbsentOKDeleteAtVersionAbsent(t, open) })
	t.Run("IfAbsent creates a key", func(t *testing.T) { warmIfAbsentCreates(t, open) })
	t.Run("IfAbsent of an existing key fails with ErrVersionMismatch", func(t *testing.T) { warmIfAbsentExisting(t, open) })
	t.Run("IfAbsent of a deleted key creates it", func(t *testing.T) { warmIfAbsentDeleted(t, open) })
	t.Run("a value the table refuses fails with ErrInvalidValue", func(t *testing.T) { warmRefusedValue(t, open) })
	t.Run("LookupMany keeps order and length", func(t *testing.T) { warmLookupManyOrder(t, open) })
	t.Run("LookupMany of no keys", func(t *testing.T) { warmLookupManyNone(t, open) })
	t.Run("Write of no writes", func(t *testing.T) { warmWriteNone(t, open) })
	t.Run("a transaction's versions ascend in its order", func(t *testing.T) { warmTxVersionsAscend(t, open) })
	t.Run("a key written twice in one transaction ends at the later write", func(t *testing.T) { warmTxKeyTwice(t, open) })
	t.Run("a transaction applies all its writes", func(t *testing.T) { warmTxAppliesAll(t, open) })
	t.Run("a failing write rolls back the earlier ones", func(t *testing.T) { warmTxRollsBack(t, open) })
	t.Run("Ping answers", func(t *testing.T) { warmPing(t, open) })
	warmExpiry(t, open)
}

// warmWriteReads runs the rule "a write returns what a lookup reads".
func warmWriteReads(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	v := w.value(1, "one")
	e := w.write1(t, put(k, v))
	if !e.Found || e.Version <= 0 || !sameJSON(e.Value, v) {
		t.Fatalf("upsert of a new key returned %s, want %s at a positive version", show(e), v)
	}
	w.expect(t, k, e)
	d := w.write1(t, del(k))
	if d.Found || d.Version <= e.Version || len(d.Value) != 0 {
		t.Fatalf("delete returned %s, want absent at a version over %d", show(d), e.Version)
	}
	w.expectAbsent(t, k)
}

// warmUpsertVersion runs the rule "an upsert's version exceeds the key's".
func warmUpsertVersion(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	e1 := w.write1(t, put(k, w.value(1, "one")))
	e2 := w.write1(t, put(k, w.value(2, "two")))
	if e2.Version <= e1.Version {
		t.Fatalf("versions went %d then %d, want growing", e1.Version, e2.Version)
	}
	w.expect(t, k, e2)
}

// warmDeleteVersion runs the rule "a delete's version exceeds the key's".
func warmDeleteVersion(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	e := w.write1(t, put(k, w.value(1, "one")))
	d := w.write1(t, del(k))
	if d.Found || d.Version <= e.Version {
		t.Fatalf("delete of version %d returned %s, want absent at a higher version", e.Version, show(d))
	}
	w.expectAbsent(t, k)
}

// warmVersionsAcrossDeletes runs the rule "versions grow across deletes".
func warmVersionsAcrossDeletes(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	var versions []int64
	for i, wr := range []warmcache.Write{
		put(k, w.value(1, "one")),
		del(k),
		put(k, w.value(2, "two")),
		{Key: k, Delete: true, AbsentOK: true},
		{Key: k, Value: w.value(3, "three"), IfAbsent: true},
		put(k, w.value(4, "four")),
		del(k),
	} {
		e := w.write1(t, wr)
		if n := len(versions); n > 0 && e.Version <= versions[n-1] {
			t.Fatalf("write %d (%s) at version %d, after %v: want above every version the key had", i, describe(wr), e.Version, versions)
		}
		versions = append(versions, e.Version)
	}
}

// warmDeleteAbsent runs the rule "a delete of an absent key fails with ErrNotFound".
func warmDeleteAbsent(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	never := w.key(t)
	if _, err := w.write(t, del(never)); !errors.Is(err, warmcache.ErrNotFound) {
		t.Errorf("delete of a key never written: %v, want ErrNotFound", err)
	}
	deleted := w.key(t)
	w.write1(t, put(deleted, w.value(1, "one")))
	w.write1(t, del(deleted))
	if _, err := w.write(t, del(deleted)); !errors.Is(err, warmcache.ErrNotFound) {
		t.Errorf("second delete of a key: %v, want ErrNotFound", err)
	}
}

// warmAbsentOKDeleteAbsent runs the rule "an absent-ok delete of an absent key returns the zero entry".
func warmAbsentOKDeleteAbsent(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	never, deleted := w.key(t), w.key(t)
	w.write1(t, put(deleted, w.value(1, "one")))
	w.write1(t, del(deleted))
	for _, k := range []warmcache.Key{never, deleted} {
		e := w.write1(t, warmcache.Write{Key: k, Delete: true, AbsentOK: true})
		if e.Found || e.Version != 0 || e.Value != nil {
			t.Errorf("absent-ok delete of absent key %s = %+v, want the zero entry", k.Text, e)
		}
		w.expectAbsent(t, k)
	}
}

// warmAbsentOKDeletePresent runs the rule "an absent-ok delete of a present key deletes it".
func warmAbsentOKDeletePresent(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	e := w.write1(t, put(k, w.value(1, "one")))
	d := w.write1(t, warmcache.Write{Key: k, Delete: true, AbsentOK: true})
	if d.Found || d.Version <= e.Version {
		t.Fatalf("absent-ok delete of version %d returned %s, want absent at a higher version", e.Version, show(d))
	}
	w.expectAbsent(t, k)
}

// warmIfMatch runs the rule "IfMatch at the key's version writes".
func warmIfMatch(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	e1 := w.write1(t, put(k, w.value(1, "one")))
	e2 := w.write1(t, warmcache.Write{Key: k, Value: w.value(2, "two"), IfMatch: &e1.Version})
	if !e2.Found || e2.Version <= e1.Version {
		t.Fatalf("upsert at IfMatch %d returned %s, want a higher version", e1.Version, show(e2))
	}
	w.expect(t, k, e2)
	d := w.write1(t, warmcache.Write{Key: k, Delete: true, IfMatch: &e2.Version})
	if d.Found || d.Version <= e2.Version {
		t.Fatalf("delete at IfMatch %d returned %s, want absent at a higher version", e2.Version, show(d))
	}
	w.expectAbsent(t, k)
}

// warmStaleIfMatch runs the rule "a stale IfMatch fails with ErrVersionMismatch".
func warmStaleIfMatch(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	e1 := w.write1(t, put(k, w.value(1, "one")))
	e2 := w.write1(t, put(k, w.value(2, "two")))
	stale := e1.Version
	for _, wr := range []warmcache.Write{
		{Key: k, Value: w.value(3, "three"), IfMatch: &stale},
		{Key: k, Delete: true, IfMatch: &stale},
		{Key: k, Delete: true, AbsentOK: true, IfMatch: &stale},
	} {
		if _, err := w.write(t, wr); !errors.Is(err, warmcache.ErrVersionMismatch) {
			t.Errorf("%s: %v, want ErrVersionMismatch", describe(wr), err)
		}
		w.expect(t, k, e2)
	}
}

// warmIfMatchAbsent runs the rule "IfMatch on an absent key fails with ErrVersionMismatch".
func warmIfMatchAbsent(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	version := int64(1)
	if _, err := w.write(t, warmcache.Write{Key: k, Value: w.value(1, "one"), IfMatch: &version}); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Errorf("upsert at IfMatch of a key never written: %v, want ErrVersionMismatch", err)
	}
	w.expectAbsent(t, k)
}

// warmDeleteAtVersionAbsent runs the rule "a delete at a version of an absent key fails with ErrNotFound".
func warmDeleteAtVersionAbsent(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	version := int64(1)
	if _, err := w.write(t, warmcache.Write{Key: k, Delete: true, IfMatch: &version}); !errors.Is(err, warmcache.ErrNotFound) {
		t.Errorf("delete at IfMatch of a key never written: %v, want ErrNotFound", err)
	}
}

// warmAbsentOKDeleteAtVersionAbsent runs the rule "an absent-ok delete at a version of an absent key fails with ErrVersionMismatch".
func warmAbsentOKDeleteAtVersionAbsent(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	e := w.write1(t, put(k, w.value(1, "one")))
	w.write1(t, del(k))
	if _, err := w.write(t, warmcache.Write{Key: k, Delete: true, AbsentOK: true, IfMatch: &e.Version}); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Errorf("absent-ok delete at the version the key had: %v, want ErrVersionMismatch", err)
	}
}

// warmIfAbsentCreates runs the rule "IfAbsent creates a key".
func warmIfAbsentCreates(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	v := w.value(1, "one")
	e := w.write1(t, warmcache.Write{Key: k, Value: v, IfAbsent: true})
	if !e.Found || e.Version <= 0 || !sameJSON(e.Value, v) {
		t.Fatalf("create returned %s, want %s", show(e), v)
	}
	w.expect(t, k, e)
}

// warmIfAbsentExisting runs the rule "IfAbsent of an existing key fails with ErrVersionMismatch".
func warmIfAbsentExisting(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	e := w.write1(t, put(k, w.value(1, "one")))
	if _, err := w.write(t, warmcache.Write{Key: k, Value: w.value(2, "two"), IfAbsent: true}); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Errorf("create of an existing key: %v, want ErrVersionMismatch", err)
	}
	w.expect(t, k, e)
}

// warmIfAbsentDeleted runs the rule "IfAbsent of a deleted key creates it".
func warmIfAbsentDeleted(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	w.write1(t, put(k, w.value(1, "one")))
	d := w.write1(t, del(k))
	e := w.write1(t, warmcache.Write{Key: k, Value: w.value(2, "two"), IfAbsent: true})
	if !e.Found || e.Version <= d.Version {
		t.Fatalf("create after a delete at version %d returned %s, want a higher version", d.Version, show(e))
	}
	w.expect(t, k, e)
}

// warmRefusedValue runs the rule "a value the table refuses fails with ErrInvalidValue".
func warmRefusedValue(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	if w.Invalid == nil {
		t.Skip("the tier refuses no value")
	}
	k := w.key(t)
	if _, err := w.write(t, put(k, w.Invalid)); !errors.Is(err, warmcache.ErrInvalidValue) {
		t.Errorf("upsert of %q: %v, want ErrInvalidValue", w.Invalid, err)
	}
	w.expectAbsent(t, k)
}

// warmLookupManyOrder runs the rule "LookupMany keeps order and length".
func warmLookupManyOrder(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	a, b, gone, missing1, missing2 := w.key(t), w.key(t), w.key(t), w.key(t), w.key(t)
	ea := w.write1(t, put(a, w.value(1, "a")))
	eb := w.write1(t, put(b, w.value(2, "b")))
	w.write1(t, put(gone, w.value(3, "gone")))
	w.write1(t, del(gone))
	keys := []warmcache.Key{b, missing1, a, gone, missing2, a}
	want := []warmcache.Entry{eb, {}, ea, {}, {}, ea}
	got := w.lookup(t, keys...)
	for i := range keys {
		if got[i].Found != want[i].Found || (want[i].Found && !sameEntry(got[i], want[i])) {
			t.Errorf("keys[%d] %s: %s, want %s", i, keys[i].Text, show(got[i]), show(want[i]))
		}
	}
}

// warmLookupManyNone runs the rule "LookupMany of no keys".
func warmLookupManyNone(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	got, err := w.Warm.LookupMany(callContext(t), w.Namespace, nil)
	if err != nil || len(got) != 0 {
		t.Errorf("LookupMany(nil) = %v, %v; want empty", got, err)
	}
}

// warmWriteNone runs the rule "Write of no writes".
func warmWriteNone(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	got, err := w.Warm.Write(callContext(t), w.Namespace, nil)
	if err != nil || len(got) != 0 {
		t.Errorf("Write(nil) = %v, %v; want empty", got, err)
	}
}

// warmTxVersionsAscend runs the rule "a transaction's versions ascend in its order".
func warmTxVersionsAscend(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k1, k2, k3 := w.key(t), w.key(t), w.key(t)
	es := w.mustWrite(t, put(k3, w.value(3, "c")), put(k1, w.value(1, "a")), put(k2, w.value(2, "b")))
	for i, e := range es {
		if !e.Found || e.Version <= 0 || (i > 0 && e.Version <= es[i-1].Version) {
			t.Fatalf("entries %v: want present at ascending versions", es)
		}
	}
	got := w.lookup(t, k3, k1, k2)
	for i := range es {
		if !sameEntry(got[i], es[i]) {
			t.Errorf("write %d: lookup reads %s, the write returned %s", i, show(got[i]), show(es[i]))
		}
	}
}

// warmTxKeyTwice runs the rule "a key written twice in one transaction ends at the later write".
func warmTxKeyTwice(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	k := w.key(t)
	es := w.mustWrite(t, put(k, w.value(1, "one")), put(k, w.value(2, "two")))
	if es[1].Version <= es[0].Version {
		t.Fatalf("versions %d then %d in one transaction, want growing", es[0].Version, es[1].Version)
	}
	w.expect(t, k, es[1])
	es = w.mustWrite(t, put(k, w.value(3, "three")), del(k))
	if es[1].Found || es[1].Version <= es[0].Version {
		t.Fatalf("upsert then delete in one transaction returned %s, %s; want the delete above the upsert", show(es[0]), show(es[1]))
	}
	w.expectAbsent(t, k)
}

// warmTxAppliesAll runs the rule "a transaction applies all its writes".
func warmTxAppliesAll(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	ks := w.keys(t, 5)
	seeded := w.mustWrite(t, put(ks[0], w.value(1, "1")), put(ks[1], w.value(2, "2")), put(ks[2], w.value(3, "3")))
	es := w.mustWrite(t,
		warmcache.Write{Key: ks[0], Value: w.value(10, "1"), IfMatch: &seeded[0].Version},
		del(ks[1]),
		warmcache.Write{Key: ks[3], Value: w.value(4, "4"), IfAbsent: true},
		warmcache.Write{Key: ks[4], Delete: true, AbsentOK: true},
		put(ks[0], w.value(11, "1")),
	)
	if es[0].Version <= seeded[0].Version || es[4].Version <= es[0].Version {
		t.Errorf("key 0 went to versions %d then %d from %d, want growing", es[0].Version, es[4].Version, seeded[0].Version)
	}
	if es[1].Found || es[1].Version <= seeded[1].Version {
		t.Errorf("delete returned %s, want absent above version %d", show(es[1]), seeded[1].Version)
	}
	if !es[2].Found || !sameJSON(es[2].Value, w.value(4, "4")) {
		t.Errorf("create returned %s", show(es[2]))
	}
	if e := es[3]; e.Found || e.Version != 0 || e.Value != nil {
		t.Errorf("absent-ok delete of an absent key = %+v, want the zero entry", e)
	}
	got := w.lookup(t, ks...)
	for i, want := range []warmcache.Entry{es[4], {}, seeded[2], es[2], {}} {
		if got[i].Found != want.Found || (want.Found && !sameEntry(got[i], want)) {
			t.Errorf("key %d reads %s, want %s", i, show(got[i]), show(want))
		}
	}
}

// warmTxRollsBack runs the rule "a failing write rolls back the earlier ones".
func warmTxRollsBack(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	ks := w.keys(t, 6)
	seeded := w.mustWrite(t, put(ks[0], w.value(1, "1")), put(ks[1], w.value(2, "2")), put(ks[2], w.value(3, "3")), put(ks[3], w.value(4, "4")))
	moved := w.write1(t, put(ks[0], w.value(10, "1")))
	w.write1(t, del(ks[1]))
	before := w.lookup(t, ks...)
	stale := seeded[0].Version
	failures := []struct {
		name string
		last warmcache.Write
		want error
	}{
		{"stale version", warmcache.Write{Key: ks[0], Value: w.value(0, "stale"), IfMatch: &stale}, warmcache.ErrVersionMismatch},
		{"create of an existing key", warmcache.Write{Key: ks[0], Value: w.value(0, "create"), IfAbsent: true}, warmcache.ErrVersionMismatch},
		{"delete of an absent key", del(ks[1]), warmcache.ErrNotFound},
		{"absent-ok delete at a version", warmcache.Write{Key: ks[1], Delete: true, AbsentOK: true, IfMatch: &seeded[1].Version}, warmcache.ErrVersionMismatch},
		{"value the table refuses", put(ks[2], w.Invalid), warmcache.ErrInvalidValue},
	}
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) {
			if f.want == warmcache.ErrInvalidValue && w.Invalid == nil {
				t.Skip("the tier refuses no value")
			}
			_, err := w.write(t,
				put(ks[2], w.value(30, "changed")),
				put(ks[5], w.value(6, "new")),
				del(ks[3]),
				warmcache.Write{Key: ks[0], Value: w.value(12, "1"), IfMatch: &moved.Version},
				f.last)
			if !errors.Is(err, f.want) {
				t.Errorf("err = %v, want %v", err, f.want)
			}
			after := w.lookup(t, ks...)
			for i := range ks {
				if after[i].Found != before[i].Found || (before[i].Found && !sameEntry(after[i], before[i])) {
					t.Errorf("key %d reads %s after the failed write, %s before it", i, show(after[i]), show(before[i]))
				}
			}
		})
	}
}

// warmPing runs the rule "Ping answers".
func warmPing(t *testing.T, open func(t *testing.T) *warmTier) {
	w := open(t)
	if err := w.Warm.Ping(callContext(t)); err != nil {
		t.Errorf("Ping = %v", err)
	}
}

// warmTier is a warm tier under test with the suite's source of keys.
type warmTier struct {
	WarmTier
	next *atomic.Int64
}

// key returns a key no other step of the suite uses.
func (w *warmTier) key(t *testing.T) warmcache.Key {
	t.Helper()
	raw := strconv.FormatInt(w.next.Add(1), 10)
	k, err := w.Namespace.ParseKey(raw)
	if err != nil {
		t.Fatalf("tiertest: key %s of namespace %s: %v", raw, w.Namespace.Name, err)
	}
	return k
}

// keys returns n keys as key does.
func (w *warmTier) keys(t *testing.T, n int) []warmcache.Key {
	t.Helper()
	out := make([]warmcache.Key, n)
	for i := range out {
		out[i] = w.key(t)
	}
	return out
}

// value returns a JSON object for n with a tag.
func (w *warmTier) value(n int, tag string) []byte {
	return fmt.Appendf(nil, `{"n": %d, "tag": %q}`, n, tag)
}

func put(k warmcache.Key, v []byte) warmcache.Write { return warmcache.Write{Key: k, Value: v} }

func del(k warmcache.Key) warmcache.Write { return warmcache.Write{Key: k, Delete: true} }

// describe names a write in a failure message.
func describe(w warmcache.Write) string {
	s := "upsert"
	if w.Delete {
		s = "delete"
	}
	s += " of " + w.Key.Text
	if w.IfMatch != nil {
		s += " at IfMatch " + strconv.FormatInt(*w.IfMatch, 10)
	}
	if w.IfAbsent {
		s += " IfAbsent"
	}
	if w.AbsentOK {
		s += " AbsentOK"
	}
	return s
}

// write runs one Write of writes; it fails the test when a successful
// Write does not return one entry per write.
func (w *warmTier) write(t *testing.T, writes ...warmcache.Write) ([]warmcache.Entry, error) {
	t.Helper()
	es, err := w.Warm.Write(callContext(t), w.Namespace, writes)
	if err == nil && len(es) != len(writes) {
		t.Fatalf("Write of %d writes returned %d entries", len(writes), len(es))
	}
	return es, err
}

// mustWrite runs one Write of writes and fails the test on error.
func (w *warmTier) mustWrite(t *testing.T, writes ...warmcache.Write) []warmcache.Entry {
	t.Helper()
	es, err := w.write(t, writes...)
	if err != nil {
		t.Fatalf("Write of %d writes: %v", len(writes), err)
	}
	return es
}

// write1 runs a Write of one write and fails the test on error.
func (w *warmTier) write1(t *testing.T, wr warmcache.Write) warmcache.Entry {
	t.Helper()
	es, err := w.write(t, wr)
	if err != nil {
		t.Fatalf("%s: %v", describe(wr), err)
	}
	return es[0]
}

// lookup reads keys in one LookupMany and fails the test on error or when
// the answer does not have the length of keys.
func (w *warmTier) lookup(t *testing.T, keys ...warmcache.Key) []warmcache.Entry {
	t.Helper()
	es, err := w.Warm.LookupMany(callContext(t), w.Namespace, keys)
	if err != nil {
		t.Fatalf("LookupMany(%d keys): %v", len(keys), err)
	}
	if len(es) != len(keys) {
		t.Fatalf("LookupMany of %d keys returned %d entries", len(keys), len(es))
	}
	return es
}

// expect fails the test unless a lookup of k reads want, byte for byte.
func (w *warmTier) expect(t *testing.T, k warmcache.Key, want warmcache.Entry) {
	t.Helper()
	if got := w.lookup(t, k)[0]; !sameEntry(got, want) {
		t.Errorf("lookup of %s reads %s, want %s", k.Text, show(got), show(want))
	}
}

// expectAbsent fails the test unless a lookup of k finds nothing.
func (w *warmTier) expectAbsent(t *testing.T, k warmcache.Key) {
	t.Helper()
	if got := w.lookup(t, k)[0]; got.Found {
		t.Errorf("lookup of %s reads %s, want it absent", k.Text, show(got))
	}
}
