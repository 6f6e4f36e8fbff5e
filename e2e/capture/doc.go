// Package capture holds black-box tests of change capture after writes that
// bypass the service: writers UPDATE, INSERT and DELETE rows directly in SQL
// on a PostgreSQL cluster of the test's own (wal_level = logical), while
// readers GET the keys through the REST API of `warmcache serve` processes.
// The tests report the stale reads and the lag at p50, p99 and max, and hold
// the bounds that the README states: with change capture p99 ≤ 1 s and no
// stale key 1 s after the writers stop; with polling ≤ the interval + 1 s.
// The fault tests kill the slot's holder, terminate its walsender, freeze
// Redis during apply, drop the slot and restart PostgreSQL, and check that no
// change is lost and that the bound is back within seconds.
//
// The package holds no code outside its tests. Run it with
//
//	go test -count=1 -v ./e2e/capture
package capture
