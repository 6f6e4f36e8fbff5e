package pgstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// VersionSequence is the sequence every write takes its version from. The
// migrations create it; a writable namespace needs it in the search path.
const VersionSequence = "warmcache_version_seq"

// maxColumns bounds a columns-layout namespace: json_build_object takes at
// most 100 arguments, a name and a value per column.
const maxColumns = 50

// StatementSet holds the SQL of one namespace, built once when the store
// opens. Parameters always carry the key column's exact type ($1::bigint or
// $1::text), so that the planner uses the key index and, on Greenplum,
// dispatches to one segment. Values are JSON text: the packed layout returns
// the value column as text, the columns layout builds an object from the
// typed columns with json_build_object.
type StatementSet struct {
	// Lookup reads one key ($1). It returns the value as JSON text and the
	// version.
	Lookup string
	// LookupMany reads the keys of an array ($1). It returns the key, the
	// value as JSON text and the version, one row per key found.
	LookupMany string

	// Upsert inserts or replaces key $1 with JSON value $2 at a new version
	// and returns the stored value and version. It is empty when
	// DeleteInsert is set.
	Upsert string
	// UpdateIfMatch replaces the value of key $1 with $2 when the row's
	// version is $3, and returns the stored value and version; no row means
	// the precondition failed. It is empty when DeleteInsert is set.
	UpdateIfMatch string

	// Remove deletes key $1 and returns the removed rows' versions: the
	// first half of a DELETE + INSERT write. It is set only with
	// DeleteInsert.
	Remove string
	// Insert inserts key $1 with JSON value $2 at a new version and returns
	// the stored value and version: the second half of a DELETE + INSERT
	// write. It is set only with DeleteInsert.
	Insert string

	// Delete removes key $1 and returns a new version, newer than any the
	// key had.
	Delete string
	// DeleteIfMatch is Delete when the row's version is $2.
	DeleteIfMatch string
	// Version returns the version of key $1, to tell an absent key from a
	// failed precondition.
	Version string

	// DeleteInsert says that a write is Remove then Insert in one
	// transaction, because the table rejects INSERT ... ON CONFLICT.
	DeleteInsert bool
}

// Statements builds the SQL of namespace ns. deleteInsert selects writes as
// DELETE + INSERT in one transaction, which Greenplum's append-optimized
// tables need because they reject ON CONFLICT; otherwise a write is one
// INSERT ... ON CONFLICT (key) DO UPDATE, which needs a unique index on the
// key. Identifiers are quoted; a table name may be schema-qualified
// ("schema.table"). Statements needs no database and is safe for
// concurrent use. It fails when the namespace is incomplete.
func Statements(ns *warmcache.Namespace, deleteInsert bool) (StatementSet, error) {
	if err := checkNamespace(ns); err != nil {
		return StatementSet{}, err
	}
	var (
		table   = tableIdent(ns.Table)
		key     = ident(ns.KeyColumn)
		version = ident(ns.VersionColumn)
		keyType = string(ns.KeyType)
		nextval = "nextval(" + quoteLiteral(VersionSequence) + ")"
	)
	byKey := fmt.Sprintf("%s = $1::%s", key, keyType)
	s := StatementSet{
		Lookup: fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s",
			valueExpr(ns, ""), version, table, byKey),
		LookupMany: fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s = ANY($1::%s[])",
			key, valueExpr(ns, ""), version, table, key, keyType),
		Delete: fmt.Sprintf("DELETE FROM %s WHERE %s RETURNING %s",
			table, byKey, nextval),
		DeleteIfMatch: fmt.Sprintf("DELETE FROM %s WHERE %s AND %s = $2::bigint RETURNING %s",
			table, byKey, version, nextval),
		Version: fmt.Sprintf("SELECT %s FROM %s WHERE %s",
			version, table, byKey),
		DeleteInsert: deleteInsert,
	}

	// insertInto is the INSERT of key $1 and value $2 at a new version,
	// without its conflict and returning clauses.
	var insertInto string
	switch ns.Layout {
	case warmcache.LayoutPacked:
		value := ident(ns.ValueColumn)
		insertInto = fmt.Sprintf("INSERT INTO %s (%s, %s, %s) VALUES ($1::%s, $2::jsonb, %s)",
			table, key, value, version, keyType, nextval)
		s.Upsert = fmt.Sprintf("%s ON CONFLICT (%s) DO UPDATE SET %s = EXCLUDED.%s, %s = %s RETURNING %s, %s",
			insertInto, key, value, value, version, nextval, valueExpr(ns, ""), version)
		s.UpdateIfMatch = fmt.Sprintf("UPDATE %s AS t SET %s = $2::jsonb, %s = %s WHERE t.%s AND t.%s = $3::bigint RETURNING %s, t.%s",
			table, value, version, nextval, byKey, version, valueExpr(ns, "t."), version)
	case warmcache.LayoutColumns:
		// json_populate_record maps the object's fields onto a row of the
		// table's type, converting each to its column's type; a missing
		// field is NULL.
		record := fmt.Sprintf("json_populate_record(NULL::%s, $2::json) AS r", table)
		names := make([]string, len(ns.Columns))
		fromRecord := make([]string, len(ns.Columns))
		excluded := make([]string, len(ns.Columns))
		assign := make([]string, len(ns.Columns))
		for i, c := range ns.Columns {
			col := ident(c.Name)
			names[i] = col
			fromRecord[i] = "r." + col
			excluded[i] = col + " = EXCLUDED." + col
			assign[i] = col + " = r." + col
		}
		insertInto = fmt.Sprintf("INSERT INTO %s (%s, %s, %s) SELECT $1::%s, %s, %s FROM %s",
			table, key, strings.Join(names, ", "), version, keyType, strings.Join(fromRecord, ", "), nextval, record)
		s.Upsert = fmt.Sprintf("%s ON CONFLICT (%s) DO UPDATE SET %s, %s = %s RETURNING %s, %s",
			insertInto, key, strings.Join(excluded, ", "), version, nextval, valueExpr(ns, ""), version)
		s.UpdateIfMatch = fmt.Sprintf("UPDATE %s AS t SET %s, %s = %s FROM %s WHERE t.%s AND t.%s = $3::bigint RETURNING %s, t.%s",
			table, strings.Join(assign, ", "), version, nextval, record, byKey, version, valueExpr(ns, "t."), version)
	}
	if deleteInsert {
		s.Upsert, s.UpdateIfMatch = "", ""
		s.Remove = fmt.Sprintf("DELETE FROM %s WHERE %s RETURNING %s", table, byKey, version)
		s.Insert = fmt.Sprintf("%s RETURNING %s, %s", insertInto, valueExpr(ns, ""), version)
	}
	return s, nil
}

