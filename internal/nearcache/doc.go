// Package nearcache is the in-process near cache (L1) in front of the hot
// tier: bounded by bytes, with W-TinyLFU admission so that a one-pass scan of
// cold keys does not flush the hot set, entries that live as long as the core
// tells it (the namespace's NearTTL, see warmcache), and version rules that
// keep a replaced value from being cached again. Other instances' writes
// reach it through InvalidateKey, carried over Redis pub/sub by rediscache.Invalidations. Every change of a key in Redis,
// whoever made it, reaches it through Drop, carried by Redis's key tracking
// (rediscache.Tracking). Clear drops everything when either channel may
// have lost messages.
//
// # Choice of library
//
// The cache is otter (v2), chosen over ristretto (v2), the other W-TinyLFU
// cache for Go, by the benchmarks in compare_test.go; docs/performance.md
// holds their numbers and the commands that reproduce them. Beyond speed
// and hit ratio, otter's API fits the version rules: Compute updates an
// entry atomically, so Set and Invalidate compare versions under the
// entry's lock, and a store is visible to the next Get. Ristretto's Set is
// buffered and may be dropped, so a version check before it could be
// overtaken and a Get just after it may miss.
package nearcache
