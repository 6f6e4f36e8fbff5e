package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// DefaultNamespaces returns the namespaces served when no namespaces file
// is given, and their tables, both managed by migrate:
//   - widgets, a hot bigint-keyed packed JSONB table in heap storage, which
//     the local stack fills with sample data, kept 1s in the near cache when
//     the near cache is on (see Config.NearCacheBytes);
//   - widgets_archive, a cold table of the same shape that Greenplum keeps
//     append-optimized and zstd-compressed (PostgreSQL has no such storage
//     and keeps it as a heap).
func DefaultNamespaces() ([]*warmcache.Namespace, []schema.Table) {
	widgets := &warmcache.Namespace{
		Name:          "widgets",
		Table:         "widgets",
		KeyColumn:     "key",
		KeyType:       warmcache.KeyBigint,
		Layout:        warmcache.LayoutPacked,
		ValueColumn:   "value",
		VersionColumn: "version",
		ExpiresColumn: schema.DefaultExpiresColumn,
		TTL:           warmcache.DefaultTTL,
		NegativeTTL:   warmcache.DefaultNegativeTTL,
		MaxStale:      warmcache.DefaultMaxStale,
		NearTTL:       time.Second,
		TTLJitter:     warmcache.DefaultTTLJitter,
		Writable:      true,
	}
	archive := *widgets
	archive.Name, archive.Table = "widgets_archive", "widgets_archive"
	archive.TTL = time.Minute
	archive.NearTTL = 0
	return []*warmcache.Namespace{widgets, &archive}, []schema.Table{
		{Namespace: widgets, Managed: true,
			Storage: schema.Storage{Partitions: 8, Compression: "lz4", GINIndex: true}},
		{Namespace: &archive, Managed: true,
			Storage: schema.Storage{Partitions: 8, Compression: "zstd", CompressLevel: 5,
				AppendOptimized: true, Orientation: "row", GINIndex: true}},
	}
}

// The YAML shape of a namespaces file. Unknown fields are refused.
type fileDoc struct {
	Namespaces []nsDoc `yaml:"namespaces"`
}

type nsDoc struct {
	Name          string         `yaml:"name"`
	Table         string         `yaml:"table"`
	Key           keyDoc         `yaml:"key"`
	Value         valueDoc       `yaml:"value"`
	VersionColumn string         `yaml:"version_column"`
	ExpiresColumn string         `yaml:"expires_column"`
	TTL           string         `yaml:"ttl"`
	NegativeTTL   string         `yaml:"negative_ttl"`
	MaxStale      string         `yaml:"max_stale"`
	NearTTL       string         `yaml:"near_ttl"`
	TTLJitter     *float64       `yaml:"ttl_jitter"`
	Writable      bool           `yaml:"writable"`
	Managed       bool           `yaml:"managed"`
	MaxKeyBytes   int            `yaml:"max_key_bytes"`
	Codec         string         `yaml:"codec"`
	Storage       schema.Storage `yaml:"storage"`
}

type keyDoc struct {
	Column string `yaml:"column"`
	Type   string `yaml:"type"`
}

type valueDoc struct {
	Layout      string      `yaml:"layout"`
	Column      string      `yaml:"column"`
	Columns     []columnDoc `yaml:"columns"`
	ContentType string      `yaml:"content_type"`
}

type columnDoc struct {
	Name string `yaml:"name"`
	Type string `yaml:"type"`
}

