// Package warmcache is the core of the gateway: namespaces, keys, entries, the
// errors the transports map to statuses, and the tiered read/write protocol
// that answers from the hot tier (Redis) and falls through to the warm tier
// (a SQL warehouse) on a miss.
//
// The package depends on the standard library, Prometheus and
// internal/promreg only; its singleflight is its own (flight.go). The tiers
// are small, batch-first interfaces defined here (tier.go) and implemented
// by adapters (rediscache, pgstore; memtier in memory for tests) that only
// store and fetch; the gateway wires them in.
//
// Where things are (layout_test.go holds this list to every file):
//   - service.go: the Service, its namespaces and metrics; options.go: the
//     bounds of its work and their defaults.
//   - namespace.go: namespaces, their layouts, codecs and media types, and
//     keys; value.go: the checks of a value before it is written.
//   - tier.go: the tier contracts (Hot, Warm, Near) and what crosses them.
//   - read.go: the one read path, for one key (Get) or many (MGet): near
//     cache, hot tier, then the warehouse; stale-while-revalidate.
//   - flight.go: misses shared by key (singleflight) and run in batches:
//     the recheck, one warehouse query and one fill per batch.
//   - batch.go: the lanes that fold concurrent reads into batches.
//   - policy.go: lifetimes (TTL, jitter, negative and delete entries),
//     staleness and the writer's expiry, decided here and passed down to
//     the hot tier and the near cache.
//   - write.go: the write path (Transact, Put, Delete) and GetLatest;
//     fold.go: concurrent single writes folded into one warehouse round
//     trip and one commit (Folder), each with its own outcome.
//   - update.go: every update of the caches (fills, a write's update and
//     its repair, retirement of changed keys) and the stamp of what a
//     warehouse call re-checks after it returns (the restart rule).
//   - doubt.go: keys in doubt, read past the caches until a repair lands.
//   - changes.go: writes that bypassed the service, applied (Apply), and
//     invalidation.
//   - load.go: bulk loads, validated and spooled (spool.go) before the
//     warehouse loads them; query.go: the non-key query and its cursor.
//   - sweep.go: the sweeper of expired rows.
//   - calls.go: the calls to the tiers under their deadlines, the
//     concurrency bound and the circuit breaker (breaker.go).
//   - errors.go: the sentinel errors the transports map; errclass.go: the
//     one classification of errors (client, conflict, unavailable,
//     cancelled, bug).
//   - readiness.go: the tiers' readiness; trace.go: the tracing hooks;
//     audit.go: one key's copies on every tier, for the consistency
//     monitor.
package warmcache
