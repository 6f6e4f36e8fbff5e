// Package warmcache is the core of the gateway: namespaces, keys, entries, the
// errors the transports map to statuses, and the tiered read/write protocol
// that answers from the hot tier (Redis) and falls through to the warm tier
// (a SQL warehouse) on a miss.
//
// The package depends on the standard library, golang.org/x/sync and
// Prometheus only. The tiers are small interfaces defined here and
// implemented by adapters (rediscache, pgstore) that cmd/warmcache wires in.
package warmcache
