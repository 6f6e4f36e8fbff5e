package tiertest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// Hot runs the contract of warmcache.Hot on the tiers that newHot returns,
// each with the Clock that moves its time, or nil when it runs on the
// system clock. A tier on the system clock is given Keeps of 100ms where a
// rule needs an entry to expire, and polled until it is gone.
//
// The rules:
//   - the version rules of a fill (fillRules): a newer version replaces an
//     older one, an older one is refused, an equal version renews the
//     entry; an absent entry (a delete) wins at its version; an absent
//     entry of version zero (a read that found nothing) replaces no entry
//     but another such one. Each holds for a fill of one key and in a batch,
//     with Fill.Cached false and true: Cached changes round trips, never
//     the outcome;
//   - fills of one key in one batch, and concurrent fills, keep the newest;
//   - GetMany's entries and hits follow its keys, duplicates and misses
//     included; a cached absent entry is a hit, a key that holds nothing
//     is not;
//   - FreshUntil and a present entry's ExpiresAt are kept (at millisecond
//     precision), and an absent entry wins over a present one with an
//     expiry at its version;
//   - Keep bounds the lifetime of a fill (kept until it ends, gone past
//     it); a refused fill leaves the cached entry's lifetime, a renewal
//     takes its own; an expired entry refuses no fill;
//   - a Replace fill stores nothing where nothing is cached, and replaces
//     a cached entry under the version rules, alone or in a batch; over an
//     absent entry at version 0 (a read that found nothing, ordered against
//     no change) it leaves the key holding nothing;
//   - namespaces are apart; a negative version is refused.
func Hot(t *testing.T, newHot func(t *testing.T) (warmcache.Hot, Clock)) {
	t.Helper()
	var seq atomic.Int64
	open := func(t *testing.T) *hotTier {
		t.Helper()
		h, clock := newHot(t)
		if h == nil {
			t.Fatal("tiertest: newHot returned no tier")
		}
		return &hotTier{hot: h, clock: clock, ns: &warmcache.Namespace{Name: "tiertest"},
			prefix: "t" + strconv.FormatInt(seq.Add(1), 10) + "."}
	}

	for _, r := range fillRules {
		t.Run(r.name, func(t *testing.T) { checkFillRule(t, open(t), r) })
	}
	t.Run("a batch's fills of one key keep the newest", func(t *testing.T) { hotBatchNewest(t, open) })
	t.Run("concurrent fills keep the newest", func(t *testing.T) { hotConcurrentNewest(t, open) })
	t.Run("ExpiresAt is kept", func(t *testing.T) { hotExpiry(t, open(t)) })
	t.Run("GetMany keeps order and length", func(t *testing.T) { hotGetManyOrder(t, open) })
	t.Run("GetMany of no keys", func(t *testing.T) { hotGetManyNone(t, open) })
	t.Run("a cached absent entry is a hit", func(t *testing.T) { hotAbsentHit(t, open) })
	t.Run("a key that holds nothing is a miss", func(t *testing.T) { hotNothingMiss(t, open) })
	t.Run("FillMany of no fills", func(t *testing.T) { hotFillManyNone(t, open) })
	t.Run("FreshUntil is kept", func(t *testing.T) { hotFreshUntil(t, open) })
	t.Run("Keep bounds the lifetime of a fill", func(t *testing.T) { hotKeepBounds(t, open) })
	t.Run("a refused fill leaves the lifetime", func(t *testing.T) { hotRefusedLifetime(t, open) })
	t.Run("a renewal takes its own Keep", func(t *testing.T) { hotRenewalKeep(t, open) })
	t.Run("an expired entry refuses no fill", func(t *testing.T) { hotExpiredRefusesNone(t, open) })
	t.Run("a Replace fill only replaces", func(t *testing.T) { hotReplaceOnly(t, open(t)) })
	t.Run("namespaces are apart", func(t *testing.T) { hotNamespacesApart(t, open) })
	t.Run("negative version refused", func(t *testing.T) { hotNegativeVersion(t, open) })
	t.Run("Ping answers", func(t *testing.T) { hotPing(t, open) })
}

