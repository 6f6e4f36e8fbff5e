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
// dispatches to one segment. A value travels as the value's bytes: JSON
// text in the JSON layouts, where the packed layout returns the value
// column as text and the columns layout builds an object from the typed
// columns with json_build_object; in the bytes layout a bytea, written
// from a bytes parameter and read as it is.
//
// Every write runs in a transaction that first takes the write lock of
// each of its keys (KeyLock, a transaction-scoped advisory lock on a hash
// of the table and the key) and only then draws its versions (NextVersion);
// the versions go to the write statements as parameters, and a row gets
// GREATEST(that version, its old version + 1). The previous writer of a key
// released its lock at its commit, so every version a writer draws is above
// every version the key had, its deletes included: a key inserted again
// after a concurrent delete cannot get a version below the delete's. On
// PostgreSQL RowLock then locks the key's row, so that a writer outside the
// service (which takes no advisory lock) that holds the row finishes first.
// Two measured Greenplum facts shape the rest:
//   - a sequence created without CACHE gets CACHE 20 there, and each session
//     draws from its own block (1, 21, 41, ...), so values from different
//     pool connections are not ordered; the migrations say CACHE 1, and
//     GREATEST keeps versions growing on a sequence made elsewhere;
//   - nextval() evaluated inside a dispatched write runs on a segment, which
//     asks the coordinator for the value, and it makes the write a
//     Redistribute Motion under a Gather Motion of every segment: an upsert
//     with nextval() in VALUES was far slower than SELECT nextval() on the
//     coordinator followed by the upsert with the version as a parameter,
//     which is direct-dispatched to the key's segment
//     (docs/warehouse.md#greenplum-measured, from loadtest/cmd/gpbench).
//     KeyLock and NextVersion read no table, so they run on the coordinator
//     alone.
type StatementSet struct {
	// Lookup reads one key ($1). It returns the value and the version.
	Lookup string
	// LookupMany reads the keys of an array ($1). It returns the key, the
	// value and the version, one row per key found. It is
	// Greenplum's batched read (see Store.lookupManyGreenplum).
	LookupMany string
	// LookupPositions reads the keys of an array ($1) as a join of the
	// array with the table: it returns each found key's 1-based position
	// in the array, the value and the version. PostgreSQL
	// reads each key with one index probe, in the one partition the key
	// hashes to (run-time pruning), where `= ANY($1)` probes every
	// partition's index for every key of the array; and the store places
	// each row by its position, without a map or decoding the key. On
	// Greenplum the join would move rows between segments: batches are
	// read there with LookupMany.
	LookupPositions string
	// LookupFunction creates a PL/pgSQL function whose body is
	// LookupPositions, and LookupCall reads the keys of an array ($1)
	// through it, with LookupPositions' results: PostgreSQL keeps the plan
	// of a function's query in each session, where it plans a statement
	// sent alone at every query (see lookupfunc.go). Both are empty when
	// LookupPositions is, and a Store empties them when it cannot or must
	// not use the function (Options.LookupFunction).
	LookupFunction, LookupCall string
	// lookupSignature names the function with its argument type, for
	// to_regprocedure, and lookupBody is its source, as pg_proc.prosrc
	// holds it.
	lookupSignature, lookupBody string
	// WriteFunction creates a PL/pgSQL function that runs a whole write of
	// one key, its locks and version included (see writefunc.go), and
	// WriteCall calls it: $1 the key, $2 the value (NULL for a delete), $3
	// the expected version or NULL, $4 whether it deletes, $5 the TTL in
	// milliseconds or NULL, $6 whether a deleted key may be absent, $7 the
	// table's lock hash (NULL takes no lock), $8 the keys' lock hashes and
	// $9 the keys whose rows to lock first (a transaction's first write;
	// empty for a write alone, which takes its key's lock only where it
	// needs it). It returns one row: the version (0 for a delete of an
	// absent key that may be absent), the value where the warehouse
	// rewrites it (not in the bytes layout) and, with Expiring, the
	// expiry. Both are empty without a write
	// function (Greenplum, append-optimized tables, Options.WriteFunction).
	WriteFunction, WriteCall string
	// FoldCall calls the write function once per write of a fold, in one
	// statement: $1 to $6 are arrays of WriteCall's $1 to $6, one element
	// per write, $7 the table's lock hash and $8 the array of each write's
	// key lock hash. The calls run in the arrays' order, and it returns
	// WriteCall's row for each, in the same order. Empty with WriteCall.
	FoldCall string
	// writeSignature and writeBody are lookupSignature and lookupBody of
	// the write function.
	writeSignature, writeBody string
	// writeReturnsValue says that the write function returns the stored
	// value: the warehouse rewrites it (every layout but bytes).
	writeReturnsValue bool

	// TableLock takes the table's lock shared, as every write does, so
	// that a bulk load, which takes it alone (LoadTableLock) before it
	// draws its version, orders with writes as a write of every key
	// would: $1 is the table's hash (see lockHash).
	TableLock string
	// KeyLock takes the write lock of a key: a transaction-scoped advisory
	// lock on the 64-bit hash $1 (see lockHash), held until the write's
	// transaction ends.
	KeyLock string
	// RowLock locks the row of key $1, when there is one, until the
	// transaction ends, and returns one row whatever it found. It is empty
	// with AppendOptimized.
	RowLock string
	// NextVersion draws $1 versions from the version sequence, in
	// ascending order. It reads no table, so on Greenplum it runs on the
	// coordinator alone.
	NextVersion string

	// Upsert inserts or replaces key $1 with value $2 at version $3,
	// or at the old version + 1 when that is greater, and returns the
	// stored value and version. It is empty with AppendOptimized.
	Upsert string
	// UpdateIfMatch replaces the value of key $1 with $2 when the row's
	// version is $3, at version $4 (or the old version + 1 when greater),
	// and returns the stored value and version; no row means the
	// precondition failed. It is an UPDATE ... RETURNING, which
	// append-optimized tables accept too.
	UpdateIfMatch string

	// Update replaces the value of key $1 with $2 at version $3 (or the
	// old version + 1 when greater) and returns the stored value and
	// version; no row means the key is absent, and Insert follows in the
	// same transaction. It is set only with AppendOptimized.
	Update string
	// Insert inserts key $1 with value $2 at version $3 and returns
	// the stored value and version: with AppendOptimized, the second half
	// of a write after Update found no row; on its own, a write that only
	// creates, which the key's unique index refuses (unique_violation)
	// when the key exists.
	Insert string

	// Delete removes key $1 and returns the version of the delete:
	// GREATEST($2, the row's version + 1). It is empty with
	// AppendOptimized.
	Delete string
	// DeleteIfMatch is Delete when the row's version is $2, with the new
	// version in $3.
	DeleteIfMatch string

	// Retire moves key $1 to the version of its delete, GREATEST($2, its
	// version + 1), and returns it; Remove then deletes the row in the same
	// transaction. Append-optimized tables reject DELETE ... RETURNING
	// (SQLSTATE 0A000) but accept UPDATE ... RETURNING, which also locks
	// the row (on Greenplum, the table) until the DELETE. Set only with
	// AppendOptimized.
	Retire string
	// RetireIfMatch is Retire when the row's version is $2, with the new
	// version in $3.
	RetireIfMatch string
	// Remove deletes key $1, without RETURNING. Set only with
	// AppendOptimized.
	Remove string

	// Version returns the version of key $1, to tell an absent key from a
	// failed precondition.
	Version string

	// Expiring says that the table has an expiry column
	// (Namespace.ExpiresColumn). Then every statement above treats a row
	// past its expiry as absent: lookups leave it out and return each
	// row's expiry as one more column, and IfMatch, deletes and Version do
	// not see it; Upsert, Update and Insert set the expiry from one more
	// parameter, the TTL in milliseconds ($4, $5 for UpdateIfMatch), as
	// the statement's start plus the TTL (see writeClock), to the
	// millisecond (as every tier keeps it), or NULL (never) when it is
	// NULL, and return it after the version. A write that only creates
	// runs PurgeExpired first, so that an expired row does not count as
	// the key's, and draws its version again when it purged one.
	Expiring bool
	// PurgeExpired deletes the row of key $1 when it is past its expiry.
	PurgeExpired string
	// ExpiredKeys returns the keys of at most $1 rows past their expiry,
	// through the expiry column's index.
	ExpiredKeys string
	// DeleteExpired deletes the rows of the keys of an array ($1) that are
	// past their expiry, and returns each one's key and the version of its
	// delete, GREATEST($2, its version + 1). It is empty with
	// AppendOptimized, where RetireExpired and then RemoveExpired do the
	// same, in one transaction.
	DeleteExpired string
	// RetireExpired moves the rows of the keys of an array ($1) that are
	// past their expiry to the version of their delete, GREATEST($2, their
	// version + 1), and returns each one's key and that version. Set only
	// with AppendOptimized.
	RetireExpired string
	// RemoveExpired deletes the rows of the keys of an array ($1) that are
	// past their expiry. Set only with AppendOptimized.
	RemoveExpired string

	// AppendOptimized says that the table rejects INSERT ... ON CONFLICT
	// and DELETE ... RETURNING (Greenplum's append-optimized tables): a
	// write is Update, then Insert when no row was updated, and a delete is
	// Retire then Remove, each pair in one transaction.
	AppendOptimized bool
}