var (
	namespaceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	identifier    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	tableName     = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]{0,62}\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$`)
)

// LoadNamespacesFile reads and validates a namespaces file, as
// ParseNamespaces does.
func LoadNamespacesFile(path string) ([]*warmcache.Namespace, []schema.Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: namespaces file: %w", err)
	}
	nss, tables, err := ParseNamespaces(b)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return nss, tables, nil
}

// ParseNamespaces decodes and validates a namespaces document. It returns
// the namespaces the service serves and, one for each in the same order,
// their tables as migrate sees them (managed, storage). Every error names
// the namespace and the field, such as
// `namespaces[0] "widgets": key.type: must be bigint or text, got "int"`.
func ParseNamespaces(b []byte) ([]*warmcache.Namespace, []schema.Table, error) {
	var doc fileDoc
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	if len(doc.Namespaces) == 0 {
		return nil, nil, errors.New("namespaces: at least one namespace is needed")
	}
	var out []*warmcache.Namespace
	var tables []schema.Table
	var errs []error
	seen := map[string]bool{}
	for i, d := range doc.Namespaces {
		ns, nsErrs := d.namespace()
		if seen[d.Name] {
			nsErrs = append(nsErrs, errors.New("name: declared twice"))
		}
		seen[d.Name] = true
		for _, e := range nsErrs {
			errs = append(errs, fmt.Errorf("namespaces[%d] %q: %w", i, d.Name, e))
		}
		out = append(out, ns)
		tables = append(tables, d.table(ns))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return out, tables, nil
}

// table returns the table of namespace ns as d declares it. Its storage
// options are checked by namespace, and by schema for the dialect.
func (d nsDoc) table(ns *warmcache.Namespace) schema.Table {
	return schema.Table{
		Namespace: ns,
		Managed:   d.Managed,
		Storage:   d.Storage,
	}
}

// namespace returns the namespace d declares, with the defaults filled
// in, and one error for each bad field, the storage options' included.
func (d nsDoc) namespace() (*warmcache.Namespace, []error) {
	var p problems
	ns := &warmcache.Namespace{
		Name:          d.Name,
		Table:         d.Table,
		KeyColumn:     d.Key.Column,
		KeyType:       warmcache.KeyType(d.Key.Type),
		Layout:        warmcache.Layout(d.Value.Layout),
		ValueColumn:   d.Value.Column,
		ContentType:   d.Value.ContentType,
		VersionColumn: d.VersionColumn,
		ExpiresColumn: d.ExpiresColumn,
		TTL:           p.duration("ttl", d.TTL, warmcache.DefaultTTL),
		NegativeTTL:   p.duration("negative_ttl", d.NegativeTTL, warmcache.DefaultNegativeTTL),
		MaxStale:      p.duration("max_stale", d.MaxStale, warmcache.DefaultMaxStale),
		NearTTL:       nearTTL(d.NearTTL, p.add),
		TTLJitter:     warmcache.DefaultTTLJitter,
		Writable:      d.Writable,
		MaxKeyBytes:   d.MaxKeyBytes,
		Codec:         warmcache.Codec(d.Codec),
	}
	d.checkNames(ns, &p)
	d.checkValue(ns, &p)
	d.checkLimits(ns, &p)
	return ns, p
}

// problems collects what is wrong with a namespace, in the order it is
// found.
type problems []error

// add records a problem; format and args are as for fmt.Errorf.
func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Errorf(format, args...))
}

// ident records a problem when v, the value of field, is not a plain SQL
// identifier.
func (p *problems) ident(field, v string) {
	if !identifier.MatchString(v) {
		p.add("%s: must be a plain SQL identifier (letters, digits, _), got %q", field, v)
	}
}

// duration parses v, the value of field: empty means def; otherwise a
// positive duration, or a problem is recorded.
func (p *problems) duration(field, v string, def time.Duration) time.Duration {
	if v == "" {
		return def
	}
	t, err := time.ParseDuration(v)
	if err != nil || t <= 0 {
		p.add("%s: must be a positive duration such as 5m, got %q", field, v)
	}
	return t
}

// checkNames checks the namespace's name, and fills in and checks its
// table, key column, key type and version column.
func (d nsDoc) checkNames(ns *warmcache.Namespace, p *problems) {
	if !namespaceName.MatchString(d.Name) {
		p.add("name: must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit, got %q", d.Name)
	}
	if d.Table == "" {
		ns.Table = d.Name
	}
	if !tableName.MatchString(ns.Table) {
		p.add("table: must be a plain SQL identifier, optionally schema-qualified, got %q", ns.Table)
	}
	if ns.KeyColumn == "" {
		ns.KeyColumn = "key"
	}
	p.ident("key.column", ns.KeyColumn)
	switch ns.KeyType {
	case warmcache.KeyBigint, warmcache.KeyText:
	case "":
		ns.KeyType = warmcache.KeyBigint
	default:
		p.add("key.type: must be bigint or text, got %q", d.Key.Type)
	}
	if ns.VersionColumn == "" {
		ns.VersionColumn = "version"
	}
	p.ident("version_column", ns.VersionColumn)
	// A managed table has an expiry column, which its migrations add; a
	// table made elsewhere has one only when it names it.
	if ns.ExpiresColumn == "" && d.Managed {
		ns.ExpiresColumn = schema.DefaultExpiresColumn
	}
	if ns.ExpiresColumn != "" {
		p.ident("expires_column", ns.ExpiresColumn)
	}
}

// checkValue fills in and checks the namespace's value layout: one packed
// value column, a list of typed columns, or one column of opaque bytes, and
// its content type: any media type for bytes (application/octet-stream
// when empty), application/json for the JSON layouts.
func (d nsDoc) checkValue(ns *warmcache.Namespace, p *problems) {
	d.checkContentType(ns, p)
	switch ns.Layout {
	case warmcache.LayoutPacked, "", warmcache.LayoutBytes:
		if ns.Layout == "" {
			ns.Layout = warmcache.LayoutPacked
		}
		if ns.ValueColumn == "" {
			ns.ValueColumn = "value"
		}
		p.ident("value.column", ns.ValueColumn)
		if len(d.Value.Columns) > 0 {
			p.add("value.columns: only for layout columns")
		}
	case warmcache.LayoutColumns:
		if d.Value.Column != "" {
			p.add("value.column: only for layout packed; list value.columns instead")
		}
		if len(d.Value.Columns) == 0 {
			p.add("value.columns: layout columns needs at least one column")
		}
		for i, c := range d.Value.Columns {
			p.ident(fmt.Sprintf("value.columns[%d].name", i), c.Name)
			if c.Type == "" {
				p.add("value.columns[%d].type: must not be empty", i)
			}
			ns.Columns = append(ns.Columns, warmcache.Column{Name: c.Name, Type: c.Type})
		}
	default:
		p.add("value.layout: must be packed, columns or bytes, got %q", d.Value.Layout)
	}
}

// checkContentType fills in and checks the namespace's content type: a
// media type (RFC 6838 type/subtype, parameters allowed) for a bytes
// namespace, and only application/json, the default, for the JSON
// layouts, whose values are JSON whatever they are called.
func (d nsDoc) checkContentType(ns *warmcache.Namespace, p *problems) {
	ct := d.Value.ContentType
	if ns.Layout != warmcache.LayoutBytes {
		if ct != "" && ct != warmcache.ContentTypeJSON {
			p.add("value.content_type: only for layout bytes; JSON layouts are %s, got %q", warmcache.ContentTypeJSON, ct)
		}
		ns.ContentType = warmcache.ContentTypeJSON
		return
	}
	if ct == "" {
		ns.ContentType = warmcache.ContentTypeBytes
		return
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || !strings.Contains(mt, "/") || len(ct) > 255 {
		p.add("value.content_type: must be a media type such as application/octet-stream, got %q", ct)
		return
	}
	ns.ContentType = mime.FormatMediaType(mt, params)
}

// checkLimits fills in and checks the namespace's TTL jitter and codec, and
// checks its key size limit and its storage's partition count.
func (d nsDoc) checkLimits(ns *warmcache.Namespace, p *problems) {
	if d.TTLJitter != nil {
		ns.TTLJitter = *d.TTLJitter
		if ns.TTLJitter < 0 || ns.TTLJitter >= 1 {
			p.add("ttl_jitter: must be at least 0 and below 1, got %v", ns.TTLJitter)
		}
	}
	switch codecs := warmcache.Codecs(); {
	case ns.Codec == "":
		ns.Codec = warmcache.CodecNone
	case !slices.Contains(codecs, ns.Codec):
		all := names(codecs)
		p.add("codec: must be %s or %s, got %q", strings.Join(all[:len(all)-1], ", "), all[len(all)-1], d.Codec)
	}
	if d.MaxKeyBytes < 0 || d.MaxKeyBytes > 4096 {
		p.add("max_key_bytes: must be between 1 and 4096, got %d", d.MaxKeyBytes)
	}
	if d.Storage.Partitions < 0 || d.Storage.Partitions > dialect.MaxPartitions {
		p.add("storage.partitions: must be between 1 and %d, got %d", dialect.MaxPartitions, d.Storage.Partitions)
	}
}

// nearTTL parses a namespace's near_ttl: empty or zero means the namespace
// does not use the near cache; otherwise a positive duration.
func nearTTL(v string, bad func(string, ...any)) time.Duration {
	if v == "" {
		return 0
	}
	t, err := time.ParseDuration(v)
	if err != nil || t < 0 {
		bad("near_ttl: must be 0 (off) or a positive duration such as 1s, got %q", v)
		return 0
	}
	return t
}
