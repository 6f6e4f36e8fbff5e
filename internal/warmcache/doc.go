// Package warmcache is the core of the gateway: namespaces, keys, entries, the
// errors the transports map to statuses, and the tiered read/write protocol
// that answers from the hot tier (Redis) and falls through to the warm tier
// (a SQL warehouse) on a miss.
//
// The package depends on the standard library and Prometheus only; its
// singleflight is its own (flight.go). The tiers are small, batch-first
// interfaces defined here (tier.go) and implemented by adapters
// (rediscache, pgstore; memtier in memory for tests) that only store and
// fetch; the gateway wires them in.
//
// Where things are:
//   - read.go: the one read path, for one key (Get) or many (MGet): near
//     cache, hot tier, then the warehouse; stale-while-revalidate.
//   - flight.go: misses shared by key (singleflight) and run in batches:
//     the recheck, one warehouse query and one fill per batch.
//   - batch.go: the lanes that fold concurrent reads into batches.
//   - policy.go: lifetimes (TTL, jitter, negative and delete entries) and
//     staleness, decided here and passed down to the hot tier.
//   - write.go: the write path (Transact, Put, Delete) and GetLatest.
//   - calls.go: the calls to the tiers under their deadlines, the
//     concurrency bound and the circuit breaker (breaker.go).
//   - errclass.go: the one classification of errors (client, conflict,
//     unavailable, cancelled, bug).
package warmcache
