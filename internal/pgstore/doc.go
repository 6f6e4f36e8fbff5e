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
// key column's exact type, values as JSON text, and versions come from the
// warmcache_version_seq sequence, so that the hot tier can order fills and
// invalidations by version.
package pgstore
