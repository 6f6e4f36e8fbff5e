// Package fault holds tests of the cache protocol under concurrency and
// faults, run against real servers through the REST API of a service wired
// the way `warmcache serve` wires it:
//
//   - the stampede tests send hundreds of concurrent GETs for one cold key and
//     read from PostgreSQL's own statistics that the warehouse saw exactly one
//     index scan, also when the first requester cancels;
//   - the fault tests start their own Redis, PostgreSQL and PgBouncer
//     processes on free ports, stop and restart them while load runs, and
//     report the errors seen, the time to recover, and that no acknowledged
//     write was lost.
//
// The package holds no code outside its tests. Run the fault tests with
//
//	go test -race -count=1 -run Fault -v ./e2e/fault
package fault
