package dialect

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Setting is a Greenplum server setting and the value key lookups need.
type Setting struct {
	Name  string
	Value string
}

// LookupSettings returns the Greenplum settings that key lookups need, in
// the order a session sets them:
//
//   - optimizer = off: GPORCA adds planning time to every lookup
//     (docs/warehouse.md#the-doctor), cannot plan parameters, and sends key
//     UPDATE/DELETE to all segments.
//   - gp_enable_direct_dispatch = on: a query on the distribution key goes
//     to one segment only.
//   - plan_cache_mode = auto: the plan cache keeps custom plans, which can
//     be direct-dispatched; force_generic_plan would send every lookup to
//     all segments.
//
// Each call returns a new slice.
func LookupSettings() []Setting {
	return []Setting{
		{Name: "optimizer", Value: "off"},
		{Name: "gp_enable_direct_dispatch", Value: "on"},
		{Name: "plan_cache_mode", Value: "auto"},
	}
}

// SettingNames returns the names of settings.
func SettingNames(settings []Setting) []string {
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = s.Name
	}
	return names
}

// DefaultStatementMem is the statement_mem that SessionSettings sends when
// none is given.
const DefaultStatementMem = "10MB"

// SessionSettings returns the statements that prepare a Greenplum session
// for key lookups, in the order they are sent: the LookupSettings, then
// statement_mem = statementMem (DefaultStatementMem when empty).
// statementMem is quoted as an SQL literal but not otherwise validated.
func SessionSettings(statementMem string) []string {
	if statementMem == "" {
		statementMem = DefaultStatementMem
	}
	var out []string
	for _, s := range LookupSettings() {
		out = append(out, "SET "+s.Name+" = "+s.Value)
	}
	return append(out, "SET statement_mem = "+literal(statementMem))
}

// ReadSettings reads the server's values of the settings names, in the
// simple protocol. A setting the server does not have is left out of the
// map.
func ReadSettings(ctx context.Context, q Querier, names ...string) (map[string]string, error) {
	rows, err := q.Query(ctx, "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])", pgx.QueryExecModeSimpleProtocol, names)
	if err != nil {
		return nil, fmt.Errorf("dialect: read settings: %w", err)
	}
	out := map[string]string{}
	var name, setting string
	_, err = pgx.ForEachRow(rows, []any{&name, &setting}, func() error {
		out[name] = setting
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dialect: read settings: %w", err)
	}
	return out, nil
}

// Segments returns the number of primary segments of a Greenplum cluster.
func Segments(ctx context.Context, q Querier) (int, error) {
	var n int
	err := q.QueryRow(ctx, "SELECT count(*) FROM gp_segment_configuration WHERE role = 'p' AND content >= 0",
		pgx.QueryExecModeSimpleProtocol).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("dialect: count segments: %w", err)
	}
	return n, nil
}

// AppendOptimized reports whether the Greenplum table relid, or any leaf of
// a partitioned one, is append-optimized, which rejects ON CONFLICT and
// DELETE ... RETURNING. Greenplum 7 names the storage by access method;
// Greenplum 6 by pg_class.relstorage.
func AppendOptimized(ctx context.Context, q Querier, relid uint32) (bool, error) {
	var hasRelstorage bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = 'pg_catalog.pg_class'::regclass AND attname = 'relstorage' AND NOT attisdropped)`).Scan(&hasRelstorage)
	if err != nil {
		return false, err
	}
	query := `SELECT coalesce(bool_or(am.amname IN ('ao_row', 'ao_column')), false)
FROM pg_class c LEFT JOIN pg_am am ON am.oid = c.relam
WHERE c.oid = $1 OR c.oid IN (SELECT relid FROM pg_partition_tree($1::oid::regclass))`
	if hasRelstorage {
		query = `SELECT coalesce(bool_or(c.relstorage IN ('a', 'c')), false) FROM pg_class c WHERE c.oid = $1`
	}
	var ao bool
	err = q.QueryRow(ctx, query, relid).Scan(&ao)
	return ao, err
}

// RowBlockSize returns the smallest block size (pg_appendonly.blocksize)
// of the row-oriented append-optimized storage of table relid and its
// partitions, or 0 when none is stored so. Greenplum 7 stores a row larger
// than its table's block size across several blocks, and an index scan of
// the table does not find such a row (measured; a sequential scan does,
// and column-oriented tables are not affected), so a row there must stay
// smaller than the block.
func RowBlockSize(ctx context.Context, q Querier, relid uint32) (int, error) {
	var hasPartitionTree bool
	err := q.QueryRow(ctx, `SELECT to_regproc('pg_catalog.pg_partition_tree') IS NOT NULL`).Scan(&hasPartitionTree)
	if err != nil {
		return 0, err
	}
	query := `SELECT coalesce(min(a.blocksize), 0)::integer FROM pg_appendonly a WHERE NOT a.columnstore AND a.relid = $1`
	if hasPartitionTree {
		query = `SELECT coalesce(min(a.blocksize), 0)::integer FROM pg_appendonly a WHERE NOT a.columnstore
AND (a.relid = $1 OR a.relid IN (SELECT relid FROM pg_partition_tree($1::oid::regclass)))`
	}
	var size int32
	err = q.QueryRow(ctx, query, relid).Scan(&size)
	return int(size), err
}

// literal quotes s as an SQL string literal, assuming
// standard_conforming_strings, as pgx does.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
