// Package harness is the one set of fixtures and the one way in to the
// service that the whole-stack suites under e2e/ share:
//
//   - the namespaces and API-key files the suites declare (Namespace,
//     NamespacesYAML, KeysYAML), and the seeded widgets table (SeedWidgets);
//   - the service in-process, built the way `warmcache serve` builds it:
//     config.Load with the serve command's flags and a getenv over the
//     test's variables, then gateway.Open, Serve and Close (Config, Open,
//     Serve);
//   - the warmcache binary as a server (Spawn), which reads what it serves
//     from the lines it prints (endpoint.ParseLine), and for every other
//     subcommand (Run, Migrate), built once per package by a TestMain
//     through internal/testproc.MainWithBinary, with the test's variables
//     and no other (Environ).
//
// Serve and Spawn give the same Served: the endpoints (from the gateway's
// Endpoints in-process, from its lines for the binary), what it printed
// and its log.
//
// The suites take their servers from the test kits: the shared PostgreSQL,
// PgBouncer, Redis and Greenplum named by WARMCACHE_TEST_* variables, and
// private servers of internal/testproc that a test may stop, freeze or
// restart. Nothing else under e2e/ imports internal/gateway.
package harness
