package advise

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// ValueType is how a candidate stores a packed value.
type ValueType string

// The value types a candidate may use.
const (
	// ValueJSONB is the default: parsed, and indexable for _query.
	ValueJSONB ValueType = "jsonb"
	// ValueJSON keeps the text as it came: no parse on read, no index.
	ValueJSON ValueType = "json"
	// ValueZstd is bytea compressed with a zstd dictionary trained on
	// the namespace's own values. The warehouse cannot look inside it, so
	// it gives up _query.
	ValueZstd ValueType = "bytea+zstd-dict"
	// ValueBytea is the bytes layout's value: opaque bytes as written.
	ValueBytea ValueType = "bytea"
)

// QuerySupport says how a candidate answers _query.
type QuerySupport string

// The levels of _query support.
const (
	QueryIndexed QuerySupport = "GIN index"
	QueryScan    QuerySupport = "table scan"
	QueryNone    QuerySupport = "none"
)

// Candidate is one storage to build and measure.
type Candidate struct {
	// Name says what the candidate is, such as "packed jsonb, TOAST lz4".
	Name string
	// Layout and Columns are the candidate's layout; Columns only for
	// LayoutColumns.
	Layout  warmcache.Layout
	Columns []warmcache.Column
	// Value is the packed value's type.
	Value ValueType
	// Storage holds the options migrate takes for this candidate.
	Storage schema.Storage
	// Query is how _query works on it.
	Query QuerySupport
	// Migratable says that migrate can create this storage (a namespace
	// option); the others need a table of the user's own.
	Migratable bool
}

// Candidates returns the storages to compare for table t's namespace on
// dialect d. columns are the typed columns inferred from the data (nil when
// the values are not objects with a fixed set of fields), or the
// namespace's Columns for a columns namespace. Every dialect gets packed jsonb (with the namespace's GIN index
// choice), json text and bytea with a zstd dictionary, and, when columns
// are known, the columns layout; PostgreSQL adds each TOAST compression
// (pglz, lz4); Greenplum adds append-optimized tables, row and column
// oriented, with zstd and zlib at low and medium levels and rle_type on
// columns. A bytes namespace (warmcache.LayoutBytes) holds no JSON: its
// candidates are the bytes layout in the same storages, and bytea with a
// zstd dictionary, none of them with _query. Candidates needs no database.
func Candidates(d dialect.Dialect, t schema.Table, columns []warmcache.Column) []Candidate {
	if t.Namespace.Layout == warmcache.LayoutBytes {
		return bytesCandidates(d, t)
	}
	gin := t.Namespace.Layout == warmcache.LayoutPacked && t.Storage.GINIndex
	partitions := t.Storage.Partitions
	if partitions == 0 {
		partitions = dialect.DefaultPartitions
	}
	packedQuery := QueryScan
	if gin {
		packedQuery = QueryIndexed
	}
	var out []Candidate
	packed := func(name string, st schema.Storage) {
		st.GINIndex = gin
		out = append(out, Candidate{Name: name, Layout: warmcache.LayoutPacked, Value: ValueJSONB, Storage: st, Query: packedQuery, Migratable: true})
	}
	cols := func(name string, st schema.Storage) {
		if len(columns) == 0 {
			return
		}
		out = append(out, Candidate{Name: name, Layout: warmcache.LayoutColumns, Columns: columns, Value: ValueJSONB, Storage: st, Query: QueryScan, Migratable: true})
	}
	other := func(v ValueType, q QuerySupport, st schema.Storage) {
		out = append(out, Candidate{Name: "packed " + string(v), Layout: warmcache.LayoutPacked, Value: v, Storage: st, Query: q})
	}
	switch d {
	case dialect.Greenplum:
		packed("packed jsonb, heap", schema.Storage{})
		for _, o := range []string{"row", "column"} {
			for _, c := range []struct {
				algo  string
				level int
			}{{dialect.CompressZstd, 1}, {dialect.CompressZstd, 5}, {dialect.CompressZlib, 1}, {dialect.CompressZlib, 5}} {
				packed(fmt.Sprintf("packed jsonb, AO %s %s:%d", o, c.algo, c.level),
					schema.Storage{AppendOptimized: true, Orientation: o, Compression: c.algo, CompressLevel: c.level})
			}
		}
		cols("columns, heap", schema.Storage{})
		cols("columns, AO column zstd:5", schema.Storage{AppendOptimized: true, Orientation: "column", Compression: dialect.CompressZstd, CompressLevel: 5})
		cols("columns, AO column rle_type:2", schema.Storage{AppendOptimized: true, Orientation: "column", Compression: dialect.CompressRLE, CompressLevel: 2})
		other(ValueJSON, QueryScan, schema.Storage{})
		other(ValueZstd, QueryNone, schema.Storage{})
	default:
		for _, c := range []string{dialect.CompressNone, dialect.CompressPGLZ, dialect.CompressLZ4} {
			packed("packed jsonb, TOAST "+c, schema.Storage{Partitions: partitions, Compression: c})
		}
		cols("columns, TOAST none", schema.Storage{Partitions: partitions, Compression: dialect.CompressNone})
		cols("columns, TOAST lz4", schema.Storage{Partitions: partitions, Compression: dialect.CompressLZ4})
		other(ValueJSON, QueryScan, schema.Storage{Partitions: partitions})
		other(ValueZstd, QueryNone, schema.Storage{Partitions: partitions})
	}
	return out
}