// Statements builds the SQL of namespace ns. appendOptimized selects the
// writes of tables that reject ON CONFLICT and DELETE ... RETURNING
// (Greenplum's append-optimized tables); otherwise a write is one INSERT
// ... ON CONFLICT (key) DO UPDATE, which needs a unique index on the key.
// Identifiers are quoted; a table name may be schema-qualified
// ("schema.table"). Statements needs no database and is safe for
// concurrent use. It fails when the namespace is incomplete.
func Statements(ns *warmcache.Namespace, appendOptimized bool) (StatementSet, error) {
	if err := checkNamespace(ns); err != nil {
		return StatementSet{}, err
	}
	p := newSQLParts(ns)
	s := p.lookups(ns)
	s.AppendOptimized = appendOptimized
	s.Expiring = p.exp != ""
	p.deletes(&s, appendOptimized)
	if p.exp != "" {
		p.expiryStatements(&s, appendOptimized)
	}
	p.writes(&s, ns, appendOptimized)
	s.setLookupFunction(ns, tableSchema(ns.Table))
	if ns.Writable {
		s.setWriteFunction(ns, tableSchema(ns.Table), true)
	}
	return s, nil
}

// sqlParts holds the quoted names of a namespace's table and the clauses
// its statements share.
type sqlParts struct {
	table, key, version, keyType string
	// byKey is the condition on the key column that selects key $1.
	byKey string
	// exp is the quoted expiry column, "" without one.
	exp string
	// insCol and insVal are the expiry's column and value ($4) in an
	// INSERT, and excludedExp its assignment in ON CONFLICT. All are
	// empty without an expiry column.
	insCol, insVal, excludedExp string
}

