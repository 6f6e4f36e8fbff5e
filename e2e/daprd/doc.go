// Package daprd holds the real-daprd lane: a daprd 1.17.0 from the daprd
// kit (WARMCACHE_TEST_DAPRD, or shared/dapr beside the project:
// testenv.Daprd) in standalone mode,
// with deploy/dapr's component YAMLs, loads warmcache's pluggable state
// store from its socket beside Dapr's own state.postgresql (v2) and
// state.redis on the same servers. The tests drive daprd over its HTTP and
// gRPC APIs and with the Dapr Go SDK through the flows docs/dapr.md shows,
// restart warmcache under a running daprd, and run each behaviour of the
// side-by-side table of docs/dapr.md against warmcache and state.postgresql
// through the same daprd. Without daprd the lane is skipped, saying so, as
// the Greenplum lane is.
package daprd
