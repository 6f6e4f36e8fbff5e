package daprapi

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// The concurrency matrix: an ETag binds under either concurrency, as
// state.postgresql holds it; first-write without an ETag only creates; an
// empty ETag is none.
func TestConcurrencyMapping(t *testing.T) {
	etag := func(s string) *string { return &s }
	tests := []struct {
		name        string
		etag        *string
		concurrency string
		ifMatch     int64 // 0: none
		ifAbsent    bool
		err         error
	}{
		{name: "no etag, default"},
		{name: "no etag, last-write", concurrency: lastWrite},
		{name: "no etag, first-write", concurrency: firstWrite, ifAbsent: true},
		{name: "empty etag, first-write", etag: etag(""), concurrency: firstWrite, ifAbsent: true},
		{name: "etag, default", etag: etag("42"), ifMatch: 42},
		{name: "quoted etag, first-write", etag: etag(`"42"`), concurrency: firstWrite, ifMatch: 42},
		{name: "etag, last-write", etag: etag("42"), concurrency: lastWrite, ifMatch: 42},
		{name: "empty etag, last-write", etag: etag(""), concurrency: lastWrite},
		{name: "etag that is no version", etag: etag("W/abc"), err: errETagInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, err := upsertOp(setItem{key: "k", value: []byte(`{}`), etag: tt.etag, concurrency: tt.concurrency})
			if !errors.Is(err, tt.err) {
				t.Fatalf("upsert err = %v, want %v", err, tt.err)
			}
			if tt.err != nil {
				return
			}
			if got := ifMatchOf(op); got != tt.ifMatch || op.IfAbsent != tt.ifAbsent || op.Delete {
				t.Errorf("upsert = ifMatch %d ifAbsent %v, want %d %v", got, op.IfAbsent, tt.ifMatch, tt.ifAbsent)
			}
			del, err := deleteOp(deleteItem{key: "k", etag: tt.etag, concurrency: tt.concurrency})
			if err != nil || !del.Delete || !del.AbsentOK || ifMatchOf(del) != tt.ifMatch || del.IfAbsent {
				t.Errorf("delete = %+v, %v; want an absent-ok delete at ifMatch %d", del, err, tt.ifMatch)
			}
		})
	}
}

func ifMatchOf(op warmcache.Op) int64 {
	if op.IfMatch == nil {
		return 0
	}
	return *op.IfMatch
}

func TestMetadata(t *testing.T) {
	for meta, ok := range map[string]bool{
		"": true, "ttlInSeconds=-1": true, "ttlInSeconds=60": true, "ttlInSeconds=0": true,
		"contentType=application/json": true, "contentType=application/cloudevents+json": true,
		"contentType=text/plain": false, "partitionKey=p1": true,
	} {
		m := map[string]string{}
		if k, v, found := cut(meta); found {
			m[k] = v
		}
		if err := checkMetadata(m); (err == nil) != ok || (err != nil && !errors.Is(err, errUnsupported)) {
			t.Errorf("checkMetadata(%v) = %v, want accepted %v", m, err, ok)
		}
	}
	for _, bad := range []string{"abc", "-2", "1.5", "315360001"} {
		if err := checkMetadata(map[string]string{"ttlInSeconds": bad}); !errors.Is(err, errMalformed) {
			t.Errorf("checkMetadata(ttlInSeconds=%s) = %v, want errMalformed", bad, err)
		}
	}
}

func TestTTLMetadata(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "-1": 0, "0": 0, "1": time.Second, " 60 ": time.Minute} {
		op, err := upsertOp(setItem{key: "k", value: []byte("1"), metadata: map[string]string{"ttlInSeconds": v}})
		if err != nil || op.TTL != want {
			t.Errorf("upsert with ttlInSeconds=%q = TTL %v, %v; want %v", v, op.TTL, err, want)
		}
	}
}

func cut(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '=' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

func TestErrorTable(t *testing.T) {
	tests := []struct {
		op     operation
		err    error
		code   string
		status int
		grpc   codes.Code
	}{
		{opSave, warmcache.ErrVersionMismatch, "ERR_STATE_SAVE", http.StatusConflict, codes.Aborted},
		{opDelete, warmcache.ErrVersionMismatch, "ERR_STATE_DELETE", http.StatusConflict, codes.Aborted},
		{opTransaction, warmcache.ErrVersionMismatch, "ERR_STATE_TRANSACTION", http.StatusInternalServerError, codes.Internal},
		{opGet, warmcache.ErrUnknownNamespace, "ERR_STATE_STORE_NOT_FOUND", http.StatusBadRequest, codes.InvalidArgument},
		{opSave, errETagInvalid, "ERR_STATE_SAVE", http.StatusBadRequest, codes.InvalidArgument},
		{opGet, warmcache.ErrUnavailable, "ERR_STATE_GET", http.StatusServiceUnavailable, codes.Unavailable},
		{opBulkGet, errors.New("driver: boom"), "ERR_STATE_BULK_GET", http.StatusInternalServerError, codes.Internal},
	}
	for _, tt := range tests {
		e, _ := toAPIError(tt.op, "store", "k", tt.err)
		if e.code != tt.code || e.httpStatus != tt.status || e.grpcCode != tt.grpc {
			t.Errorf("%s %v = %+v, want %s %d %s", tt.op.errorCode(), tt.err, e, tt.code, tt.status, tt.grpc)
		}
	}
	if e, known := toAPIError(opGet, "s", "k", errors.New("secret detail")); known || e.message != "fail to get k from state store s: internal error" {
		t.Errorf("an unknown error answers %q (known %v); want its text hidden", e.message, known)
	}
}