func newSQLParts(ns *warmcache.Namespace) sqlParts {
	p := sqlParts{
		table:   tableIdent(ns.Table),
		key:     ident(ns.KeyColumn),
		version: ident(ns.VersionColumn),
		keyType: string(ns.KeyType),
	}
	p.byKey = fmt.Sprintf("%s = $1::%s", p.key, p.keyType)
	if ns.ExpiresColumn != "" {
		p.exp = ident(ns.ExpiresColumn)
		p.insCol, p.insVal = ", "+p.exp, ", "+p.ttlExpr("$4")
		p.excludedExp = fmt.Sprintf(", %s = EXCLUDED.%s", p.exp, p.exp)
	}
	return p
}

// writeClock is the time at which a write's statements judge and set
// expiries: the statement's start. A write's transaction begins before it
// waits for its key locks, so now(), the transaction's start, could lie
// before an expiry that passed while it waited, and the write would then
// treat as live a row that a read had already found absent.
const writeClock = "statement_timestamp()"

// live is the condition of a read that a row is not past its expiry, with
// its columns qualified by a prefix ("" or "t."); it is empty without an
// expiry column. A read is one statement, whose now() is its start.
func (p sqlParts) live(qual string) string {
	return p.liveAt(qual, "now()")
}

// liveInWrite is live for the statements of a write (see writeClock).
func (p sqlParts) liveInWrite(qual string) string {
	return p.liveAt(qual, writeClock)
}

