// Package dialect owns what differs between the two SQL warehouses that
// warmcache talks to, PostgreSQL and Greenplum: telling them apart from the
// server, the SQL clauses and catalog queries that differ, the Greenplum
// session settings that key lookups need, and which storage options each
// dialect accepts.
//
// The package needs no database except for the functions that take a
// Querier. It holds no state; everything in it is safe for concurrent use.
//
//	what               PostgreSQL                          Greenplum
//	detection          no gp_role setting                  a gp_role setting
//	spreading rows     PARTITION BY HASH (key), N parts    DISTRIBUTED BY (key)
//	compression        TOAST lz4 or pglz on a column       append-optimized compresstype zstd, zlib or rle_type with a level
//	table kinds        heap                                heap, or append-optimized (row or column oriented)
//	session settings   -                                   optimizer, gp_enable_direct_dispatch, plan_cache_mode, statement_mem
package dialect

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Dialect is the SQL warehouse flavour a server speaks.
type Dialect int

// The supported dialects.
const (
	// Postgres is plain PostgreSQL.
	Postgres Dialect = iota + 1
	// Greenplum is Greenplum or one of its forks: an MPP warehouse whose
	// tables are distributed over segments.
	Greenplum
)

// String returns "postgres" or "greenplum".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case Greenplum:
		return "greenplum"
	default:
		return fmt.Sprintf("Dialect(%d)", int(d))
	}
}

// Valid reports whether d is one of the supported dialects.
func (d Dialect) Valid() bool { return d == Postgres || d == Greenplum }

// Parse parses "postgres" (or "postgresql") or "greenplum".
func Parse(s string) (Dialect, error) {
	switch s {
	case "postgres", "postgresql":
		return Postgres, nil
	case "greenplum":
		return Greenplum, nil
	default:
		return 0, fmt.Errorf("dialect: unknown dialect %q (want postgres or greenplum)", s)
	}
}

// Querier is what the functions that ask the server need from a
// connection, a transaction or a pool: *pgx.Conn, pgx.Tx, *pgxpool.Pool
// and *pgxpool.Conn all are one.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Detect asks the server which dialect it speaks. Greenplum and its forks
// have the gp_role setting, which PostgreSQL lacks. The setting is looked up
// in pg_settings rather than with current_setting(name, true), which
// Greenplum 6 (PostgreSQL 9.4) does not have; version() is not parsed,
// because forks name themselves differently.
func Detect(ctx context.Context, q Querier) (Dialect, error) {
	var gp bool
	if err := q.QueryRow(ctx, detectSQL).Scan(&gp); err != nil {
		return 0, fmt.Errorf("dialect: detect: %w", err)
	}
	if gp {
		return Greenplum, nil
	}
	return Postgres, nil
}

const detectSQL = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_settings WHERE name = 'gp_role')`

// DistributedBy returns the clause that spreads a new table's rows over
// Greenplum's segments by columns, which are SQL text (quoted where they
// need it), such as "DISTRIBUTED BY (key)". On PostgreSQL it returns "":
// callers add the clause, with a separator, only when it is not empty.
func (d Dialect) DistributedBy(columns ...string) string {
	if d != Greenplum {
		return ""
	}
	return "DISTRIBUTED BY (" + strings.Join(columns, ", ") + ")"
}