// valueExpr returns the expression that reads a row's value as JSON text,
// with its columns qualified by qual ("" or "t.").
func valueExpr(ns *warmcache.Namespace, qual string) string {
	if ns.Layout == warmcache.LayoutPacked {
		return qual + ident(ns.ValueColumn) + "::text"
	}
	fields := make([]string, len(ns.Columns))
	for i, c := range ns.Columns {
		fields[i] = quoteLiteral(c.Name) + ", " + qual + ident(c.Name)
	}
	return "json_build_object(" + strings.Join(fields, ", ") + ")::text"
}

// checkNamespace reports what is missing or contradictory in ns for
// building its statements.
func checkNamespace(ns *warmcache.Namespace) error {
	if ns == nil {
		return errors.New("pgstore: nil namespace")
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("pgstore: namespace %q: %s", ns.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case ns.Table == "":
		return fail("no table")
	case ns.KeyColumn == "":
		return fail("no key column")
	case ns.VersionColumn == "":
		return fail("no version column")
	case ns.KeyType != warmcache.KeyBigint && ns.KeyType != warmcache.KeyText:
		return fail("key type %q is not bigint or text", ns.KeyType)
	}
	for _, part := range strings.Split(ns.Table, ".") {
		if part == "" {
			return fail("table %q has an empty name part", ns.Table)
		}
	}
	switch ns.Layout {
	case warmcache.LayoutPacked:
		if ns.ValueColumn == "" {
			return fail("packed layout without a value column")
		}
		return nil
	case warmcache.LayoutColumns:
		if len(ns.Columns) == 0 {
			return fail("columns layout without columns")
		}
		if len(ns.Columns) > maxColumns {
			return fail("%d columns, at most %d are supported", len(ns.Columns), maxColumns)
		}
		seen := map[string]bool{ns.KeyColumn: true, ns.VersionColumn: true}
		for _, c := range ns.Columns {
			if c.Name == "" {
				return fail("a column has no name")
			}
			if seen[c.Name] {
				return fail("column %q is listed twice or is the key or version column", c.Name)
			}
			seen[c.Name] = true
		}
		return nil
	default:
		return fail("layout %q is not packed or columns", ns.Layout)
	}
}

// tableIdent quotes a possibly schema-qualified table name.
func tableIdent(table string) string {
	return pgx.Identifier(strings.Split(table, ".")).Sanitize()
}

// ident quotes one identifier.
func ident(name string) string {
	return pgx.Identifier{name}.Sanitize()
}
