// Package conformance holds the test that runs Dapr's state-store
// conformance suite against warmcache's pluggable component. It builds
// with the daprd tag (go test -tags daprd), which `make test` sets: daprd's
// client for pluggable stores links Kubernetes' client packages.
package conformance
