package dapr

import (
	"fmt"
	"mime"
	"strconv"
	"strings"
	"time"

	commonv1 "github.com/dapr/dapr/pkg/proto/common/v1"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// The concurrency and consistency words of Dapr's state options, as Save
// and Delete take them and the runtime API's HTTP form sends them; empty is
// Dapr's default.
const (
	FirstWrite = "first-write"
	LastWrite  = "last-write"
	Strong     = "strong"
)

// Metadata keys with a meaning here.
const (
	// MetaTTL is the request metadata key of an item's time to live.
	MetaTTL = "ttlInSeconds"
	// MetaContentType is the metadata key of a value's content type.
	MetaContentType = "contentType"
	// MetaSource is the response metadata key that says which tier
	// answered a read (hit-l1, hit, miss, stale).
	MetaSource = "warmcache-source"
	// MetaTTLExpireTime is the response metadata key that carries when an
	// item expires (RFC 3339), as Dapr's stores answer it.
	MetaTTLExpireTime = "ttlExpireTime"
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
	if s.Key == "" {
		return warmcache.Op{}, fmt.Errorf("%w: state key cannot be empty", ErrMalformed)
	}
	if err := CheckMetadata(s.Metadata); err != nil {
		return warmcache.Op{}, err
	}
	ttl, err := ttlOf(s.Metadata)
	if err != nil {
		return warmcache.Op{}, err
	}
	op := warmcache.Op{Key: s.Key, Value: s.Value, TTL: ttl}
	version, has, err := parseETag(s.ETag)
	if err != nil {
		return warmcache.Op{}, err
	}
	switch {
	case has:
		op.IfMatch = &version
	case s.Concurrency == FirstWrite:
		op.IfAbsent = true
	}
	return op, nil
}

// DeleteOp maps a Dapr delete to a core op: the delete of an absent key
// succeeds unless it names an ETag. Errors wrap ErrMalformed,
// ErrETagInvalid or ErrUnsupported.
func DeleteOp(d Delete) (warmcache.Op, error) {
	if d.Key == "" {
		return warmcache.Op{}, fmt.Errorf("%w: state key cannot be empty", ErrMalformed)
	}
	if err := CheckMetadata(d.Metadata); err != nil {
		return warmcache.Op{}, err
	}
	op := warmcache.Op{Key: d.Key, Delete: true, AbsentOK: true}
	version, has, err := parseETag(d.ETag)
	if err != nil {
		return warmcache.Op{}, err
	}
	if has {
		op.IfMatch = &version
	}
	return op, nil
}

// ETag is the ETag of a version.
func ETag(version int64) string { return strconv.FormatInt(version, 10) }

// parseETag reads an ETag as a version. An absent or empty ETag is none.
func parseETag(etag *string) (version int64, has bool, err error) {
	if etag == nil || *etag == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(strings.Trim(*etag, `"`), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %q is not an ETag of this store, which are versions such as \"42\"", ErrETagInvalid, *etag)
	}
	return v, true, nil
}

// CheckMetadata refuses the request metadata (a save's, a delete's, a
// read's or a transaction's) that the store cannot honour or read; the
// error wraps ErrMalformed or ErrUnsupported.
func CheckMetadata(meta map[string]string) error {
	if _, err := ttlOf(meta); err != nil {
		return err
	}
	if v, ok := meta[MetaContentType]; ok && v != "" {
		mt, _, err := mime.ParseMediaType(v)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return fmt.Errorf("%w: metadata contentType=%q: values are stored as JSON documents", ErrUnsupported, v)
		}
	}
	return nil
}

// WithoutContentType returns meta without its contentType, which
// CheckMetadata holds to JSON, for a namespace of opaque bytes, which takes
// any content type. meta itself is not changed.
func WithoutContentType(meta map[string]string) map[string]string {
	if _, ok := meta[MetaContentType]; !ok {
		return meta
	}
	out := make(map[string]string, len(meta))
	for k, v := range meta {
		if k != MetaContentType {
			out[k] = v
		}
	}
	return out
}

// ttlOf returns the TTL that metadata's ttlInSeconds asks of a save, as
// Dapr's stores read it: a whole number of seconds; -1 (and 0) mean never
// expire, as no ttlInSeconds does. Anything else, or more than
// warmcache.MaxTTL, is malformed (ErrMalformed).
func ttlOf(meta map[string]string) (time.Duration, error) {
	v, ok := meta[MetaTTL]
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < -1 || n > int64(warmcache.MaxTTL/time.Second) {
		return 0, fmt.Errorf("%w: metadata ttlInSeconds=%q: want a whole number of seconds, or -1 for never", ErrMalformed, v)
	}
	if n <= 0 {
		return 0, nil
	}
	return time.Duration(n) * time.Second, nil
}

// The state options of Dapr's protos: common.v1's, which the runtime API
// takes, and components.v1's, which daprd sends a component. The two
// enums number their values alike (a test holds them so).
type (
	protoEnum interface{ ~int32 }
	protoETag interface {
		comparable
		GetValue() string
	}
)

// Concurrency returns the concurrency word of a proto's state option:
// FirstWrite, LastWrite, or empty for Dapr's default.
func Concurrency[C protoEnum](c C) string {
	switch int32(c) {
	case int32(commonv1.StateOptions_CONCURRENCY_FIRST_WRITE):
		return FirstWrite
	case int32(commonv1.StateOptions_CONCURRENCY_LAST_WRITE):
		return LastWrite
	}
	return ""
}

// StrongRead reports whether a proto's consistency asks for a strong read.
func StrongRead[C protoEnum](c C) bool {
	return int32(c) == int32(commonv1.StateOptions_CONSISTENCY_STRONG)
}

// ETagOf returns a proto's ETag as Save and Delete take it: nil when the
// request has none.
func ETagOf[E protoETag](e E) *string {
	var none E
	if e == none {
		return nil
	}
	v := e.GetValue()
	return &v
}
