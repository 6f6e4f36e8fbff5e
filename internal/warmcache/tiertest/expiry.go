package tiertest

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// expiryPoll bounds how long a rule waits for a row with a TTL of a
// millisecond to read as expired on the warehouse's clock.
const expiryPoll = 5 * time.Second

// warmExpiry runs the expiry rules of a warm tier whose namespace has an
// expiry column:
//   - a write with a TTL returns its expiry, the warehouse's time of the
//     write plus the TTL, and a lookup reads the same; a write without one
//     never expires, and clears an earlier expiry;
//   - a row past its expiry reads as absent at once; over it IfMatch fails
//     with ErrVersionMismatch, a delete finds nothing (ErrNotFound), and
//     IfAbsent creates the key at a version above the expired row's;
//   - DeleteExpired (when the tier is a warmcache.Expirer) deletes expired
//     rows, each at a version above its row's, and never a live row.
func warmExpiry(t *testing.T, open func(t *testing.T) *warmTier) {
	t.Run("a write with a TTL returns its expiry and a lookup reads it", func(t *testing.T) { expiryTTL(t, open) })
	t.Run("an expired row reads as absent and writes treat it as absent", func(t *testing.T) { expiryExpiredAbsent(t, open) })
	t.Run("DeleteExpired deletes expired rows and no live one", func(t *testing.T) { expiryDeleteExpired(t, open) })
}

// expiryTTL runs the rule "a write with a TTL returns its expiry and a lookup reads it".
func expiryTTL(t *testing.T, open func(t *testing.T) *warmTier) {
	w := expiring(t, open)
	k := w.key(t)
	before := time.Now()
	e := w.write1(t, warmcache.Write{Key: k, Value: w.value(1, "ttl"), TTL: time.Hour})
	after := time.Now()
	const skew = 2 * time.Second // the warehouse's clock against this one
	if e.ExpiresAt.Before(before.Add(time.Hour-skew)) || e.ExpiresAt.After(after.Add(time.Hour+skew)) {
		t.Errorf("a write with a TTL of 1h at %v returned the expiry %v", before, e.ExpiresAt)
	}
	got := w.lookup(t, k)[0]
	if !got.Found || !got.ExpiresAt.Equal(e.ExpiresAt) {
		t.Errorf("lookup reads %s expiring %v, want the write's expiry %v", show(got), got.ExpiresAt, e.ExpiresAt)
	}
	e2 := w.write1(t, put(k, w.value(2, "no ttl")))
	if !e2.ExpiresAt.IsZero() {
		t.Errorf("a write without a TTL returned the expiry %v, want none", e2.ExpiresAt)
	}
	if got := w.lookup(t, k)[0]; !got.Found || !got.ExpiresAt.IsZero() {
		t.Errorf("after a write without a TTL, lookup reads %s expiring %v, want no expiry", show(got), got.ExpiresAt)
	}
}

// expiryExpiredAbsent runs the rule "an expired row reads as absent and writes treat it as absent".
func expiryExpiredAbsent(t *testing.T, open func(t *testing.T) *warmTier) {
	w := expiring(t, open)
	k := w.key(t)
	old := w.write1(t, warmcache.Write{Key: k, Value: w.value(1, "short"), TTL: time.Millisecond})
	w.awaitExpiry(t, k)
	if _, err := w.write(t, warmcache.Write{Key: k, Value: w.value(2, "if-match"), IfMatch: &old.Version}); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Errorf("IfMatch at the expired row's version: %v, want ErrVersionMismatch", err)
	}
	if _, err := w.write(t, del(k)); !errors.Is(err, warmcache.ErrNotFound) {
		t.Errorf("delete of an expired row: %v, want ErrNotFound", err)
	}
	created := w.write1(t, warmcache.Write{Key: k, Value: w.value(3, "created"), IfAbsent: true})
	if created.Version <= old.Version {
		t.Errorf("IfAbsent over an expired row at version %d got version %d, want a greater one", old.Version, created.Version)
	}
	w.expect(t, k, created)
}

