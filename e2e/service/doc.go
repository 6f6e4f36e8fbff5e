// Package service holds the end-to-end tests of `warmcache serve` and its
// subcommands against the local stack's servers (internal/testenv), and a
// Redis Cluster of the test's own (internal/testproc):
//
//   - the REST, gRPC and Dapr contracts through the whole service, over
//     PostgreSQL directly and through PgBouncer, and on the Greenplum lane
//     for a heap and an append-optimized namespace (TestEndToEnd,
//     TestGRPCEndToEnd, TestServiceLane, TestDaprGoSDK and the Dapr SDK
//     checks in Go and JavaScript);
//   - access control, TLS, unix sockets and tracing from the environment;
//   - the near cache across two served instances, and Redis Cluster;
//   - the subcommands load, doctor, advise, dict and migrate plan, run as
//     the built binary.
//
// The service runs in-process through e2e/internal/harness, built from the
// same flags and variables as `warmcache serve`; TestMain builds the binary
// for the other subcommands. The package holds no code outside its tests.
// Run it with
//
//	go test -count=1 -v ./e2e/service
package service
