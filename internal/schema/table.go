package schema

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// This file chooses a managed table's clauses for the dialect, by the
// rules of package dialect. The templates in package migrations only print
// the clauses chosen here.
//
//	clause             PostgreSQL                          Greenplum
//	primary key        PRIMARY KEY (key)                   heap: PRIMARY KEY (key); append-optimized: none, a btree key index
//	WITH               -                                   appendoptimized=..., orientation, compresstype, compresslevel
//	spreading rows     PARTITION BY HASH (key), N parts    DISTRIBUTED BY (key)
//	compression        ALTER COLUMN ... SET COMPRESSION    compresstype in WITH (append-optimized only)
//	GIN index          USING gin (value jsonb_path_ops)    the same
//	bookkeeping table  -                                   DISTRIBUTED BY (version, scope)

// tableData describes one managed namespace's table for the
// 0002_namespace_table templates. Every identifier is already quoted;
// an empty field means the clause is left out.
type tableData struct {
	Namespace string
	Dialect   string
	// Table is the quoted, possibly schema-qualified table name.
	Table string
	// Notes are SQL comment lines that say what was not applied and why.
	Notes   []string
	Columns []columnData
	// PrimaryKey is the quoted key column, or empty for no primary key.
	PrimaryKey string
	// With is the text inside WITH (...).
	With string
	// PartitionBy is the quoted key column for PARTITION BY HASH.
	PartitionBy string
	Partitions  []partitionData
	// DistributedBy is the quoted key column for DISTRIBUTED BY.
	DistributedBy string
	// Compression is the TOAST method set on CompressColumns.
	Compression     string
	CompressColumns []string
	// KeyIndex is a plain btree index on the key, for tables without a
	// primary key.
	KeyIndex *indexData
	// GINIndex is a jsonb_path_ops GIN index on the packed value.
	GINIndex *indexData

	// The fields of 0005_namespace_freshness.
	// VersionColumn is the quoted version column; VersionColumnLiteral and
	// KeyColumnLiteral are the version and key columns' names as SQL
	// string literals, NamespaceLiteral the namespace's.
	VersionColumn        string
	VersionColumnLiteral string
	KeyColumnLiteral     string
	NamespaceLiteral     string
	// VersionIndex is the quoted name of the index on the version column;
	// VersionIndexQualified is it with the table's schema.
	VersionIndex          string
	VersionIndexQualified string
	// triggerBase starts the names of the namespace's triggers.
	triggerBase string

	// The fields of 0006_namespace_expiry.
	// ExpiresColumn is the quoted expiry column (Namespace.ExpiresColumn,
	// or DefaultExpiresColumn when it is empty); ExpiresIndex is the quoted
	// name of its index, and ExpiresIndexQualified is it with the table's
	// schema.
	ExpiresColumn         string
	ExpiresIndex          string
	ExpiresIndexQualified string
}

// DefaultExpiresColumn is the expiry column of a managed namespace that
// names none.
const DefaultExpiresColumn = "expires_at"

// Trigger returns the quoted name of the namespace's trigger for what,
// such as "widgets_warmcache_deletes".
func (t tableData) Trigger(what string) string {
	return quote(t.triggerBase + "_warmcache_" + what)
}

type columnData struct {
	Name string
	Type string
}

type partitionData struct {
	Name      string
	Modulus   int
	Remainder int
}

type indexData struct {
	Name   string
	Column string
}

// tableFor validates a managed namespace for the dialect and chooses its
// table's clauses. The error joins one error per bad field, each naming the
// field as the namespaces file does (such as storage.orientation).
func tableFor(d dialect.Dialect, tb Table) (tableData, error) {
	t, errs := commonTable(tb.Namespace, tb.Storage)
	var dialectErrs []error
	switch d {
	case dialect.Postgres:
		dialectErrs = postgresTable(&t, tb.Namespace, tb.Storage)
	case dialect.Greenplum:
		dialectErrs = greenplumTable(&t, tb.Namespace, tb.Storage)
	default:
		return tableData{}, fmt.Errorf("unknown dialect %v", d)
	}
	if err := errors.Join(append(errs, dialectErrs...)...); err != nil {
		return tableData{}, err
	}
	return t, nil
}

