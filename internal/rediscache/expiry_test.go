package rediscache_test

import (
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestExpiryRoundTrip: an entry with an expiry (a row's TTL) is stored as
// kind 'E' in every format, and reads back with its expiry, its value and
// its version; an absent entry at a version still wins over it.
func TestExpiryRoundTrip(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	addDictionary(t, f.cache, "dict", trainWidgets(t, 300, 1))
	exp := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	for _, tt := range []struct {
		name   string
		ns     *warmcache.Namespace
		format byte
	}{
		{"none", &warmcache.Namespace{Name: "none"}, '1'},
		{"zstd", &warmcache.Namespace{Name: "zstd", Codec: warmcache.CodecZstd}, '2'},
		{"zstd-dict", &warmcache.Namespace{Name: "dict", Codec: warmcache.CodecZstdDict}, '3'},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := present(5, string(widgetDoc(7)))
			e.ExpiresAt = exp
			f.fill(t, tt.ns, "ttl", e)
			got, hit := f.get(t, tt.ns, "ttl")
			if !hit || !sameEntry(got, e) || !got.ExpiresAt.Equal(exp) {
				t.Fatalf("Get = %+v expiring %v, hit %v; want %+v expiring %v", got, got.ExpiresAt, hit, e, exp)
			}
			if raw := f.stored(t, tt.ns, "ttl"); raw[0] != tt.format || raw[1] != 'E' {
				t.Errorf("stored format %q kind %q, want %q and 'E'", raw[0], raw[1], tt.format)
			}
			f.fill(t, tt.ns, "ttl", absent(6))
			e7 := present(6, `{"late":true}`)
			e7.ExpiresAt = exp
			f.fill(t, tt.ns, "ttl", e7)
			if got, hit := f.get(t, tt.ns, "ttl"); !hit || got.Found || got.Version != 6 {
				t.Errorf("after a delete at version 6 and a row at its version, Get = %+v, hit %v; want the delete", got, hit)
			}
		})
	}
}
