// Package consistency holds the tests of the cache protocol under
// concurrency, against real PostgreSQL and Redis: a history test with
// delays injected between each warehouse read and its cache fill (and a
// deliberately naive fill, to show that its checker catches a stale set),
// a linearizability check of the real binary with the porcupine checker,
// with and without change capture, the near cache and tier faults, and a
// race probe of a PUT and a DELETE of one key.
package consistency
