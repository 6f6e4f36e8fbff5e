// Package conformance holds the tests of warmcache's pluggable component
// as daprd reaches it, on its socket over real tiers: TestStore, warmcache's
// own contract of the component (daprd's error contract, bulk ETags,
// transactions, reads, components, reflection, opaque values), and the test
// that runs Dapr's state-store conformance suite against it. That one
// builds with the daprd tag (go test -tags daprd), which `make test` sets:
// daprd's client for pluggable stores links Kubernetes' client packages.
package conformance