// liveAt is live at the time clock.
func (p sqlParts) liveAt(qual, clock string) string {
	if p.exp == "" {
		return ""
	}
	return fmt.Sprintf(" AND (%s%s IS NULL OR %s%s > %s)", qual, p.exp, qual, p.exp, clock)
}

// expiry is the column that returns a row's expiry, qualified by a prefix
// ("" or "t."); it is empty without an expiry column.
func (p sqlParts) expiry(qual string) string {
	if p.exp == "" {
		return ""
	}
	return ", " + qual + p.exp
}

// newVersion is the version a write gives an existing row.
func (p sqlParts) newVersion(param string) string {
	return fmt.Sprintf("GREATEST(%s::bigint, t.%s + 1)", param, p.version)
}

// ttlExpr is the expiry of a write whose TTL in milliseconds is parameter
// param.
func (p sqlParts) ttlExpr(param string) string {
	return fmt.Sprintf("date_trunc('milliseconds', %s + %s::bigint * interval '1 millisecond')", writeClock, param)
}

// setExp is the assignment of the expiry of a write whose TTL is
// parameter param; it is empty without an expiry column.
func (p sqlParts) setExp(param string) string {
	if p.exp == "" {
		return ""
	}
	return fmt.Sprintf(", %s = %s", p.exp, p.ttlExpr(param))
}

// lookups returns a StatementSet with the reads and the locks set.
func (p sqlParts) lookups(ns *warmcache.Namespace) StatementSet {
	return StatementSet{
		Lookup: fmt.Sprintf("SELECT %s, %s%s FROM %s WHERE %s%s",
			valueExpr(ns, ""), p.version, p.expiry(""), p.table, p.byKey, p.live("")),
		LookupMany: fmt.Sprintf("SELECT %s, %s, %s%s FROM %s WHERE %s = ANY($1::%s[])%s",
			p.key, valueExpr(ns, ""), p.version, p.expiry(""), p.table, p.key, p.keyType, p.live("")),
		LookupPositions: fmt.Sprintf("SELECT k.i, %s, t.%s%s FROM unnest($1::%s[]) WITH ORDINALITY AS k(key, i) JOIN %s AS t ON t.%s = k.key%s",
			valueExpr(ns, "t."), p.version, p.expiry("t."), p.keyType, p.table, p.key, p.live("t.")),
		TableLock:   "SELECT pg_advisory_xact_lock_shared($1::bigint)",
		KeyLock:     "SELECT pg_advisory_xact_lock($1::bigint)",
		NextVersion: "SELECT nextval(" + quoteLiteral(VersionSequence) + ") FROM generate_series(1, $1::integer)",
		Version: fmt.Sprintf("SELECT %s FROM %s WHERE %s%s",
			p.version, p.table, p.byKey, p.liveInWrite("")),
	}
}

// atVersion is the condition that row t is at the version of parameter
// param. The version is compared as an expression, which no index
// matches, so that the planner reaches the row by the key's index, as
// every other write does: on Greenplum the key's condition in the chosen
// index is what sends a statement to the key's segment alone, and a
// conditional write that took the version's index went to every segment
// and committed in two phases.
func (p sqlParts) atVersion(param string) string {
	return fmt.Sprintf("t.%s + 0 = %s::bigint", p.version, param)
}

