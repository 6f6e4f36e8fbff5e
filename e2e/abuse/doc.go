// Package abuse holds tests of the real warmcache binary against
// hostile and careless clients, over REST and gRPC, with real Redis,
// PostgreSQL and PgBouncer (from internal/testenv):
//
//   - the abuse suite sends each class of bad input (oversized, empty and
//     malformed keys, numeric overflow, wrong content types, non-JSON and
//     deeply nested JSON, 10 MB bodies, header floods, slow headers, path
//     tricks, SQL-looking keys and filters, bodies that stall or break off,
//     forged cursors) and the access matrix, and asserts the status and
//     error shape of each, that no client-caused error is a 5xx, and that
//     the process's peak RSS (VmHWM) stays under the bound stated per class;
//   - the starvation test holds idle loads on both transports and floods
//     /readyz while another client's cold reads and writes must keep their
//     latency.
//
// TestMain builds the binary once; every test starts its own server on a
// fresh database and Redis prefix. The package holds no code outside its
// tests. Run it with
//
//	go test -count=1 -v ./e2e/abuse
package abuse
