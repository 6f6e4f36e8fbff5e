package pgstore

import (
	"fmt"
	"strconv"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// A row of a table travels as arguments (keyArg, keyArray, valueArg) and
// comes back through one reader: rowKey for its key, entryRow for its
// value, version and expiry.

// keyArg returns key as the Go value of the key column's type.
func keyArg(ns *warmcache.Namespace, key warmcache.Key) any {
	if ns.KeyType == warmcache.KeyBigint {
		return key.Int
	}
	return key.Text
}

// valueArg returns value as the parameter of ns's value column: text for
// the JSON layouts, which the statements cast to json or jsonb, and bytes,
// never nil (pgx sends a nil slice as NULL), for the bytes layout's bytea.
func valueArg(ns *warmcache.Namespace, value []byte) any {
	if ns.Layout != warmcache.LayoutBytes {
		return string(value)
	}
	if value == nil {
		return []byte{}
	}
	return value
}

// keyArray returns keys as the array parameter of ns's key type: []int64
// for bigint keys, []string for text keys.
func keyArray(ns *warmcache.Namespace, keys []warmcache.Key) any {
	if ns.KeyType == warmcache.KeyBigint {
		ints := make([]int64, len(keys))
		for i, k := range keys {
			ints[i] = k.Int
		}
		return ints
	}
	texts := make([]string, len(keys))
	for i, k := range keys {
		texts[i] = k.Text
	}
	return texts
}

// rowKey reads a key column of a namespace's key type.
type rowKey struct {
	bigint bool
	int    int64
	text   string
}

// newRowKey returns the reader of ns's key column.
func newRowKey(ns *warmcache.Namespace) *rowKey {
	return &rowKey{bigint: ns.KeyType == warmcache.KeyBigint}
}

// dest returns the scan destination of the key column.
func (k *rowKey) dest() any {
	if k.bigint {
		return &k.int
	}
	return &k.text
}

// key returns the key the row last scanned holds.
func (k *rowKey) key() warmcache.Key {
	if k.bigint {
		return warmcache.Key{Text: strconv.FormatInt(k.int, 10), Int: k.int}
	}
	return warmcache.Key{Text: k.text}
}

// entryRow reads the rows of a statement of a table that return a row's
// value and version, after the columns the statement returns first and
// followed by the row's expiry when the table has an expiry column (see
// StatementSet.Expiring). Every read of a row into an Entry goes through
// it.
type entryRow struct {
	// dest are the scan destinations of a row.
	dest    []any
	value   []byte
	version int64
	expires *time.Time
}

// entryRow returns the reader of t's rows that begin with the columns
// lead (scanned into lead's destinations).
func (t *table) entryRow(lead ...any) *entryRow {
	r := &entryRow{}
	r.dest = append(lead, &r.value, &r.version)
	if t.stmts.Expiring {
		r.dest = append(r.dest, &r.expires)
	}
	return r
}

// entry returns the row last scanned as a found Entry, and clears the
// value and expiry so that the next row's scan cannot share them. A NULL
// value column reads as the JSON null; the bytes layout reads a NULL as no
// bytes (see valueExpr), so its values never are nil. The expiry is zero
// for NULL (never), and is cut to the millisecond, the precision every
// tier keeps, so that all of them agree on it: a row written elsewhere
// with a finer expiry reads as absent up to a millisecond early.
func (r *entryRow) entry() warmcache.Entry {
	e := warmcache.Entry{Value: r.value, Version: r.version, Found: true}
	if e.Value == nil {
		e.Value = []byte("null")
	}
	if r.expires != nil {
		e.ExpiresAt = r.expires.Truncate(time.Millisecond)
	}
	r.value, r.expires = nil, nil
	return e
}

// rowOverhead is what a row of an append-optimized row table takes in its
// block besides its key and value: the tuple and block headers, the
// version and the alignment. Measured on Greenplum 7 with the default
// 32 KiB block, a bytea value of 32,700 bytes under a one-byte key was
// found by key and one of 32,740 bytes was not; the bound keeps a margin.
const rowOverhead = 256

// checkRow refuses a row whose key and value are over maxRow bytes (when
// maxRow is not zero) with an error that wraps warmcache.ErrTooLarge: on an
// append-optimized row table such a row spans blocks, and key lookups
// would not find it. A JSON value is counted as its text; jsonb may store
// it larger.
func checkRow(ns *warmcache.Namespace, maxRow int, key warmcache.Key, value []byte) error {
	if maxRow > 0 && len(key.Text)+len(value) > maxRow {
		return fmt.Errorf("%w: namespace %q: a key and value of more than %d bytes do not fit one block of its append-optimized row table, where lookups by key would not find them; store large values in a heap or column-oriented table",
			warmcache.ErrTooLarge, ns.Name, maxRow)
	}
	return nil
}