// hotReplaceOnly runs the rule "a Replace fill only replaces".
func hotReplaceOnly(t *testing.T, h *hotTier) {
	empty, older, newer, batchEmpty, batchOlder := h.key("empty"), h.key("older"), h.key("newer"), h.key("batch empty"), h.key("batch older")
	readAbsent := h.key("read absent")
	h.fill(t,
		warmcache.Fill{Key: readAbsent, Entry: absent(0), Keep: hotKeep},
		warmcache.Fill{Key: older, Entry: present(1, `"v1"`), Keep: hotKeep},
		warmcache.Fill{Key: newer, Entry: present(9, `"v9"`), Keep: hotKeep},
		warmcache.Fill{Key: batchOlder, Entry: present(1, `"v1"`), Keep: hotKeep})
	h.fill(t, warmcache.Fill{Key: empty, Entry: present(3, `"v3"`), Keep: hotKeep, Replace: true})
	h.expectMiss(t, empty)
	h.fill(t, warmcache.Fill{Key: older, Entry: present(3, `"v3"`), Keep: hotKeep, Replace: true})
	h.expect(t, older, present(3, `"v3"`))
	h.fill(t, warmcache.Fill{Key: newer, Entry: absent(3), Keep: hotKeep, Replace: true})
	h.expect(t, newer, present(9, `"v9"`))
	h.fill(t,
		warmcache.Fill{Key: batchEmpty, Entry: absent(4), Keep: hotKeep, Replace: true},
		warmcache.Fill{Key: batchOlder, Entry: absent(4), Keep: hotKeep, Replace: true})
	h.expectMiss(t, batchEmpty)
	h.expect(t, batchOlder, absent(4))
	h.expect(t, readAbsent, absent(0))
	h.fill(t, warmcache.Fill{Key: readAbsent, Entry: present(5, `"v5"`), Keep: hotKeep, Replace: true})
	h.expectMiss(t, readAbsent)
}

// hotBatchNewest runs the rule "a batch's fills of one key keep the newest".
func hotBatchNewest(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	for _, c := range []struct {
		name  string
		fills []warmcache.Entry
		want  warmcache.Entry
	}{
		{"older then newer", []warmcache.Entry{present(1, `"v1"`), present(2, `"v2"`)}, present(2, `"v2"`)},
		{"newer then older", []warmcache.Entry{present(2, `"v2"`), present(1, `"v1"`)}, present(2, `"v2"`)},
		{"present then read absent", []warmcache.Entry{present(2, `"v2"`), absent(0)}, present(2, `"v2"`)},
		{"delete then present at its version", []warmcache.Entry{present(2, `"v2"`), absent(3), present(3, `"v3"`)}, absent(3)},
	} {
		for _, cached := range []bool{false, true} {
			name := c.name
			if cached {
				name += " cached"
			}
			t.Run(name, func(t *testing.T) {
				k := h.key(name)
				fills := make([]warmcache.Fill, len(c.fills))
				for i, e := range c.fills {
					fills[i] = warmcache.Fill{Key: k, Entry: e, Keep: hotKeep, Cached: cached}
				}
				h.fill(t, fills...)
				h.expect(t, k, c.want)
			})
		}
	}
}

