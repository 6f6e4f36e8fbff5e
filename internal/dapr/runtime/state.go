// Package daprapi serves Dapr's state management API, v1.0, over the core:
// the HTTP routes under /v1.0/state/{storename} and the state RPCs of the
// gRPC service dapr.proto.runtime.v1.Dapr, so that an unmodified Dapr
// application (any Dapr SDK pointed at warmcache's address) reads and
// writes warmcache's namespaces.
//
// The mapping:
//   - a Dapr state store name is a warmcache namespace name;
//   - a Dapr key is a warmcache key, without Dapr's "appid||" prefix;
//   - an ETag is the row's version, in decimal; an ETag that is not a
//     version is refused as invalid;
//   - a save or delete with an ETag must match the row's version, under
//     either concurrency, as state.postgresql holds it (state.redis too, for
//     a delete); an empty ETag is none, as Dapr's stores read it
//     (state.SetRequest.HasETag); a save without an ETag under first-write
//     only creates, and fails if the key exists;
//   - a delete of an absent key succeeds (without an ETag);
//   - a read with strong consistency reads the warehouse past the caches;
//     any other read is the tiered read;
//   - several items of one save, one bulk delete, and every transaction
//     commit in one SQL transaction;
//   - metadata: ttlInSeconds is the item's time to live, a whole number
//     of seconds up to warmcache.MaxTTL (-1 and 0: it never expires), and
//     anything else is refused as malformed; on a JSON namespace
//     contentType application/json (or a +json type) is accepted and any
//     other is refused; other keys are ignored;
//   - a namespace of opaque bytes (value layout bytes) takes any value
//     under any contentType, and reads answer its bytes as stored with the
//     namespace's content type (contentType in the response metadata, the
//     Content-Type of an HTTP read). Over HTTP a save's value is JSON, so it
//     stores the value's JSON text, as daprd hands a store; and an HTTP bulk
//     read, whose data is JSON, carries each value as a base64 string.
//
// The protocol types come from Dapr's own Go packages
// (github.com/dapr/dapr/pkg/proto/runtime/v1 and common/v1).
package daprapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// The concurrency and consistency words of Dapr's state options.
const (
	firstWrite = "first-write"
	lastWrite  = "last-write"
	strong     = "strong"
)

// Metadata keys with a meaning here.
const (
	metaTTL         = "ttlInSeconds"
	metaContentType = "contentType"
	// metaSource is the response metadata key that says which tier
	// answered a read (hit-l1, hit, miss, stale).
	metaSource = "warmcache-source"
)

// state is what both transports share: the Dapr state operations over the
// core, with Dapr's semantics, and access control.
type state struct {
	svc  *warmcache.Service
	keys *auth.Keyring
	log  *slog.Logger
}

// setItem is one save of a SaveState or an upsert of a transaction.
type setItem struct {
	key         string
	value       []byte
	etag        *string
	concurrency string
	metadata    map[string]string
}

// deleteItem is one delete of a DeleteState, a DeleteBulkState or a
// transaction.
type deleteItem struct {
	key         string
	etag        *string
	concurrency string
	metadata    map[string]string
}

// txOp is one operation of a transaction: exactly one of set and del.
type txOp struct {
	set *setItem
	del *deleteItem
}

// errETagInvalid marks an ETag that is not a version.
var errETagInvalid = errors.New("invalid etag value")

// errUnsupported marks a request whose options or metadata have no
// equivalent here.
var errUnsupported = errors.New("not supported")

// errMalformed marks a request that cannot be decoded.
var errMalformed = errors.New("malformed request")

// authorize authenticates token (the dapr-api-token header) and checks its
// scope on the store.
func (s *state) authorize(ctx context.Context, token, store string, scope auth.Scope) (auth.Principal, error) {
	p := auth.Principal{KeyID: auth.Anonymous}
	if s.keys != nil {
		var err error
		if p, err = s.keys.Authenticate(token); err != nil {
			return auth.Principal{}, err
		}
	}
	if err := p.Authorize(store, scope); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// get reads one key. found is false for an absent key, which Dapr answers
// with an empty response rather than an error.
func (s *state) get(ctx context.Context, store, key, consistency string) (it warmcache.Item, found bool, err error) {
	if key == "" {
		return warmcache.Item{}, false, fmt.Errorf("%w: a key is required", errMalformed)
	}
	if consistency == strong {
		it, err = s.svc.GetLatest(ctx, store, key)
	} else {
		it, err = s.svc.Get(ctx, store, key)
	}
	if errors.Is(err, warmcache.ErrNotFound) {
		return it, false, nil
	}
	return it, err == nil, err
}

// bulkItem is one key's answer of a bulk get.
type bulkItem struct {
	key   string
	item  warmcache.Item
	found bool
}

// bulkGet reads keys, answering one item per requested key in their order,
// duplicates included.
func (s *state) bulkGet(ctx context.Context, store string, keys []string) ([]bulkItem, error) {
	ns, err := s.svc.Namespace(store)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	items, err := s.svc.MGet(ctx, store, keys)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]warmcache.Item, len(items))
	for _, it := range items {
		byKey[it.Key.Text] = it
	}
	out := make([]bulkItem, len(keys))
	for i, raw := range keys {
		k, err := ns.ParseKey(raw)
		if err != nil {
			return nil, err
		}
		it := byKey[k.Text]
		out[i] = bulkItem{key: raw, item: it, found: it.Entry.Found}
	}
	return out, nil
}