// postgresTable fills the PostgreSQL clauses: hash partitions on the key,
// each with its primary key index, and TOAST compression.
func postgresTable(t *tableData, ns *warmcache.Namespace, st Storage) []error {
	var errs []error
	key := quote(ns.KeyColumn)
	t.PrimaryKey = key
	t.PartitionBy = key
	n := st.Partitions
	if n == 0 {
		n = dialect.DefaultPartitions
	}
	schemaName, base := splitTable(ns.Table)
	for i := range n {
		name := base + "_p" + strconv.Itoa(i)
		if len(name) > dialect.MaxIdentifierLen {
			errs = append(errs, fmt.Errorf("table: partition name %q would be longer than %d bytes; choose a shorter table name", name, dialect.MaxIdentifierLen))
			break
		}
		t.Partitions = append(t.Partitions, partitionData{Name: sanitize(schemaName, name), Modulus: n, Remainder: i})
	}

	switch c := compression(st); {
	case c == dialect.CompressNone:
	case dialect.TOAST(c):
		t.Compression = c
	default:
		t.Compression = dialect.CompressLZ4
		t.note("storage.compression %s does not exist on PostgreSQL: TOAST lz4 is used instead.", c)
	}
	if t.Compression != "" {
		t.CompressColumns = toastable(ns)
		if len(t.CompressColumns) == 0 {
			t.note("storage.compression %s not applied: no column is stored out of line.", t.Compression)
			t.Compression = ""
		}
	}
	if st.CompressLevel != 0 {
		t.note("storage.compress_level %d not applied: PostgreSQL's TOAST has no level.", st.CompressLevel)
	}
	if st.AppendOptimized {
		t.note("storage.appendoptimized not applied: PostgreSQL has only heap tables.")
	}
	if st.Orientation != "" && st.Orientation != "row" {
		t.note("storage.orientation %s not applied: PostgreSQL tables are row-oriented.", st.Orientation)
	}
	if st.GINIndex && ns.Layout == warmcache.LayoutPacked {
		t.GINIndex = index(&errs, base+"_"+ns.ValueColumn+"_gin", ns.ValueColumn)
	}
	return errs
}

// greenplumTable fills the Greenplum clauses: distribution by the key, heap
// with a primary key by default, or append-optimized with block compression
// and a plain key index (append-optimized tables take no ON CONFLICT and,
// before Greenplum 7, no unique index).
func greenplumTable(t *tableData, ns *warmcache.Namespace, st Storage) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	key := quote(ns.KeyColumn)
	t.DistributedBy = key
	_, base := splitTable(ns.Table)
	if st.Partitions != 0 {
		t.note("storage.partitions not applied: Greenplum spreads rows over segments by the distribution key.")
	}
	orientation := st.Orientation
	if orientation == "" {
		orientation = "row"
	}
	c := compression(st)

	if !st.AppendOptimized {
		t.With = "appendoptimized=false"
		t.PrimaryKey = key
		switch {
		case c == dialect.CompressNone:
		case dialect.TOAST(c):
			t.note("storage.compression %s not applied: heap tables on Greenplum are not block-compressed; set storage.appendoptimized for zstd or zlib.", c)
		default:
			bad("storage.compression: %s needs storage.appendoptimized on Greenplum", c)
		}
		if orientation != "row" {
			bad("storage.orientation: column needs storage.appendoptimized on Greenplum")
		}
		if st.CompressLevel != 0 {
			bad("storage.compress_level: needs storage.appendoptimized on Greenplum")
		}
	} else {
		opts := []string{"appendoptimized=true", "orientation=" + orientation}
		switch {
		case dialect.TOAST(c):
			t.note("storage.compression %s does not exist for append-optimized tables: zstd is used instead.", c)
			c = dialect.CompressZstd
		case c == dialect.CompressRLE:
			if orientation != "column" {
				bad("storage.compression: rle_type needs storage.orientation column")
			}
		}
		switch {
		case c == dialect.CompressNone:
			if st.CompressLevel != 0 {
				bad("storage.compress_level: needs storage.compression")
			}
		case dialect.Block(c):
			level, err := dialect.CompressLevel(c, st.CompressLevel)
			if err != nil {
				errs = append(errs, err)
			}
			opts = append(opts, "compresstype="+c, "compresslevel="+strconv.Itoa(level))
		}
		t.With = strings.Join(opts, ", ")
		t.KeyIndex = index(&errs, base+"_"+ns.KeyColumn+"_idx", ns.KeyColumn)
	}
	if st.GINIndex && ns.Layout == warmcache.LayoutPacked {
		t.GINIndex = index(&errs, base+"_"+ns.ValueColumn+"_gin", ns.ValueColumn)
	}
	return errs
}