// hotConcurrentNewest runs the rule "concurrent fills keep the newest".
func hotConcurrentNewest(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	k := h.key("hot")
	const workers = 50
	versions := make([]int64, workers)
	for i := range versions {
		versions[i] = rand.Int64N(1_000_000) + 1
	}
	start := make(chan struct{})
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for _, v := range versions {
		wg.Go(func() {
			<-start
			errs <- h.hot.FillMany(callContext(t), h.ns, []warmcache.Fill{{Key: k, Entry: present(v, fmt.Sprintf(`{"v":%d}`, v)), Keep: hotKeep}})
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("FillMany: %v", err)
		}
	}
	top := slices.Max(versions)
	h.expect(t, k, present(top, fmt.Sprintf(`{"v":%d}`, top)))
}

// hotGetManyOrder runs the rule "GetMany keeps order and length".
func hotGetManyOrder(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	h.fill(t,
		warmcache.Fill{Key: h.key("a"), Entry: present(1, `{"a":1}`), Keep: hotKeep},
		warmcache.Fill{Key: h.key("neg"), Entry: absent(0), Keep: hotKeep},
		warmcache.Fill{Key: h.key("gone"), Entry: absent(4), Keep: hotKeep},
		warmcache.Fill{Key: h.key("b"), Entry: present(2, `{"b":2}`), Keep: hotKeep})
	reads := []struct {
		key  string
		want warmcache.Entry
		hit  bool
	}{
		{"b", present(2, `{"b":2}`), true},
		{"missing-1", warmcache.Entry{}, false},
		{"neg", absent(0), true},
		{"a", present(1, `{"a":1}`), true},
		{"gone", absent(4), true},
		{"missing-2", warmcache.Entry{}, false},
		{"a", present(1, `{"a":1}`), true},
	}
	keys := make([]warmcache.Key, len(reads))
	for i, r := range reads {
		keys[i] = h.key(r.key)
	}
	es, hits := h.get(t, keys...)
	for i, r := range reads {
		if hits[i] != r.hit || (r.hit && !sameEntry(es[i], r.want)) {
			t.Errorf("keys[%d] %s: %s, hit %v; want %s, hit %v", i, r.key, show(es[i]), hits[i], show(r.want), r.hit)
		}
	}
}

// hotGetManyNone runs the rule "GetMany of no keys".
func hotGetManyNone(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	es, hits, err := h.hot.GetMany(callContext(t), h.ns, nil)
	if err != nil || len(es) != 0 || len(hits) != 0 {
		t.Errorf("GetMany(nil) = %v, %v, %v; want empty", es, hits, err)
	}
}

// hotAbsentHit runs the rule "a cached absent entry is a hit".
func hotAbsentHit(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	neg, gone := h.key("neg"), h.key("gone")
	h.fill(t, warmcache.Fill{Key: neg, Entry: absent(0), Keep: hotKeep}, warmcache.Fill{Key: gone, Entry: absent(4), Keep: hotKeep})
	h.expect(t, neg, absent(0))
	h.expect(t, gone, absent(4))
	es, hits := h.get(t, neg, gone)
	if !hits[0] || !hits[1] || !sameEntry(es[0], absent(0)) || !sameEntry(es[1], absent(4)) {
		t.Errorf("GetMany = %s, %s, hits %v; want absent@0 and absent@4, both hits", show(es[0]), show(es[1]), hits)
	}
}

// hotNothingMiss runs the rule "a key that holds nothing is a miss".
func hotNothingMiss(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	h.expectMiss(t, h.key("never"))
	if _, hits := h.get(t, h.key("never-1"), h.key("never-2")); hits[0] || hits[1] {
		t.Errorf("GetMany of two keys never filled: hits %v, want none", hits)
	}
}

// hotFillManyNone runs the rule "FillMany of no fills".
func hotFillManyNone(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	if err := h.hot.FillMany(callContext(t), h.ns, nil); err != nil {
		t.Errorf("FillMany(nil) = %v", err)
	}
}

// hotFreshUntil runs the rule "FreshUntil is kept".
func hotFreshUntil(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	fresh := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	for _, c := range entryKinds() {
		t.Run(c.name, func(t *testing.T) {
			for _, at := range []time.Time{fresh, {}} {
				k := h.key(c.name + " " + strconv.FormatBool(at.IsZero()))
				e := c.entry
				e.FreshUntil = at
				h.fill(t, warmcache.Fill{Key: k, Entry: e, Keep: hotKeep})
				got := h.expect(t, k, e)
				if !got.FreshUntil.Equal(at) {
					t.Errorf("filled fresh until %v, read back %v", at, got.FreshUntil)
				}
			}
		})
	}
}

// hotKeepBounds runs the rule "Keep bounds the lifetime of a fill".
func hotKeepBounds(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	for _, c := range entryKinds() {
		t.Run(c.name, func(t *testing.T) {
			k := h.key(c.name)
			short := h.shortKeep()
			start := time.Now()
			h.fill(t, warmcache.Fill{Key: k, Entry: c.entry, Keep: short})
			if h.clock != nil {
				h.clock.Advance(short)
				if got, hit := h.get1(t, k); !hit || !sameEntry(got, c.entry) {
					t.Fatalf("at the end of its Keep: %s, hit %v; want %s kept until past it", show(got), hit, show(c.entry))
				}
				h.clock.Advance(time.Millisecond)
				if got, hit := h.get1(t, k); hit {
					t.Fatalf("past its Keep: %s still cached", show(got))
				}
				return
			}
			got, hit := h.get1(t, k)
			switch {
			case !hit && time.Since(start) < short:
				t.Fatalf("gone before its Keep of %v", short)
			case hit && !sameEntry(got, c.entry):
				t.Fatalf("read back %s, want %s", show(got), show(c.entry))
			}
			h.expectGone(t, k, start, short)
		})
	}
}

// hotRefusedLifetime runs the rule "a refused fill leaves the lifetime".
func hotRefusedLifetime(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	for _, cached := range []bool{false, true} {
		t.Run("cached "+strconv.FormatBool(cached), func(t *testing.T) {
			k := h.key(strconv.FormatBool(cached))
			short := h.shortKeep()
			start := time.Now()
			h.fill(t, warmcache.Fill{Key: k, Entry: present(5, `"v5"`), Keep: short})
			h.fill(t, warmcache.Fill{Key: k, Entry: present(3, `"v3"`), Keep: hotKeep, Cached: cached})
			h.expectGone(t, k, start, short)
		})
	}
}

// hotRenewalKeep runs the rule "a renewal takes its own Keep".
func hotRenewalKeep(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	t.Run("shorter", func(t *testing.T) {
		k := h.key("shorter")
		short := h.shortKeep()
		h.fill(t, warmcache.Fill{Key: k, Entry: present(5, `"first"`), Keep: hotKeep})
		start := time.Now()
		h.fill(t, warmcache.Fill{Key: k, Entry: present(5, `"again"`), Keep: short, Cached: true})
		h.expectGone(t, k, start, short)
	})
	t.Run("longer", func(t *testing.T) {
		k := h.key("longer")
		short := h.shortKeep()
		start := time.Now()
		h.fill(t, warmcache.Fill{Key: k, Entry: present(5, `"first"`), Keep: short})
		h.fill(t, warmcache.Fill{Key: k, Entry: present(5, `"again"`), Keep: hotKeep, Cached: true})
		h.passKeep(start, short)
		h.expect(t, k, present(5, `"again"`))
	})
}

// hotExpiredRefusesNone runs the rule "an expired entry refuses no fill".
func hotExpiredRefusesNone(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	for _, cached := range []bool{false, true} {
		t.Run("cached "+strconv.FormatBool(cached), func(t *testing.T) {
			k := h.key(strconv.FormatBool(cached))
			short := h.shortKeep()
			start := time.Now()
			h.fill(t, warmcache.Fill{Key: k, Entry: present(5, `"v5"`), Keep: short})
			h.expectGone(t, k, start, short)
			h.fill(t, warmcache.Fill{Key: k, Entry: present(3, `"v3"`), Keep: hotKeep, Cached: cached})
			h.expect(t, k, present(3, `"v3"`))
		})
	}
}

// hotNamespacesApart runs the rule "namespaces are apart".
func hotNamespacesApart(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	other := &warmcache.Namespace{Name: h.ns.Name + "-other"}
	k := h.key("k")
	h.fill(t, warmcache.Fill{Key: k, Entry: present(5, `"v5"`), Keep: hotKeep})
	if err := h.hot.FillMany(callContext(t), other, []warmcache.Fill{{Key: k, Entry: present(3, `"other"`), Keep: hotKeep}}); err != nil {
		t.Fatalf("FillMany in another namespace: %v", err)
	}
	h.expect(t, k, present(5, `"v5"`))
	es, hits, err := h.hot.GetMany(callContext(t), other, []warmcache.Key{k, h.key("only-here")})
	if err != nil || len(es) != 2 || len(hits) != 2 {
		t.Fatalf("GetMany in another namespace = %v, %v, %v", es, hits, err)
	}
	if !hits[0] || !sameEntry(es[0], present(3, `"other"`)) || hits[1] {
		t.Errorf("the other namespace reads %s (hit %v) and a hit %v; want its own entry and a miss", show(es[0]), hits[0], hits[1])
	}
}

// hotNegativeVersion runs the rule "negative version refused".
func hotNegativeVersion(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	k := h.key("negative")
	if err := h.hot.FillMany(callContext(t), h.ns, []warmcache.Fill{{Key: k, Entry: present(-1, `1`), Keep: hotKeep}}); err == nil {
		t.Error("a fill at version -1 succeeded, want an error")
	}
	h.expectMiss(t, k)
}

// hotPing runs the rule "Ping answers".
func hotPing(t *testing.T, open func(t *testing.T) *hotTier) {
	h := open(t)
	if err := h.hot.Ping(callContext(t)); err != nil {
		t.Errorf("Ping = %v", err)
	}
}

// fillRule is one case of the version rules: the key holds cached (nothing
// when nil), takes fill, and then holds want.
type fillRule struct {
	name   string
	cached *warmcache.Entry
	fill   warmcache.Entry
	want   warmcache.Entry
}

func ptr[T any](v T) *T { return &v }

var fillRules = []fillRule{
	{"present on empty key", nil, present(1, `"v1"`), present(1, `"v1"`)},
	{"newer replaces older", ptr(present(3, `"v3"`)), present(5, `"v5"`), present(5, `"v5"`)},
	{"older after newer refused", ptr(present(5, `"v5"`)), present(3, `"v3"`), present(5, `"v5"`)},
	{"same version renews", ptr(present(5, `"first"`)), present(5, `"again"`), present(5, `"again"`)},
	{"versions compare as numbers", ptr(present(9, `"v9"`)), present(10, `"v10"`), present(10, `"v10"`)},
	{"versions compare as numbers, older refused", ptr(present(10, `"v10"`)), present(9, `"v9"`), present(10, `"v10"`)},
	{"largest version replaces older", ptr(present(math.MaxInt64-1, `"older"`)), present(math.MaxInt64, `"max"`), present(math.MaxInt64, `"max"`)},
	{"older than the largest version refused", ptr(present(math.MaxInt64, `"max"`)), present(math.MaxInt64-1, `"older"`), present(math.MaxInt64, `"max"`)},
	{"revalidation finding the row gone replaces it", ptr(present(5, `"v5"`)), absent(5), absent(5)},
	{"delete replaces older present", ptr(present(3, `"v3"`)), absent(4), absent(4)},
	{"delete older than present refused", ptr(present(5, `"v5"`)), absent(4), present(5, `"v5"`)},
	{"delete blocks older fill", ptr(absent(5)), present(4, `"v4"`), absent(5)},
	{"delete blocks same version", ptr(absent(5)), present(5, `"v5"`), absent(5)},
	{"same delete renews", ptr(absent(5)), absent(5), absent(5)},
	{"newer fill replaces delete", ptr(absent(5)), present(6, `"v6"`), present(6, `"v6"`)},
	{"newer delete replaces delete", ptr(absent(5)), absent(6), absent(6)},
	{"older delete refused", ptr(absent(6)), absent(5), absent(6)},
	{"read absent stored on empty key", nil, absent(0), absent(0)},
	{"read absent does not replace present", ptr(present(3, `"v3"`)), absent(0), present(3, `"v3"`)},
	{"read absent does not replace delete", ptr(absent(5)), absent(0), absent(5)},
	{"read absent on read absent stays absent", ptr(absent(0)), absent(0), absent(0)},
	{"present replaces read absent", ptr(absent(0)), present(1, `"v1"`), present(1, `"v1"`)},
	{"present version 0 replaces read absent", ptr(absent(0)), present(0, `"v0"`), present(0, `"v0"`)},
	{"delete replaces read absent", ptr(absent(0)), absent(2), absent(2)},
}

// fillModes are the ways a rule's fill is made: alone or in a batch with a
// key that holds nothing and a key that holds an older entry, saying the
// key is Cached or not.
var fillModes = []struct {
	name          string
	batch, cached bool
}{
	{"one", false, false},
	{"one cached", false, true},
	{"batch", true, false},
	{"batch cached", true, true},
}

// checkFillRule checks r in every fill mode, each on keys of its own.
func checkFillRule(t *testing.T, h *hotTier, r fillRule) {
	for _, m := range fillModes {
		t.Run(m.name, func(t *testing.T) {
			k := h.key(m.name)
			if r.cached != nil {
				h.fill(t, warmcache.Fill{Key: k, Entry: *r.cached, Keep: hotKeep})
			}
			fill := warmcache.Fill{Key: k, Entry: r.fill, Keep: hotKeep, Cached: m.cached}
			if !m.batch {
				h.fill(t, fill)
				h.expect(t, k, r.want)
				return
			}
			empty, held := h.key(m.name+" empty"), h.key(m.name+" held")
			h.fill(t, warmcache.Fill{Key: held, Entry: present(1, `"held"`), Keep: hotKeep})
			h.fill(t,
				warmcache.Fill{Key: empty, Entry: present(1, `"empty"`), Keep: hotKeep, Cached: m.cached},
				fill,
				warmcache.Fill{Key: held, Entry: present(2, `"newer"`), Keep: hotKeep, Cached: m.cached})
			es, hits := h.get(t, empty, k, held)
			for i, want := range []warmcache.Entry{present(1, `"empty"`), r.want, present(2, `"newer"`)} {
				if !hits[i] || !sameEntry(es[i], want) {
					t.Errorf("batch key %d: %s, hit %v; want %s", i, show(es[i]), hits[i], show(want))
				}
			}
		})
	}
}

// hotKeep is the Keep of the fills whose lifetime a rule does not test.
const hotKeep = time.Hour

// expirySlack is how long past its Keep a tier on the system clock may
// still return an entry before the suite calls it a failure: the time a
// loaded machine takes to run the fill and the reads.
const expirySlack = 3 * time.Second

// hotTier is a hot tier under test, with the namespace the suite uses and
// a prefix that keeps the keys of one rule apart from the others'.
type hotTier struct {
	hot    warmcache.Hot
	clock  Clock
	ns     *warmcache.Namespace
	prefix string
}

func (h *hotTier) key(name string) warmcache.Key { return warmcache.Key{Text: h.prefix + name} }

// shortKeep is the Keep of a fill a rule lets expire.
func (h *hotTier) shortKeep() time.Duration {
	if h.clock != nil {
		return time.Minute
	}
	return 100 * time.Millisecond
}

// fill stores fills in one FillMany and fails the test on error.
func (h *hotTier) fill(t *testing.T, fills ...warmcache.Fill) {
	t.Helper()
	if err := h.hot.FillMany(callContext(t), h.ns, fills); err != nil {
		t.Fatalf("FillMany(%d fills): %v", len(fills), err)
	}
}

// get reads keys in one GetMany and fails the test on error or when the
// answer does not have the length of keys.
func (h *hotTier) get(t *testing.T, keys ...warmcache.Key) ([]warmcache.Entry, []bool) {
	t.Helper()
	es, hits, err := h.hot.GetMany(callContext(t), h.ns, keys)
	if err != nil {
		t.Fatalf("GetMany(%d keys): %v", len(keys), err)
	}
	if len(es) != len(keys) || len(hits) != len(keys) {
		t.Fatalf("GetMany of %d keys returned %d entries and %d hits", len(keys), len(es), len(hits))
	}
	return es, hits
}

// get1 reads one key, as a batch of one.
func (h *hotTier) get1(t *testing.T, k warmcache.Key) (warmcache.Entry, bool) {
	t.Helper()
	es, hits := h.get(t, k)
	return es[0], hits[0]
}

// expect fails the test unless k holds want; it returns what k holds.
func (h *hotTier) expect(t *testing.T, k warmcache.Key, want warmcache.Entry) warmcache.Entry {
	t.Helper()
	got, hit := h.get1(t, k)
	if !hit || !sameEntry(got, want) {
		t.Errorf("%s holds %s, hit %v; want %s", k.Text, show(got), hit, show(want))
	}
	return got
}

// expectMiss fails the test unless k holds nothing.
func (h *hotTier) expectMiss(t *testing.T, k warmcache.Key) {
	t.Helper()
	if got, hit := h.get1(t, k); hit {
		t.Errorf("%s holds %s, want a miss", k.Text, show(got))
	}
}

// passKeep lets a Keep that began at start pass: it advances the clock
// by keep (and a millisecond), or sleeps until then.
func (h *hotTier) passKeep(start time.Time, keep time.Duration) {
	if h.clock != nil {
		h.clock.Advance(keep + time.Millisecond)
		return
	}
	time.Sleep(time.Until(start.Add(keep + 20*time.Millisecond)))
}

// expectGone fails the test unless k holds nothing once a Keep that began
// at start has passed: at once after advancing the clock, or by polling
// the tier until expirySlack past the Keep.
func (h *hotTier) expectGone(t *testing.T, k warmcache.Key, start time.Time, keep time.Duration) {
	t.Helper()
	if h.clock != nil {
		h.clock.Advance(keep + time.Millisecond)
		h.expectMiss(t, k)
		return
	}
	deadline := start.Add(keep + expirySlack)
	for {
		got, hit := h.get1(t, k)
		if !hit {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s still holds %s %v after a fill kept for %v", k.Text, show(got), time.Since(start).Round(time.Millisecond), keep)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// entryKinds are the three kinds of entry a hot tier holds: a present
// value, a read absent key (version zero) and a delete.
func entryKinds() []struct {
	name  string
	entry warmcache.Entry
} {
	return []struct {
		name  string
		entry warmcache.Entry
	}{
		{"present", present(1, `1`)},
		{"read absent", absent(0)},
		{"delete", absent(3)},
	}
}
