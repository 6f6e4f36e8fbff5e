// Package consistency holds the concurrent history test of the cache
// protocol: writers and readers race on a few keys through the REST API,
// against real PostgreSQL and Redis, with delays injected between each
// warehouse read and its cache fill, and a checker that every read saw every
// write acknowledged before it began. The same test runs against a
// deliberately naive fill to show that the checker catches a stale set.
package consistency
