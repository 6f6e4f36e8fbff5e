// Package nearcache is the in-process near cache (L1) in front of the hot
// tier: bounded by bytes, with W-TinyLFU admission so that a one-pass scan of
// cold keys does not flush the hot set, entries that live their namespace's
// NearTTL, and version rules that keep a replaced value from being cached
// again. Other instances' writes reach it through Invalidate, carried over
// Redis pub/sub by rediscache.Invalidations.
package nearcache
