package dapr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// Read reads one key of namespace as Dapr's Get does: strong reads the
// warehouse past the caches, any other read is the tiered read. found is
// false for an absent key, which Dapr answers with an empty response
// rather than an error. An empty key is malformed (ErrMalformed).
func Read(ctx context.Context, svc *warmcache.Service, namespace, key string, strong bool) (it warmcache.Item, found bool, err error) {
	if key == "" {
		return warmcache.Item{}, false, fmt.Errorf("%w: a key is required", ErrMalformed)
	}
	if strong {
		it, err = svc.GetLatest(ctx, namespace, key)
	} else {
		it, err = svc.Get(ctx, namespace, key)
	}
	if errors.Is(err, warmcache.ErrNotFound) {
		return it, false, nil
	}
	return it, err == nil, err
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
	ns, err := svc.Namespace(namespace)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	items, err := svc.MGet(ctx, namespace, keys)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]warmcache.Item, len(items))
	for _, it := range items {
		byKey[it.Key.Text] = it
	}
	out := make([]BulkItem, len(keys))
	for i, raw := range keys {
		k, err := ns.ParseKey(raw)
		if err != nil {
			return nil, err
		}
		it := byKey[k.Text]
		out[i] = BulkItem{Key: raw, Item: it, Found: it.Entry.Found}
	}
	return out, nil
}

// ItemMetadata is the response metadata of a found item, on both of the
// runtime API's transports and the pluggable component: the tier that
// answered (warmcache-source) and, when the item expires, ttlExpireTime.
func ItemMetadata(it warmcache.Item) map[string]string {
	md := map[string]string{MetaSource: string(it.Source)}
	if !it.Entry.ExpiresAt.IsZero() {
		md[MetaTTLExpireTime] = ExpireTime(it.Entry.ExpiresAt)
	}
	return md
}

// ExpireTime words when an item expires, as ttlExpireTime carries it.
func ExpireTime(at time.Time) string { return at.UTC().Format(time.RFC3339) }
