package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// prepareTables checks each namespace against the catalog, builds its
// statements and prepares them on one pooled connection.
func (s *Store) prepareTables(ctx context.Context, namespaces []*warmcache.Namespace, srv server, lookups, writes FunctionMode, log *slog.Logger) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: connect: %w", err)
	}
	defer conn.Release()
	for _, ns := range namespaces {
		if _, dup := s.tables[ns.Name]; dup {
			return fmt.Errorf("pgstore: namespace %q declared twice", ns.Name)
		}
		t, err := prepareTable(ctx, conn, ns, srv, lookups, writes, log)
		if err != nil {
			return err
		}
		s.tables[ns.Name] = t
		log.Debug("pgstore: namespace ready", "namespace", ns.Name, "table", ns.Table, "append_optimized_writes", t.stmts.AppendOptimized,
			"lookup_function", t.stmts.lookupSignature)
	}
	return nil
}

// column is a table column as the catalog describes it.
type column struct {
	typ     uint32
	typName string
}

// prepareTable checks ns's table and columns, decides how it is written,
// creates its lookup function when lookups allow (see useLookupFunction),
// and prepares its statements with the unnamed statement, which works
// through PgBouncer, checking the parameter and result types.
func prepareTable(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace, srv server, lookups, writes FunctionMode, log *slog.Logger) (*table, error) {
	relid, err := lookupTable(ctx, conn, ns)
	if err != nil {
		return nil, err
	}
	if err := checkColumns(ctx, conn, ns, relid); err != nil {
		return nil, err
	}
	noUpsert, err := writesWithoutUpsert(ctx, conn, ns, srv, relid)
	if err != nil {
		return nil, err
	}
	stmts, err := Statements(ns, noUpsert)
	if err != nil {
		return nil, err
	}
	var maxRow int
	if srv.dialect == dialect.Greenplum {
		stmts.LookupPositions = "" // see StatementSet.LookupPositions
		block, err := dialect.RowBlockSize(ctx, conn, relid)
		if err != nil {
			return nil, tableError(ns, "read block size: %w", err)
		}
		if block > 0 {
			maxRow = max(block-rowOverhead, 0)
		}
	}
	stmts.dropLookupFunction()
	stmts.dropWriteFunction()
	// PostgreSQL reads and writes through the table's functions; Greenplum
	// writes to its heap tables through one (see setWriteFunction).
	postgres := stmts.LookupPositions != ""
	if postgres || (srv.dialect == dialect.Greenplum && !stmts.AppendOptimized && ns.Writable) {
		var schema string
		if err := conn.QueryRow(ctx, "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1", relid).Scan(&schema); err != nil {
			return nil, tableError(ns, "look up schema: %w", err)
		}
		if postgres {
			useLookupFunction(ctx, conn, ns, schema, &stmts, lookups, log)
		}
		useWriteFunction(ctx, conn, ns, schema, &stmts, writes, postgres, log)
	}
	if err := prepareStatements(ctx, conn, ns, stmts); err != nil {
		return nil, err
	}
	return &table{ns: ns, stmts: stmts, maxRow: maxRow}, nil
}

// tableError describes a problem with ns's table, prefixed with the
// namespace and table names.
func tableError(ns *warmcache.Namespace, format string, args ...any) error {
	return fmt.Errorf("pgstore: namespace %q: table %q: "+format, append([]any{ns.Name, ns.Table}, args...)...)
}

// keyOIDs returns the type OIDs of ns's key and of an array of its keys.
func keyOIDs(ns *warmcache.Namespace) (key, keyArray uint32) {
	if ns.KeyType == warmcache.KeyText {
		return pgtype.TextOID, pgtype.TextArrayOID
	}
	return pgtype.Int8OID, pgtype.Int8ArrayOID
}

// lookupTable returns the OID of ns's table, or an error if it does not exist.
func lookupTable(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace) (uint32, error) {
	var relid *uint32
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1)::oid", tableIdent(ns.Table)).Scan(&relid); err != nil {
		return 0, tableError(ns, "look up table: %w", err)
	}
	if relid == nil {
		return 0, tableError(ns, "does not exist")
	}
	return *relid, nil
}

