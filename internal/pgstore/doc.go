// Package pgstore is the warm tier: it implements warmcache.Warm over a pgx
// connection pool, on PostgreSQL or Greenplum, directly or through PgBouncer
// in transaction pooling.
//
// Open detects the dialect, chooses how queries travel (the simple protocol
// for Greenplum reads, prepared statements on PostgreSQL, unnamed statements
// through PgBouncer; see Options.ExecMode), checks every namespace's table
// against the catalog and prepares its statements once, so that a wrong
// configuration stops the service at start rather than at the first miss.
//
// Each namespace's SQL is built once by Statements. Keys are passed with the
// key column's exact type, values as the value's bytes (JSON text, or the
// bytea of a bytes namespace), and versions come from the
// warmcache_version_seq sequence, so that the hot tier can order fills and
// invalidations by version.
//
// Besides the tier, the Store serves what the core asks of the warehouse:
// bulk loads (warmcache.Loader), the non-key query (warmcache.Searcher),
// the sweep of expired rows (warmcache.Expirer), the change poll and the
// namespace generations (changes.go), and the value dictionaries. The
// tools that examine how the warehouse executes its statements read them
// through Pool and Tables.
//
// Its files: open.go connects and probes the server; lookup.go and
// gpbatch.go read keys, write.go and writefunc.go write them; row.go holds
// a row's arguments and its one reader into an Entry; statements.go,
// lookupfunc.go and validate.go build the SQL and check it against the
// catalog at start.
package pgstore