// apply commits ops in one transaction.
func (s *state) apply(ctx context.Context, p auth.Principal, transport, op, store string, ops []txOp, txMeta map[string]string) error {
	if err := checkMetadata(s.metadataOf(store, txMeta)); err != nil {
		return err
	}
	wops := make([]warmcache.Op, len(ops))
	for i, o := range ops {
		var err error
		if o.set != nil {
			it := *o.set
			it.metadata = s.metadataOf(store, it.metadata)
			wops[i], err = upsertOp(it)
		} else {
			it := *o.del
			it.metadata = s.metadataOf(store, it.metadata)
			wops[i], err = deleteOp(it)
		}
		if err != nil {
			return err
		}
	}
	_, err := s.svc.Transact(ctx, store, wops)
	p.LogWrite(ctx, s.log, transport, op, store, fmt.Sprintf("(%d keys)", len(ops)), err)
	return err
}

// opaque returns the namespace of store when it stores opaque bytes
// (warmcache.LayoutBytes), or nil.
func (s *state) opaque(store string) *warmcache.Namespace {
	ns, err := s.svc.Namespace(store)
	if err != nil || !ns.Opaque() {
		return nil
	}
	return ns
}

// metadataOf returns the metadata of a request to store as checkMetadata
// is to judge it: for a namespace of opaque bytes, which takes any content
// type, without contentType; otherwise meta itself.
func (s *state) metadataOf(store string, meta map[string]string) map[string]string {
	if _, ok := meta[metaContentType]; !ok || s.opaque(store) == nil {
		return meta
	}
	out := make(map[string]string, len(meta))
	for k, v := range meta {
		if k != metaContentType {
			out[k] = v
		}
	}
	return out
}

// contentTypeOf returns the media type of store's values, for a read's
// answer: the namespace's own for opaque bytes, application/json
// otherwise.
func (s *state) contentTypeOf(store string) string {
	if ns := s.opaque(store); ns != nil {
		return ns.MediaType()
	}
	return warmcache.ContentTypeJSON
}

// upsertOp maps a Dapr save to a core op.
func upsertOp(it setItem) (warmcache.Op, error) {
	if it.key == "" {
		return warmcache.Op{}, fmt.Errorf("%w: state key cannot be empty", errMalformed)
	}
	if err := checkMetadata(it.metadata); err != nil {
		return warmcache.Op{}, err
	}
	ttl, err := ttlOf(it.metadata)
	if err != nil {
		return warmcache.Op{}, err
	}
	op := warmcache.Op{Key: it.key, Value: it.value, TTL: ttl}
	version, has, err := parseETag(it.etag)
	if err != nil {
		return warmcache.Op{}, err
	}
	switch {
	case has:
		op.IfMatch = &version
	case it.concurrency == firstWrite:
		op.IfAbsent = true
	}
	return op, nil
}

// deleteOp maps a Dapr delete to a core op.
func deleteOp(it deleteItem) (warmcache.Op, error) {
	if it.key == "" {
		return warmcache.Op{}, fmt.Errorf("%w: state key cannot be empty", errMalformed)
	}
	if err := checkMetadata(it.metadata); err != nil {
		return warmcache.Op{}, err
	}
	op := warmcache.Op{Key: it.key, Delete: true, AbsentOK: true}
	version, has, err := parseETag(it.etag)
	if err != nil {
		return warmcache.Op{}, err
	}
	if has {
		op.IfMatch = &version
	}
	return op, nil
}

// parseETag reads an ETag as a version. An absent or empty ETag is none.
func parseETag(etag *string) (version int64, has bool, err error) {
	if etag == nil || *etag == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(strings.Trim(*etag, `"`), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %q is not an ETag of this store, which are versions such as \"42\"", errETagInvalid, *etag)
	}
	return v, true, nil
}

// checkMetadata refuses the metadata that the store cannot honour or
// read.
func checkMetadata(meta map[string]string) error {
	if _, err := ttlOf(meta); err != nil {
		return err
	}
	if v, ok := meta[metaContentType]; ok && v != "" {
		mt, _, err := mime.ParseMediaType(v)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return fmt.Errorf("%w: metadata contentType=%q: values are stored as JSON documents", errUnsupported, v)
		}
	}
	return nil
}

// ttlOf returns the TTL that metadata's ttlInSeconds asks of a save, as
// Dapr's stores read it: a whole number of seconds; -1 (and 0) mean never
// expire, as no ttlInSeconds does. Anything else, or more than
// warmcache.MaxTTL, is malformed (errMalformed).
func ttlOf(meta map[string]string) (time.Duration, error) {
	v, ok := meta[metaTTL]
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < -1 || n > int64(warmcache.MaxTTL/time.Second) {
		return 0, fmt.Errorf("%w: metadata ttlInSeconds=%q: want a whole number of seconds, or -1 for never", errMalformed, v)
	}
	if n <= 0 {
		return 0, nil
	}
	return time.Duration(n) * time.Second, nil
}
