// Package tracing holds the tests of the spans a request leaves: the REST
// handler of the service, assembled as `warmcache serve` assembles it over
// real PostgreSQL and Redis, with tracing on, exports one tree per request
// whose children name each tier that answered, and no span carries a
// stored value. BenchmarkGet measures what tracing costs a hit. The
// package holds no code outside its tests. Run it with
//
//	go test -count=1 -v ./e2e/tracing
package tracing