// expiryDeleteExpired runs the rule "DeleteExpired deletes expired rows and no live one".
func expiryDeleteExpired(t *testing.T, open func(t *testing.T) *warmTier) {
	w := expiring(t, open)
	x, ok := w.Warm.(warmcache.Expirer)
	if !ok {
		t.Skip("the tier is no warmcache.Expirer")
	}
	gone, live, forever := w.key(t), w.key(t), w.key(t)
	old := w.write1(t, warmcache.Write{Key: gone, Value: w.value(1, "gone"), TTL: time.Millisecond})
	liveEntry := w.write1(t, warmcache.Write{Key: live, Value: w.value(2, "live"), TTL: time.Hour})
	foreverEntry := w.write1(t, put(forever, w.value(3, "forever")))
	w.awaitExpiry(t, gone)
	deleted := false
	// The table may hold other steps' expired rows: sweep until it
	// holds none.
	for range 1000 {
		keys, entries, err := x.DeleteExpired(callContext(t), w.Namespace, 100)
		if err != nil {
			t.Fatalf("DeleteExpired: %v", err)
		}
		if len(keys) != len(entries) {
			t.Fatalf("DeleteExpired returned %d keys and %d entries", len(keys), len(entries))
		}
		for i, k := range keys {
			switch k.Text {
			case live.Text, forever.Text:
				t.Errorf("DeleteExpired deleted the live key %s", k.Text)
			case gone.Text:
				deleted = true
				if e := entries[i]; e.Found || e.Version <= old.Version {
					t.Errorf("DeleteExpired returned %s for the row at version %d, want absent at a greater version", show(e), old.Version)
				}
			}
		}
		if len(keys) == 0 {
			break
		}
	}
	if !deleted {
		t.Errorf("DeleteExpired never deleted the expired key %s", gone.Text)
	}
	w.expectAbsent(t, gone)
	w.expect(t, live, liveEntry)
	w.expect(t, forever, foreverEntry)
	// The key lives again once written.
	again := w.write1(t, put(gone, w.value(4, "again")))
	if again.Version <= old.Version {
		t.Errorf("a write after the sweep got version %d, want above %d", again.Version, old.Version)
	}
}

// expiring opens a tier and skips the rule unless its namespace has an
// expiry column.
func expiring(t *testing.T, open func(t *testing.T) *warmTier) *warmTier {
	t.Helper()
	w := open(t)
	if w.Namespace.ExpiresColumn == "" {
		t.Skip("the namespace has no expiry column")
	}
	return w
}

// awaitExpiry waits, polling, until k reads as absent, and fails the test
// after expiryPoll.
func (w *warmTier) awaitExpiry(t *testing.T, k warmcache.Key) {
	t.Helper()
	deadline := time.Now().Add(expiryPoll)
	for w.lookup(t, k)[0].Found {
		if time.Now().After(deadline) {
			t.Fatalf("%s still reads as present %v after its TTL of 1ms", k.Text, expiryPoll)
		}
		time.Sleep(time.Millisecond)
	}
}

// hotExpiry runs the hot tier's expiry rule: a present entry's ExpiresAt
// is kept (at millisecond precision), and an absent entry at its version
// still wins over it.
func hotExpiry(t *testing.T, h *hotTier) {
	k := h.key("expiring")
	exp := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	e := present(3, `{"ttl":true}`)
	e.ExpiresAt = exp
	h.fill(t, warmcache.Fill{Key: k, Entry: e, Keep: hotKeep})
	got := h.expect(t, k, e)
	if !got.ExpiresAt.Equal(exp) {
		t.Errorf("ExpiresAt = %v, want %v", got.ExpiresAt, exp)
	}
	plain := h.key("plain")
	h.fill(t, warmcache.Fill{Key: plain, Entry: present(1, `1`), Keep: hotKeep})
	if got := h.expect(t, plain, present(1, `1`)); !got.ExpiresAt.IsZero() {
		t.Errorf("an entry without an expiry reads with ExpiresAt %v", got.ExpiresAt)
	}
	gone := h.key("deleted")
	h.fill(t, warmcache.Fill{Key: gone, Entry: absent(4), Keep: hotKeep})
	e4 := present(4, `4`)
	e4.ExpiresAt = exp
	h.fill(t, warmcache.Fill{Key: gone, Entry: e4, Keep: hotKeep})
	h.expect(t, gone, absent(4))
}

// nearExpiry runs the near cache's expiry rule: an entry carries its
// ExpiresAt and is kept for the lifetime it is given, even past that
// expiry, which the core judges (and gives no lifetime beyond).
func nearExpiry(t *testing.T, n warmcache.Near, clock Clock) {
	now, ok := clock.(interface{ Now() time.Time })
	if !ok {
		t.Skip("the clock does not tell its time")
	}
	ns := &warmcache.Namespace{Name: "tiertest", NearTTL: time.Hour}
	for i, at := range []time.Time{now.Now().Add(time.Minute), now.Now().Add(-time.Millisecond)} {
		k := warmcache.Key{Text: strconv.Itoa(11 + i), Int: int64(11 + i)}
		e := present(2, `"ttl"`)
		e.ExpiresAt = at
		n.Set(ns, k, e, NearLife)
		got, hit := n.Get(ns, k)
		if !hit || !sameEntry(got, e) || !got.ExpiresAt.Equal(at) {
			t.Errorf("Get = %s expiring %v, hit %v; want %s expiring %v, as it was set", show(got), got.ExpiresAt, hit, show(e), at)
		}
	}
}