// checkColumns checks that table relid has ns's key, version, value (when
// packed) and declared columns, each with a type ns accepts, in that order.
func checkColumns(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace, relid uint32) error {
	columns, err := tableColumns(ctx, conn, relid)
	if err != nil {
		return tableError(ns, "read columns: %w", err)
	}
	check := func(name string, want ...uint32) error {
		c, ok := columns[name]
		if !ok {
			return tableError(ns, "column %q does not exist", name)
		}
		if !slices.Contains(want, c.typ) {
			return tableError(ns, "column %q has type %s, want %s", name, c.typName, typeNames(want, " or "))
		}
		return nil
	}
	keyOID, _ := keyOIDs(ns)
	if err := check(ns.KeyColumn, keyOID); err != nil {
		return err
	}
	if err := check(ns.VersionColumn, pgtype.Int8OID); err != nil {
		return err
	}
	if ns.Layout == warmcache.LayoutPacked {
		if err := check(ns.ValueColumn, pgtype.JSONBOID, pgtype.JSONOID); err != nil {
			return err
		}
	}
	if ns.Layout == warmcache.LayoutBytes {
		if err := check(ns.ValueColumn, pgtype.ByteaOID); err != nil {
			return err
		}
	}
	for _, c := range ns.Columns {
		var want *uint32
		if err := conn.QueryRow(ctx, "SELECT to_regtype($1)::oid", c.Type).Scan(&want); err != nil {
			return tableError(ns, "look up type %q: %w", c.Type, err)
		}
		if want == nil {
			return tableError(ns, "column %q: unknown type %q", c.Name, c.Type)
		}
		if err := check(c.Name, *want); err != nil {
			return err
		}
	}
	return nil
}

// writesWithoutUpsert reports whether writes to table relid take the
// statements that need neither ON CONFLICT nor DELETE ... RETURNING: without
// ON CONFLICT (before PostgreSQL 9.5, so Greenplum 6) or on an
// append-optimized table. The catalog says how the table is stored, whoever
// created it. When a writable namespace upserts, it checks that the key has
// the unique index ON CONFLICT needs.
func writesWithoutUpsert(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace, srv server, relid uint32) (bool, error) {
	noUpsert := !srv.onConflict
	if srv.dialect == dialect.Greenplum {
		ao, err := dialect.AppendOptimized(ctx, conn, relid)
		if err != nil {
			return false, tableError(ns, "read storage: %w", err)
		}
		noUpsert = noUpsert || ao
	}
	if ns.Writable && !noUpsert {
		// ON CONFLICT (key) needs a unique index on the key alone; the
		// server reports its absence only when a write is planned.
		var unique bool
		if err := conn.QueryRow(ctx, uniqueKeyIndex, relid, ns.KeyColumn).Scan(&unique); err != nil {
			return false, tableError(ns, "read indexes: %w", err)
		}
		if !unique {
			return false, tableError(ns, "no primary key or unique index on column %q alone, which writes (INSERT ... ON CONFLICT) need", ns.KeyColumn)
		}
	}
	return noUpsert, nil
}

// statementShape is a statement to prepare and the parameter and result
// types it must have.
type statementShape struct {
	name, sql      string
	params, fields []uint32 // nil: not checked
}

