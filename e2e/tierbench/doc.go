// Package tierbench measures the service's read paths over the real tiers:
// folded reads (one Redis pipeline, one `= ANY($1)` query for many
// concurrent keys) against one round trip per read. Run:
//
//	go test ./e2e/tierbench -run '^$' -bench . -benchtime 20000x
//
// docs/performance.md holds the results.
package tierbench
