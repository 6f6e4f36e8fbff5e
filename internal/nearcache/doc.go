// Package nearcache is the in-process near cache (L1) in front of the hot
// tier: bounded by bytes, with W-TinyLFU admission so that a one-pass scan of
// cold keys does not flush the hot set, entries that live their namespace's
// NearTTL, and version rules that keep a replaced value from being cached
// again. Other instances' writes reach it through InvalidateKey, carried over
// Redis pub/sub by rediscache.Invalidations, and Clear drops everything when
// that channel may have lost messages.
//
// # Choice of library
//
// The cache is otter (v2). It was measured against ristretto (v2), the other
// W-TinyLFU cache for Go, by the benchmarks in compare_test.go: the same 8 MiB
// budget, the same weight per entry (key, 460-byte value, 128 bytes of
// overhead), zipf-distributed keys (s=1.01) over 131,072 keys, so the budget
// holds about 14% of them. Medians of 5 runs on 2 cores that other work
// shared, so the times are rough; the hit ratios are stable for otter and
// vary by a few points between runs for ristretto, whose buffered writes and
// lossy reads depend on timing:
//
//	benchmark                                  otter        ristretto   this Cache
//	Hit: parallel Gets, all cached, 2 CPUs     34 ns        98 ns       60 ns
//	Throughput: Get + Set on miss, 1 CPU       232 ns       564 ns      453 ns
//	Throughput: Get + Set on miss, 2 CPUs      239 ns       226 ns      417 ns
//	  hit ratio in that run (2 CPUs)           0.808        0.784       0.807
//	ScanHitRatio: zipf, no scans               0.790-0.796  0.75-0.78
//	ScanHitRatio: zipf + one-pass scans        0.770-0.782  0.71-0.76
//
// (The scans offer 30,000 never-seen keys, twice what the budget holds, every
// 100,000 zipf accesses; the ratio counts the zipf accesses alone.)
//
// Beyond the numbers, otter's API fits the version rules: Compute updates an
// entry atomically, so Set and Invalidate compare versions under the entry's
// lock, and a store is visible to the next Get. Ristretto's Set is buffered
// and may be dropped, so a version check before it could be overtaken and a
// Get just after it may miss. This Cache pays for its versioned Compute on
// every store and for a two-string key on every read, which is why it is
// slower than bare otter; a hit stays well under a microsecond, against tens
// of microseconds for the HTTP request around it.
package nearcache