// index describes an index named name on column. Index names are not
// schema-qualified: an index lives in its table's schema.
func index(errs *[]error, name, column string) *indexData {
	if len(name) > dialect.MaxIdentifierLen {
		*errs = append(*errs, fmt.Errorf("table: index name %q would be longer than %d bytes; choose shorter names", name, dialect.MaxIdentifierLen))
	}
	return &indexData{Name: quote(name), Column: quote(column)}
}

// bookkeepingDDL creates the table that records applied migrations. On
// Greenplum it is distributed by its whole primary key, which every
// Greenplum version accepts (a unique key must contain the distribution
// key), and a row's insert or delete touches one segment with a one-phase
// commit; DISTRIBUTED REPLICATED would write every row on all segments.
func bookkeepingDDL(d dialect.Dialect) string {
	ddl := `CREATE TABLE IF NOT EXISTS warmcache_schema_migrations (
    version    integer     NOT NULL,
    scope      text        NOT NULL,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (version, scope)
)`
	if clause := d.DistributedBy("version", "scope"); clause != "" {
		ddl += "\n" + clause
	}
	return ddl
}

// commonTable validates what both dialects share and fills the columns.
func commonTable(ns *warmcache.Namespace, st Storage) (tableData, []error) {
	c := &tableCheck{}
	t := tableData{Namespace: ns.Name}
	if strings.IndexFunc(ns.Name, unicode.IsControl) >= 0 {
		c.bad("name: must not contain control characters")
	}
	c.names(&t, ns)
	c.columns(&t, ns, st)
	c.storage(st)
	return t, c.errs
}

// tableCheck collects what is wrong with a table, in the order it is
// found, and which field each column name was given by.
type tableCheck struct {
	errs []error
	seen map[string]string
}

