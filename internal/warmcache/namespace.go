package warmcache

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// KeyType is the SQL type of a namespace's key column.
type KeyType string

// The supported key types.
const (
	KeyBigint KeyType = "bigint"
	KeyText   KeyType = "text"
)

// Layout says how a namespace's value is stored in the warehouse.
type Layout string

// The supported layouts.
const (
	// LayoutPacked stores the whole JSON value in one JSON/JSONB column.
	LayoutPacked Layout = "packed"
	// LayoutColumns stores the value's top-level fields in typed columns and
	// builds the JSON object from them on read.
	LayoutColumns Layout = "columns"
	// LayoutBytes stores the value as opaque bytes, as the writer sent them,
	// in one bytea column. Values are not checked or rewritten as JSON.
	LayoutBytes Layout = "bytes"
)

// Codec says how the hot tier encodes a namespace's values.
type Codec string

// The supported codecs.
const (
	// CodecNone stores the value's bytes as they are.
	CodecNone Codec = "none"
	// CodecZstd compresses each value with zstd on its own.
	CodecZstd Codec = "zstd"
	// CodecZstdDict compresses each value with zstd and a dictionary
	// trained on the namespace's own values; without a dictionary it
	// falls back to CodecZstd.
	CodecZstdDict Codec = "zstd-dict"
)

// Codecs returns the supported codecs, CodecNone first.
func Codecs() []Codec { return []Codec{CodecNone, CodecZstd, CodecZstdDict} }

// Column is one typed column of a LayoutColumns namespace. Its name is also
// the field name in the JSON value.
type Column struct {
	Name string
	// Type is the SQL type, such as "text", "bigint", "numeric",
	// "boolean", "timestamptz" or "jsonb".
	Type string
}

// Namespace maps the API's /v1/kv/{namespace}/{key} to one warehouse table.
// A Namespace is immutable once the service starts and safe for concurrent
// use.
type Namespace struct {
	// Name is the path segment clients use.
	Name string
	// Table is the warehouse table, optionally schema-qualified.
	Table string
	// KeyColumn and KeyType describe the key.
	KeyColumn string
	KeyType   KeyType
	// Layout selects ValueColumn (packed or bytes) or Columns (columns).
	Layout      Layout
	ValueColumn string
	Columns     []Column
	// ContentType is the media type of the namespace's values, which every
	// transport answers with. Empty means the layout's default (see
	// MediaType): application/json for the JSON layouts,
	// application/octet-stream for LayoutBytes.
	ContentType string
	// VersionColumn holds a number that grows with every write of a row.
	VersionColumn string
	// ExpiresColumn, a nullable timestamptz column, holds when a row
	// expires (a writer's TTL); NULL means never. From then on the row
	// reads as absent on every tier, and a sweeper deletes it. Empty means
	// the table has no such column, and writes with a TTL are refused.
	ExpiresColumn string
	// TTL bounds how long a value stays in the hot tier.
	TTL time.Duration
	// NegativeTTL bounds how long an absent key is remembered as absent.
	NegativeTTL time.Duration
	// TTLJitter spreads expiries: each TTL is multiplied by a random factor
	// in [1-TTLJitter, 1+TTLJitter]. Zero means no jitter.
	TTLJitter float64
	// MaxStale is how long after its TTL an entry may still be served,
	// marked stale: while one background read revalidates it, and while the
	// warehouse is unreachable. Zero means never.
	MaxStale time.Duration
	// NearTTL is how long the in-process near cache keeps an entry of this
	// namespace. Zero means the namespace does not use the near cache.
	NearTTL time.Duration
	// Codec says how the hot tier encodes the values. Empty means
	// CodecNone.
	Codec Codec
	// Writable allows PUT, DELETE and loads.
	Writable bool
	// MaxKeyBytes bounds the key length. Zero means 256.
	MaxKeyBytes int
}

// The default media types of the layouts.
const (
	ContentTypeJSON  = "application/json"
	ContentTypeBytes = "application/octet-stream"
)

// MediaType returns the media type of the namespace's values: ContentType,
// or when it is empty the layout's default.
func (ns *Namespace) MediaType() string {
	switch {
	case ns.ContentType != "":
		return ns.ContentType
	case ns.Layout == LayoutBytes:
		return ContentTypeBytes
	}
	return ContentTypeJSON
}

// Opaque reports whether the namespace stores its values as opaque bytes
// (LayoutBytes): they are neither checked nor queried as JSON.
func (ns *Namespace) Opaque() bool { return ns.Layout == LayoutBytes }

// Key is a validated key in its canonical form: for bigint namespaces the
// decimal form of Int, for text namespaces the text itself.
type Key struct {
	Text string
	Int  int64
}

// String returns the canonical text of the key.
func (k Key) String() string { return k.Text }

const defaultMaxKeyBytes = 256

// ParseKey validates raw as a key of the namespace. A text key is valid
// UTF-8 without control characters (C0, DEL and C1) or bidirectional
// formatting characters. Errors wrap ErrInvalidKey and are written for the
// client.
func (ns *Namespace) ParseKey(raw string) (Key, error) {
	max := ns.MaxKeyBytes
	if max <= 0 {
		max = defaultMaxKeyBytes
	}
	switch {
	case raw == "":
		return Key{}, fmt.Errorf("%w: key is empty", ErrInvalidKey)
	case len(raw) > max:
		return Key{}, fmt.Errorf("%w: key is longer than %d bytes", ErrInvalidKey, max)
	}
	switch ns.KeyType {
	case KeyBigint:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return Key{}, fmt.Errorf("%w: key %q is not a 64-bit integer", ErrInvalidKey, truncate(raw))
		}
		return Key{Text: strconv.FormatInt(n, 10), Int: n}, nil
	default:
		if !utf8.ValidString(raw) {
			return Key{}, fmt.Errorf("%w: key is not valid UTF-8", ErrInvalidKey)
		}
		for _, r := range raw {
			switch {
			case r < 0x20 || (r >= 0x7f && r <= 0x9f):
				return Key{}, fmt.Errorf("%w: key contains the control character U+%04X", ErrInvalidKey, r)
			case isBidiControl(r):
				return Key{}, fmt.Errorf("%w: key contains the bidirectional formatting character U+%04X", ErrInvalidKey, r)
			}
		}
		return Key{Text: raw}, nil
	}
}

// isBidiControl reports whether r reorders or isolates text when shown
// (Unicode's Bidi_Control characters), which lets a key display as
// another one in logs and tools.
func isBidiControl(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f: // ALM, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e: // LRE, RLE, PDF, LRO, RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
		return true
	}
	return false
}

// truncate shortens s for an error message.
func truncate(s string) string {
	const n = 32
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