// deletes sets the deletes of one key in s, and the row lock when the
// table is not append-optimized.
func (p sqlParts) deletes(s *StatementSet, appendOptimized bool) {
	table, version, byKey := p.table, p.version, p.byKey
	if appendOptimized {
		s.Retire = fmt.Sprintf("UPDATE %s AS t SET %s = %s WHERE t.%s%s RETURNING t.%s",
			table, version, p.newVersion("$2"), byKey, p.liveInWrite("t."), version)
		s.RetireIfMatch = fmt.Sprintf("UPDATE %s AS t SET %s = %s WHERE t.%s AND %s%s RETURNING t.%s",
			table, version, p.newVersion("$3"), byKey, p.atVersion("$2"), p.liveInWrite("t."), version)
		s.Remove = fmt.Sprintf("DELETE FROM %s WHERE %s", table, byKey)
		return
	}
	s.RowLock = fmt.Sprintf("SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s FOR UPDATE) AS r",
		table, byKey)
	s.Delete = fmt.Sprintf("DELETE FROM %s AS t WHERE t.%s%s RETURNING %s",
		table, byKey, p.liveInWrite("t."), p.newVersion("$2"))
	s.DeleteIfMatch = fmt.Sprintf("DELETE FROM %s AS t WHERE t.%s AND %s%s RETURNING %s",
		table, byKey, p.atVersion("$2"), p.liveInWrite("t."), p.newVersion("$3"))
}

// expiryStatements sets in s the statements that find and delete rows past
// their expiry. It needs an expiry column.
func (p sqlParts) expiryStatements(s *StatementSet, appendOptimized bool) {
	table, key, version := p.table, p.key, p.version
	expired := fmt.Sprintf("%s <= %s", p.exp, writeClock)
	anyKey := fmt.Sprintf("%s = ANY($1::%s[])", key, p.keyType)
	s.PurgeExpired = fmt.Sprintf("DELETE FROM %s WHERE %s AND %s", table, p.byKey, expired)
	s.ExpiredKeys = fmt.Sprintf("SELECT %s FROM %s WHERE %s LIMIT $1::integer", key, table, expired)
	if appendOptimized {
		s.RetireExpired = fmt.Sprintf("UPDATE %s AS t SET %s = %s WHERE t.%s AND t.%s RETURNING t.%s, t.%s",
			table, version, p.newVersion("$2"), anyKey, expired, key, version)
		s.RemoveExpired = fmt.Sprintf("DELETE FROM %s WHERE %s AND %s", table, anyKey, expired)
		return
	}
	s.DeleteExpired = fmt.Sprintf("DELETE FROM %s AS t WHERE t.%s AND t.%s RETURNING t.%s, %s",
		table, anyKey, expired, key, p.newVersion("$2"))
}

// writes sets the writes of s: Upsert (or Update with appendOptimized),
// UpdateIfMatch and Insert, for the layout of ns.
func (p sqlParts) writes(s *StatementSet, ns *warmcache.Namespace, appendOptimized bool) {
	table, version := p.table, p.version
	// insertInto is the INSERT of key $1 and value $2 at version $3,
	// without its conflict and returning clauses; set is the assignment
	// of value $2 to an existing row t, and from the FROM clause it needs.
	var insertInto, set, from string
	switch ns.Layout {
	case warmcache.LayoutPacked:
		insertInto, set = p.valueColumnWrite(s, ns, "jsonb")
	case warmcache.LayoutBytes:
		// The value is bytea as the writer sent it: the parameter is
		// bytes, never text cast to JSON.
		insertInto, set = p.valueColumnWrite(s, ns, "bytea")
	case warmcache.LayoutColumns:
		insertInto, set, from = p.columnsWrite(s, ns)
	}
	s.UpdateIfMatch = fmt.Sprintf("UPDATE %s AS t SET %s, %s = %s%s%s WHERE t.%s AND %s%s RETURNING %s, t.%s%s",
		table, set, version, p.newVersion("$4"), p.setExp("$5"), from, p.byKey, p.atVersion("$3"), p.liveInWrite("t."), valueExpr(ns, "t."), version, p.expiry("t."))
	if appendOptimized {
		s.Upsert = ""
		s.Update = fmt.Sprintf("UPDATE %s AS t SET %s, %s = %s%s%s WHERE t.%s RETURNING %s, t.%s%s",
			table, set, version, p.newVersion("$3"), p.setExp("$4"), from, p.byKey, valueExpr(ns, "t."), version, p.expiry("t."))
	}
	s.Insert = fmt.Sprintf("%s RETURNING %s, t.%s%s", insertInto, valueExpr(ns, "t."), version, p.expiry("t."))
}

