// Package tiertest is the contract of the tiers of package warmcache, as
// test suites that every implementation runs from its own tests: Hot for
// the hot tier (warmcache.Hot), Warm for the warehouse (warmcache.Warm) and
// Near for the near cache (warmcache.Near). The core's correctness rests on
// these rules, and the in-memory tiers that the core's and the transports'
// tests trust (package memtier) are held to the same suites as the real
// ones, so they cannot drift apart:
//
//	func TestHotTierContract(t *testing.T) {
//		tiertest.Hot(t, func(t *testing.T) (warmcache.Hot, tiertest.Clock) {
//			clock := memtier.NewClock()
//			return memtier.NewHot(clock.Now), clock
//		})
//	}
//
// Each rule is a subtest named after it, so a failure names the rule that
// broke. A suite calls its constructor once per rule, and every rule uses
// keys of its own, so a constructor may hand out one shared tier.
package tiertest

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// Clock moves the time of a tier under test forward; memtier.Clock is one.
// A tier on the system clock (Redis's expiry) has none, and the suites then
// wait for time to pass, polling.
type Clock interface {
	Advance(d time.Duration)
}

// callTimeout bounds each call on a tier under test.
const callTimeout = 10 * time.Second

// callContext returns a context for one call on a tier: it ends with the
// test, or after callTimeout.
func callContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func present(version int64, value string) warmcache.Entry {
	return warmcache.Entry{Value: []byte(value), Version: version, Found: true}
}

func absent(version int64) warmcache.Entry { return warmcache.Entry{Version: version} }

// sameEntry reports whether got is want: presence, version and value byte
// for byte.
func sameEntry(got, want warmcache.Entry) bool {
	return got.Found == want.Found && got.Version == want.Version && string(got.Value) == string(want.Value)
}

// show formats an entry for a failure message.
func show(e warmcache.Entry) string {
	if !e.Found {
		return "absent@" + strconv.FormatInt(e.Version, 10)
	}
	return string(e.Value) + "@" + strconv.FormatInt(e.Version, 10)
}

// sameJSON reports whether a and b are the same JSON value, whatever their
// spacing and key order.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
