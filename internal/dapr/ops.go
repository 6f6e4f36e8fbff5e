package daprapi

import (
	"context"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// This file exports the mapping of Dapr's state operations onto the core,
// so that every Dapr surface shares one: the runtime API of this package
// and the pluggable state-store component (internal/daprstore). ETags,
// concurrency, consistency and the accepted metadata mean the same on
// both.

// The concurrency words of Dapr's state options, as Save and Delete take
// them; empty is Dapr's default.
const (
	FirstWrite = firstWrite
	LastWrite  = lastWrite
)

// MetaTTLExpireTime is the response metadata key that carries when an item
// expires (RFC 3339), as Dapr's stores answer it.
const MetaTTLExpireTime = "ttlExpireTime"

// Errors of the mapping, for a caller's error table. They are the errors
// the runtime API's table maps.
var (
	// ErrETagInvalid marks an ETag that is not a version of this store.
	ErrETagInvalid = errETagInvalid
	// ErrUnsupported marks options or metadata that have no equivalent here.
	ErrUnsupported = errUnsupported
	// ErrMalformed marks a request that cannot be decoded, such as an empty
	// key.
	ErrMalformed = errMalformed
)

// Save is one Dapr save: a SaveState item, an item of a bulk set, or an
// upsert of a transaction.
type Save struct {
	Key   string
	Value []byte
	// ETag, when not nil and not empty, is the version the key must have,
	// under either concurrency.
	ETag *string
	// Concurrency is FirstWrite, LastWrite or empty.
	Concurrency string
	Metadata    map[string]string
}

// Delete is one Dapr delete.
type Delete struct {
	Key         string
	ETag        *string
	Concurrency string
	Metadata    map[string]string
}

// SaveOp maps a Dapr save to a core op. Errors wrap ErrMalformed,
// ErrETagInvalid or ErrUnsupported.
func SaveOp(s Save) (warmcache.Op, error) {
	return upsertOp(setItem{key: s.Key, value: s.Value, etag: s.ETag, concurrency: s.Concurrency, metadata: s.Metadata})
}

// DeleteOp maps a Dapr delete to a core op: the delete of an absent key
// succeeds unless it names an ETag. Errors wrap ErrMalformed,
// ErrETagInvalid or ErrUnsupported.
func DeleteOp(d Delete) (warmcache.Op, error) {
	return deleteOp(deleteItem{key: d.Key, etag: d.ETag, concurrency: d.Concurrency, metadata: d.Metadata})
}

// CheckMetadata refuses request metadata (a transaction's) that the store
// cannot honour; the error wraps ErrUnsupported.
func CheckMetadata(meta map[string]string) error { return checkMetadata(meta) }

// Read reads one key of namespace as Dapr's Get does: strong reads the
// warehouse past the caches, any other read is the tiered read. found is
// false for an absent key, which Dapr answers with an empty response.
func Read(ctx context.Context, svc *warmcache.Service, namespace, key string, strongRead bool) (it warmcache.Item, found bool, err error) {
	consistency := ""
	if strongRead {
		consistency = strong
	}
	return (&state{svc: svc}).get(ctx, namespace, key, consistency)
}

// BulkItem is one key's answer of BulkRead.
type BulkItem struct {
	Key   string // as requested
	Item  warmcache.Item
	Found bool
}

// BulkRead reads keys of namespace with the tiered read, answering one
// item per requested key in their order, duplicates included.
func BulkRead(ctx context.Context, svc *warmcache.Service, namespace string, keys []string) ([]BulkItem, error) {
	items, err := (&state{svc: svc}).bulkGet(ctx, namespace, keys)
	if err != nil {
		return nil, err
	}
	out := make([]BulkItem, len(items))
	for i, it := range items {
		out[i] = BulkItem{Key: it.key, Item: it.item, Found: it.found}
	}
	return out, nil
}

// ETag is the ETag of a version.
func ETag(version int64) string { return etagOf(version) }

// ItemMetadata is the response metadata of a found item, on both of the
// runtime API's transports and the pluggable component: the tier that
// answered (warmcache-source) and, when the item expires, ttlExpireTime.
func ItemMetadata(it warmcache.Item) map[string]string {
	md := map[string]string{metaSource: string(it.Source)}
	if !it.Entry.ExpiresAt.IsZero() {
		md[MetaTTLExpireTime] = it.Entry.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return md
}