// statementShapes lists ns's statements to prepare: the lookups, whose
// types are checked, then, when ns is writable, the writes.
func statementShapes(ns *warmcache.Namespace, stmts StatementSet) []statementShape {
	keyOID, keyArrayOID := keyOIDs(ns)
	// Values are JSON text, or bytea for the bytes layout.
	valueOID := uint32(pgtype.TextOID)
	if ns.Layout == warmcache.LayoutBytes {
		valueOID = pgtype.ByteaOID
	}
	// A table with an expiry column returns each row's expiry last.
	fields := func(oids ...uint32) []uint32 {
		if stmts.Expiring {
			return append(oids, pgtype.TimestamptzOID)
		}
		return oids
	}
	shapes := []statementShape{
		{"lookup", stmts.Lookup, []uint32{keyOID}, fields(valueOID, pgtype.Int8OID)},
		{"lookup_many", stmts.LookupMany, []uint32{keyArrayOID}, fields(keyOID, valueOID, pgtype.Int8OID)},
		{"lookup_positions", stmts.LookupPositions, []uint32{keyArrayOID}, fields(pgtype.Int8OID, valueOID, pgtype.Int8OID)},
		{"lookup_call", stmts.LookupCall, []uint32{keyArrayOID}, fields(pgtype.Int8OID, valueOID, pgtype.Int8OID)},
	}
	if ns.Writable {
		shapes = append(shapes,
			statementShape{"table_lock", stmts.TableLock, nil, nil},
			statementShape{"key_lock", stmts.KeyLock, nil, nil},
			statementShape{"row_lock", stmts.RowLock, nil, nil},
			statementShape{"next_version", stmts.NextVersion, nil, nil},
			statementShape{"upsert", stmts.Upsert, nil, nil},
			statementShape{"update_if_match", stmts.UpdateIfMatch, nil, nil},
			statementShape{"update", stmts.Update, nil, nil},
			statementShape{"insert", stmts.Insert, nil, nil},
			statementShape{"delete", stmts.Delete, nil, nil},
			statementShape{"delete_if_match", stmts.DeleteIfMatch, nil, nil},
			statementShape{"retire", stmts.Retire, nil, nil},
			statementShape{"retire_if_match", stmts.RetireIfMatch, nil, nil},
			statementShape{"remove", stmts.Remove, nil, nil},
			statementShape{"version", stmts.Version, nil, nil},
			statementShape{"purge_expired", stmts.PurgeExpired, nil, nil},
			statementShape{"expired_keys", stmts.ExpiredKeys, nil, nil},
			statementShape{"delete_expired", stmts.DeleteExpired, nil, nil},
			statementShape{"retire_expired", stmts.RetireExpired, nil, nil},
			statementShape{"remove_expired", stmts.RemoveExpired, nil, nil},
		)
	}
	return shapes
}

// prepareStatements prepares each of ns's statements with the unnamed
// statement and checks the parameter and result types of those whose
// shape says them. An empty statement is skipped.
func prepareStatements(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace, stmts StatementSet) error {
	for _, sh := range statementShapes(ns, stmts) {
		if sh.sql == "" {
			continue
		}
		sd, err := conn.Conn().Prepare(ctx, "", sh.sql)
		if err != nil {
			return tableError(ns, "prepare %s statement: %w", sh.name, err)
		}
		if sh.params != nil && !slices.Equal(sd.ParamOIDs, sh.params) {
			return tableError(ns, "%s statement takes parameters (%s), want (%s)", sh.name, typeNames(sd.ParamOIDs, ", "), typeNames(sh.params, ", "))
		}
		if sh.fields != nil && !slices.Equal(fieldOIDs(sd.Fields), sh.fields) {
			return tableError(ns, "%s statement returns (%s), want (%s)", sh.name, typeNames(fieldOIDs(sd.Fields), ", "), typeNames(sh.fields, ", "))
		}
	}
	return nil
}

// uniqueKeyIndex asks whether table $1 has a unique index, usable as the
// arbiter of ON CONFLICT, on column $2 alone.
const uniqueKeyIndex = `SELECT EXISTS (SELECT 1 FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = $1 AND i.indisunique AND i.indimmediate AND i.indnkeyatts = 1
AND i.indpred IS NULL AND i.indexprs IS NULL AND a.attname = $2)`

// tableColumns returns the live columns of a table by name.
func tableColumns(ctx context.Context, conn *pgxpool.Conn, relid uint32) (map[string]column, error) {
	rows, err := conn.Query(ctx, `SELECT attname, atttypid, format_type(atttypid, atttypmod)
FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, relid)
	if err != nil {
		return nil, err
	}
	columns := make(map[string]column)
	var (
		name string
		c    column
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &c.typ, &c.typName}, func() error {
		columns[name] = c
		return nil
	})
	return columns, err
}

func fieldOIDs(fields []pgconn.FieldDescription) []uint32 {
	oids := make([]uint32, len(fields))
	for i, f := range fields {
		oids[i] = f.DataTypeOID
	}
	return oids
}

// typeNames names type OIDs for an error message, separated by sep.
func typeNames(oids []uint32, sep string) string {
	m := pgtype.NewMap()
	names := make([]string, len(oids))
	for i, oid := range oids {
		if t, ok := m.TypeForOID(oid); ok {
			names[i] = t.Name
		} else {
			names[i] = fmt.Sprintf("oid %d", oid)
		}
	}
	return strings.Join(names, sep)
}