// bytesCandidates returns the candidates of a bytes namespace: the bytes
// layout in each storage of its dialect, as Candidates lists them for
// packed jsonb, and bytea with a zstd dictionary.
func bytesCandidates(d dialect.Dialect, t schema.Table) []Candidate {
	partitions := t.Storage.Partitions
	if partitions == 0 {
		partitions = dialect.DefaultPartitions
	}
	var out []Candidate
	add := func(name string, st schema.Storage) {
		out = append(out, Candidate{Name: name, Layout: warmcache.LayoutBytes, Value: ValueBytea, Storage: st, Query: QueryNone, Migratable: true})
	}
	switch d {
	case dialect.Greenplum:
		add("bytes, heap", schema.Storage{})
		for _, o := range []string{"row", "column"} {
			for _, c := range []struct {
				algo  string
				level int
			}{{dialect.CompressZstd, 1}, {dialect.CompressZstd, 5}, {dialect.CompressZlib, 1}, {dialect.CompressZlib, 5}} {
				add(fmt.Sprintf("bytes, AO %s %s:%d", o, c.algo, c.level),
					schema.Storage{AppendOptimized: true, Orientation: o, Compression: c.algo, CompressLevel: c.level})
			}
		}
		out = append(out, Candidate{Name: "packed " + string(ValueZstd), Layout: warmcache.LayoutPacked, Value: ValueZstd, Query: QueryNone})
	default:
		for _, c := range []string{dialect.CompressNone, dialect.CompressPGLZ, dialect.CompressLZ4} {
			add("bytes, TOAST "+c, schema.Storage{Partitions: partitions, Compression: c})
		}
		out = append(out, Candidate{Name: "packed " + string(ValueZstd), Layout: warmcache.LayoutPacked, Value: ValueZstd,
			Storage: schema.Storage{Partitions: partitions}, Query: QueryNone})
	}
	return out
}

// Current returns the index of the candidate that matches table t's own
// layout and storage, or -1.
func Current(d dialect.Dialect, t schema.Table, cands []Candidate) int {
	want := t.Storage
	value := ValueJSONB
	if t.Namespace.Layout == warmcache.LayoutBytes {
		value = ValueBytea
	}
	for i, c := range cands {
		if c.Layout != t.Namespace.Layout || c.Value != value {
			continue
		}
		got := c.Storage
		if d == dialect.Greenplum {
			if got.AppendOptimized != want.AppendOptimized {
				continue
			}
			if !got.AppendOptimized || (orRow(got.Orientation) == orRow(want.Orientation) &&
				orNone(got.Compression) == orNone(want.Compression) && got.CompressLevel == want.CompressLevel) {
				return i
			}
			continue
		}
		if orNone(got.Compression) == orNone(want.Compression) {
			return i
		}
	}
	return -1
}

func orNone(s string) string {
	if s == "" {
		return dialect.CompressNone
	}
	return s
}

func orRow(s string) string {
	if s == "" {
		return "row"
	}
	return s
}

var columnName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

var datePattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

// InferColumns returns typed columns for values that are all JSON objects
// with at most 50 distinct top-level fields, each named like an SQL
// identifier and none named like reserved (the key and version columns).
// A field's type is bigint when every value is an integer, numeric when a
// number, boolean, date when every value is a YYYY-MM-DD string, text when a
// string, and jsonb otherwise. Columns come in the order the fields first
// appear. It returns nil when the values do not fit.
func InferColumns(values [][]byte, reserved ...string) []warmcache.Column {
	type field struct {
		name  string
		kinds map[string]bool
	}
	var fields []*field
	byName := map[string]*field{}
	for _, v := range values {
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil || obj == nil {
			return nil
		}
		// Field order is that of the first value that has each field.
		var names []string
		for name := range obj {
			names = append(names, name)
		}
		slices.SortFunc(names, func(a, b string) int { return bytes.Index(v, []byte(`"`+a+`"`)) - bytes.Index(v, []byte(`"`+b+`"`)) })
		for _, name := range names {
			f := byName[name]
			if f == nil {
				if !columnName.MatchString(name) || slices.Contains(reserved, name) || len(fields) == 50 {
					return nil
				}
				f = &field{name: name, kinds: map[string]bool{}}
				byName[name] = f
				fields = append(fields, f)
			}
			f.kinds[kindOf(obj[name])] = true
		}
	}
	if len(fields) == 0 {
		return nil
	}
	out := make([]warmcache.Column, len(fields))
	for i, f := range fields {
		delete(f.kinds, "null")
		out[i] = warmcache.Column{Name: f.name, Type: typeOf(f.kinds)}
	}
	return out
}

func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "int"
		}
		return "number"
	case string:
		if datePattern.MatchString(x) {
			return "date"
		}
		return "string"
	default:
		return "json"
	}
}

func typeOf(kinds map[string]bool) string {
	only := func(ks ...string) bool {
		if len(kinds) == 0 {
			return false
		}
		for k := range kinds {
			if !slices.Contains(ks, k) {
				return false
			}
		}
		return true
	}
	switch {
	case only("int"):
		return "bigint"
	case only("int", "number"):
		return "numeric"
	case only("bool"):
		return "boolean"
	case only("date"):
		return "date"
	case only("date", "string"):
		return "text"
	default:
		return "jsonb"
	}
}