// valueColumnWrite sets s.Upsert for a layout with one value column of
// type typ (packed: jsonb, bytes: bytea), and returns the INSERT without
// its conflict and returning clauses and the assignment of value $2.
func (p sqlParts) valueColumnWrite(s *StatementSet, ns *warmcache.Namespace, typ string) (insertInto, set string) {
	table, key, version := p.table, p.key, p.version
	value := ident(ns.ValueColumn)
	insertInto = fmt.Sprintf("INSERT INTO %s AS t (%s, %s, %s%s) VALUES ($1::%s, $2::%s, $3::bigint%s)",
		table, key, value, version, p.insCol, p.keyType, typ, p.insVal)
	s.Upsert = fmt.Sprintf("%s ON CONFLICT (%s) DO UPDATE SET %s = EXCLUDED.%s, %s = GREATEST(EXCLUDED.%s, t.%s + 1)%s RETURNING %s, t.%s%s",
		insertInto, key, value, value, version, version, version, p.excludedExp, valueExpr(ns, "t."), version, p.expiry("t."))
	return insertInto, value + " = $2::" + typ
}

// columnsWrite sets s.Upsert for the columns layout, and returns the
// INSERT without its conflict and returning clauses, the assignment of
// value $2 and the FROM clause that assignment needs.
func (p sqlParts) columnsWrite(s *StatementSet, ns *warmcache.Namespace) (insertInto, set, from string) {
	table, key, version := p.table, p.key, p.version
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
	insertInto = fmt.Sprintf("INSERT INTO %s AS t (%s, %s, %s%s) SELECT $1::%s, %s, $3::bigint%s FROM %s",
		table, key, strings.Join(names, ", "), version, p.insCol, p.keyType, strings.Join(fromRecord, ", "), p.insVal, record)
	s.Upsert = fmt.Sprintf("%s ON CONFLICT (%s) DO UPDATE SET %s, %s = GREATEST(EXCLUDED.%s, t.%s + 1)%s RETURNING %s, t.%s%s",
		insertInto, key, strings.Join(excluded, ", "), version, version, version, p.excludedExp, valueExpr(ns, "t."), version, p.expiry("t."))
	return insertInto, strings.Join(assign, ", "), " FROM " + record
}

// valueExpr returns the expression that reads a row's value as JSON text,
// or for the bytes layout as the bytea itself (a NULL reads as no bytes),
// with its columns qualified by qual ("" or "t.").
func valueExpr(ns *warmcache.Namespace, qual string) string {
	switch ns.Layout {
	case warmcache.LayoutPacked:
		return qual + ident(ns.ValueColumn) + "::text"
	case warmcache.LayoutBytes:
		return "COALESCE(" + qual + ident(ns.ValueColumn) + ", ''::bytea)"
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
	case warmcache.LayoutPacked, warmcache.LayoutBytes:
		if ns.ValueColumn == "" {
			return fail("%s layout without a value column", ns.Layout)
		}
		return nil
	case warmcache.LayoutColumns:
		if len(ns.Columns) == 0 {
			return fail("columns layout without columns")
		}
		if len(ns.Columns) > maxColumns {
			return fail("%d columns, at most %d are supported", len(ns.Columns), maxColumns)
		}
		seen := map[string]bool{ns.KeyColumn: true, ns.VersionColumn: true, ns.ExpiresColumn: ns.ExpiresColumn != ""}
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
		return fail("layout %q is not packed, columns or bytes", ns.Layout)
	}
}

// tableIdent quotes a possibly schema-qualified table name.
func tableIdent(table string) string {
	return pgx.Identifier(strings.Split(table, ".")).Sanitize()
}

// tableSchema returns the schema a table name names, or "" when it names
// none.
func tableSchema(table string) string {
	schema, _, ok := strings.Cut(table, ".")
	if !ok {
		return ""
	}
	return schema
}

// ident quotes one identifier.
func ident(name string) string {
	return pgx.Identifier{name}.Sanitize()
}
