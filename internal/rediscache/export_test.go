package rediscache

import (
	"context"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// EncodeValue exposes the codec's encoding to the benchmarks: the stored
// form of e in ns's codec.
func (c *Cache) EncodeValue(ns *warmcache.Namespace, e warmcache.Entry) ([]byte, error) {
	return c.codecs.encodeValue(ns, e)
}

// DecodeValue exposes Get's decoding of a stored value to the benchmarks.
func (c *Cache) DecodeValue(ns *warmcache.Namespace, b []byte) (warmcache.Entry, bool) {
	return c.decode(context.Background(), ns, warmcache.Key{}, b)
}

// HeaderLen is the length of the header every stored value starts with.
const HeaderLen = headerLen

// KeyOf is the Redis key of key in ns.
func (c *Cache) KeyOf(ns *warmcache.Namespace, key string) string {
	return c.key(ns, warmcache.Key{Text: key})
}

// TrackingClientID is the Redis client id of t's connection.
func TrackingClientID(t *Tracking) int64 { return t.clientID.Load() }