// bad records a problem; format and args are as for fmt.Errorf.
func (c *tableCheck) bad(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// ident records a problem when v, the value of field, is empty or too long
// for an identifier.
func (c *tableCheck) ident(field, v string) {
	switch {
	case v == "":
		c.bad("%s: must not be empty", field)
	case len(v) > dialect.MaxIdentifierLen:
		c.bad("%s: must be at most %d bytes, got %q", field, dialect.MaxIdentifierLen, v)
	}
}

// unique records a problem when column name was already given by another
// field, and remembers that field gives it.
func (c *tableCheck) unique(field, name string) {
	if other, ok := c.seen[name]; ok && name != "" {
		c.bad("%s: %q is also %s", field, name, other)
	}
	c.seen[name] = field
}

// names checks ns's table name and the names derived from it, the version
// index's and the truncate trigger's, and fills them and the quoted
// literals of t.
func (c *tableCheck) names(t *tableData, ns *warmcache.Namespace) {
	schemaName, base := splitTable(ns.Table)
	if strings.Count(ns.Table, ".") > 1 || (strings.Contains(ns.Table, ".") && schemaName == "") {
		c.bad("table: must be a table name, optionally schema-qualified, got %q", ns.Table)
	} else {
		c.ident("table", base)
		if schemaName != "" {
			c.ident("table", schemaName)
		}
	}
	t.Table = sanitize(schemaName, base)
	t.VersionColumn = quote(ns.VersionColumn)
	t.VersionColumnLiteral = literal(ns.VersionColumn)
	t.KeyColumnLiteral = literal(ns.KeyColumn)
	t.NamespaceLiteral = literal(ns.Name)
	versionIndex := base + "_" + ns.VersionColumn + "_idx"
	if len(versionIndex) > dialect.MaxIdentifierLen {
		c.bad("table: index name %q would be longer than %d bytes; choose shorter names", versionIndex, dialect.MaxIdentifierLen)
	}
	if len(base)+len("_warmcache_truncate") > dialect.MaxIdentifierLen {
		c.bad("table: trigger name %q would be longer than %d bytes; choose a shorter table name", base+"_warmcache_truncate", dialect.MaxIdentifierLen)
	}
	t.VersionIndex = quote(versionIndex)
	t.VersionIndexQualified = sanitize(schemaName, versionIndex)
	t.triggerBase = base
	expires := ns.ExpiresColumn
	if expires == "" {
		expires = DefaultExpiresColumn
	}
	c.ident("expires_column", expires)
	expiresIndex := base + "_" + expires + "_idx"
	if len(expiresIndex) > dialect.MaxIdentifierLen {
		c.bad("table: index name %q would be longer than %d bytes; choose shorter names", expiresIndex, dialect.MaxIdentifierLen)
	}
	t.ExpiresColumn = quote(expires)
	t.ExpiresIndex = quote(expiresIndex)
	t.ExpiresIndexQualified = sanitize(schemaName, expiresIndex)
}

// columns checks ns's key, value and version columns and fills t's
// columns in that order; no two may share a name.
func (c *tableCheck) columns(t *tableData, ns *warmcache.Namespace, st Storage) {
	c.ident("key.column", ns.KeyColumn)
	c.ident("version_column", ns.VersionColumn)
	switch ns.KeyType {
	case warmcache.KeyBigint, warmcache.KeyText:
		t.Columns = append(t.Columns, columnData{Name: quote(ns.KeyColumn), Type: string(ns.KeyType)})
	default:
		c.bad("key.type: must be bigint or text, got %q", ns.KeyType)
	}
	c.seen = map[string]string{ns.KeyColumn: "key.column"}
	c.valueColumns(t, ns, st)
	c.unique("version_column", ns.VersionColumn)
	t.Columns = append(t.Columns, columnData{Name: quote(ns.VersionColumn), Type: "bigint"})
}

// valueColumns checks ns's value layout, one jsonb column, a list of
// typed columns or one bytea column, and fills t's value columns. A GIN
// index needs the packed layout.
func (c *tableCheck) valueColumns(t *tableData, ns *warmcache.Namespace, st Storage) {
	switch ns.Layout {
	case warmcache.LayoutPacked:
		c.ident("value.column", ns.ValueColumn)
		c.unique("value.column", ns.ValueColumn)
		t.Columns = append(t.Columns, columnData{Name: quote(ns.ValueColumn), Type: "jsonb"})
	case warmcache.LayoutBytes:
		c.ident("value.column", ns.ValueColumn)
		c.unique("value.column", ns.ValueColumn)
		t.Columns = append(t.Columns, columnData{Name: quote(ns.ValueColumn), Type: "bytea"})
		if st.GINIndex {
			c.bad("storage.gin_index: needs value.layout packed; a bytes namespace has no JSON to index")
		}
	case warmcache.LayoutColumns:
		if len(ns.Columns) == 0 {
			c.bad("value.columns: layout columns needs at least one column")
		}
		for i, col := range ns.Columns {
			field := fmt.Sprintf("value.columns[%d]", i)
			c.ident(field+".name", col.Name)
			c.unique(field+".name", col.Name)
			typ, err := columnType(col.Type)
			if err != nil {
				c.bad("%s.type: %v", field, err)
			}
			t.Columns = append(t.Columns, columnData{Name: quote(col.Name), Type: typ})
		}
		if st.GINIndex {
			c.bad("storage.gin_index: needs value.layout packed")
		}
	default:
		c.bad("value.layout: must be packed, columns or bytes, got %q", ns.Layout)
	}
}

// storage checks the storage options both dialects share.
func (c *tableCheck) storage(st Storage) {
	if st.Partitions < 0 || st.Partitions > dialect.MaxPartitions {
		c.bad("storage.partitions: must be between 1 and %d, got %d", dialect.MaxPartitions, st.Partitions)
	}
	if !dialect.ValidCompression(compression(st)) {
		c.bad("storage.compression: must be one of none, lz4, pglz, zstd, zlib or rle_type, got %q", st.Compression)
	}
	if st.CompressLevel < 0 {
		c.bad("storage.compress_level: must not be negative, got %d", st.CompressLevel)
	}
	switch st.Orientation {
	case "", "row", "column":
	default:
		c.bad("storage.orientation: must be row or column, got %q", st.Orientation)
	}
}

// columnType checks a column type of the columns layout against the types
// warmcache can store and returns it in canonical form. Only these types are
// accepted, so configuration cannot carry arbitrary SQL into the DDL.
func columnType(raw string) (string, error) {
	typ := strings.ToLower(strings.Join(strings.Fields(raw), " "))
	switch typ {
	case "text", "bigint", "integer", "smallint", "numeric", "boolean", "double precision",
		"real", "date", "timestamptz", "timestamp", "jsonb", "json", "uuid":
		return typ, nil
	}
	name, args, ok := strings.Cut(strings.ReplaceAll(typ, " ", ""), "(")
	args, closed := strings.CutSuffix(args, ")")
	if ok && closed {
		switch name {
		case "varchar":
			if n, err := strconv.Atoi(args); err == nil && n >= 1 && n <= 10485760 {
				return fmt.Sprintf("varchar(%d)", n), nil
			}
		case "numeric":
			ps, ss, hasScale := strings.Cut(args, ",")
			p, errP := strconv.Atoi(ps)
			s, errS := 0, error(nil)
			if hasScale {
				s, errS = strconv.Atoi(ss)
			}
			if errP == nil && errS == nil && p >= 1 && p <= 1000 && s >= 0 && s <= p {
				if hasScale {
					return fmt.Sprintf("numeric(%d,%d)", p, s), nil
				}
				return fmt.Sprintf("numeric(%d)", p), nil
			}
		}
	}
	return "", fmt.Errorf("must be one of text, varchar(n), bigint, integer, smallint, numeric, numeric(p,s), "+
		"boolean, double precision, real, date, timestamptz, timestamp, jsonb, json or uuid, got %q", raw)
}

// toastable returns the quoted columns of the namespace that TOAST may
// compress: the packed or bytes value, or the variable-length typed
// columns.
func toastable(ns *warmcache.Namespace) []string {
	if ns.Layout == warmcache.LayoutPacked || ns.Layout == warmcache.LayoutBytes {
		return []string{quote(ns.ValueColumn)}
	}
	var cols []string
	for _, c := range ns.Columns {
		typ, err := columnType(c.Type)
		if err != nil {
			continue
		}
		if typ == "text" || typ == "jsonb" || typ == "json" || strings.HasPrefix(typ, "varchar") || strings.HasPrefix(typ, "numeric") {
			cols = append(cols, quote(c.Name))
		}
	}
	return cols
}

// compression returns the requested compression, "none" when empty.
func compression(st Storage) string {
	if st.Compression == "" {
		return dialect.CompressNone
	}
	return st.Compression
}

// note adds a comment line to the table's DDL.
func (t *tableData) note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

// splitTable splits "schema.table" into its parts; the schema is empty for
// an unqualified name.
func splitTable(table string) (schemaName, name string) {
	if s, n, ok := strings.Cut(table, "."); ok {
		return s, n
	}
	return "", table
}

// sanitize quotes an identifier whose parts may be empty (left out).
func sanitize(parts ...string) string {
	var id pgx.Identifier
	for _, p := range parts {
		if p != "" {
			id = append(id, p)
		}
	}
	return id.Sanitize()
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// quote quotes one identifier.
func quote(name string) string { return pgx.Identifier{name}.Sanitize() }
