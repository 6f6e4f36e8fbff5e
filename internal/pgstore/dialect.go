package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Dialect is the SQL warehouse flavour that the store talks to.
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

// ParseDialect parses "postgres" or "greenplum".
func ParseDialect(s string) (Dialect, error) {
	switch s {
	case "postgres", "postgresql":
		return Postgres, nil
	case "greenplum":
		return Greenplum, nil
	default:
		return 0, fmt.Errorf("pgstore: unknown dialect %q (want postgres or greenplum)", s)
	}
}

// Querier is what dialect detection needs from a connection or pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DetectDialect asks the server which dialect it speaks. Greenplum and its
// forks have the gp_role setting, which PostgreSQL lacks. The setting is
// looked up in pg_settings rather than with current_setting(name, true),
// which Greenplum 6 (PostgreSQL 9.4) does not have; version() is not parsed,
// because forks name themselves differently.
func DetectDialect(ctx context.Context, q Querier) (Dialect, error) {
	var gp bool
	if err := q.QueryRow(ctx, detectSQL).Scan(&gp); err != nil {
		return 0, fmt.Errorf("pgstore: detect dialect: %w", err)
	}
	if gp {
		return Greenplum, nil
	}
	return Postgres, nil
}

const detectSQL = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_settings WHERE name = 'gp_role')`
