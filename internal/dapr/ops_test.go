package dapr

import (
	"errors"
	"testing"
	"time"

	commonv1 "github.com/dapr/dapr/pkg/proto/common/v1"
	componentsv1 "github.com/dapr/dapr/pkg/proto/components/v1"

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
		{name: "no etag, last-write", concurrency: LastWrite},
		{name: "no etag, first-write", concurrency: FirstWrite, ifAbsent: true},
		{name: "empty etag, first-write", etag: etag(""), concurrency: FirstWrite, ifAbsent: true},
		{name: "etag, default", etag: etag("42"), ifMatch: 42},
		{name: "quoted etag, first-write", etag: etag(`"42"`), concurrency: FirstWrite, ifMatch: 42},
		{name: "etag, last-write", etag: etag("42"), concurrency: LastWrite, ifMatch: 42},
		{name: "empty etag, last-write", etag: etag(""), concurrency: LastWrite},
		{name: "etag that is no version", etag: etag("W/abc"), err: ErrETagInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, err := SaveOp(Save{Key: "k", Value: []byte(`{}`), ETag: tt.etag, Concurrency: tt.concurrency})
			if !errors.Is(err, tt.err) {
				t.Fatalf("upsert err = %v, want %v", err, tt.err)
			}
			if tt.err != nil {
				return
			}
			if got := ifMatchOf(op); got != tt.ifMatch || op.IfAbsent != tt.ifAbsent || op.Delete {
				t.Errorf("upsert = ifMatch %d ifAbsent %v, want %d %v", got, op.IfAbsent, tt.ifMatch, tt.ifAbsent)
			}
			del, err := DeleteOp(Delete{Key: "k", ETag: tt.etag, Concurrency: tt.concurrency})
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
		if err := CheckMetadata(m); (err == nil) != ok || (err != nil && !errors.Is(err, ErrUnsupported)) {
			t.Errorf("CheckMetadata(%v) = %v, want accepted %v", m, err, ok)
		}
	}
	for _, bad := range []string{"abc", "-2", "1.5", "315360001"} {
		if err := CheckMetadata(map[string]string{"ttlInSeconds": bad}); !errors.Is(err, ErrMalformed) {
			t.Errorf("CheckMetadata(ttlInSeconds=%s) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestTTLMetadata(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "-1": 0, "0": 0, "1": time.Second, " 60 ": time.Minute} {
		op, err := SaveOp(Save{Key: "k", Value: []byte("1"), Metadata: map[string]string{"ttlInSeconds": v}})
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

// The options of both Dapr protos read alike: the runtime API's common.v1
// and the components' v1.
func TestProtoOptions(t *testing.T) {
	for c, want := range map[commonv1.StateOptions_StateConcurrency]string{
		commonv1.StateOptions_CONCURRENCY_UNSPECIFIED: "",
		commonv1.StateOptions_CONCURRENCY_FIRST_WRITE: FirstWrite,
		commonv1.StateOptions_CONCURRENCY_LAST_WRITE:  LastWrite,
	} {
		if got := Concurrency(c); got != want {
			t.Errorf("Concurrency(common %s) = %q, want %q", c, got, want)
		}
	}
	for c, want := range map[componentsv1.StateOptions_StateConcurrency]string{
		componentsv1.StateOptions_CONCURRENCY_UNSPECIFIED: "",
		componentsv1.StateOptions_CONCURRENCY_FIRST_WRITE: FirstWrite,
		componentsv1.StateOptions_CONCURRENCY_LAST_WRITE:  LastWrite,
	} {
		if got := Concurrency(c); got != want {
			t.Errorf("Concurrency(components %s) = %q, want %q", c, got, want)
		}
	}
	if !StrongRead(commonv1.StateOptions_CONSISTENCY_STRONG) || StrongRead(commonv1.StateOptions_CONSISTENCY_EVENTUAL) ||
		!StrongRead(componentsv1.StateOptions_CONSISTENCY_STRONG) || StrongRead(componentsv1.StateOptions_CONSISTENCY_EVENTUAL) {
		t.Error("StrongRead does not read the strong consistency of both protos alone")
	}
	if ETagOf((*componentsv1.Etag)(nil)) != nil || ETagOf((*commonv1.Etag)(nil)) != nil {
		t.Error("a request without an ETag has one")
	}
	if e := ETagOf(&componentsv1.Etag{Value: ""}); e == nil || *e != "" {
		t.Errorf("an empty ETag reads %v, want the empty string", e)
	}
	if e := ETagOf(&commonv1.Etag{Value: "42"}); e == nil || *e != "42" {
		t.Errorf("ETag 42 reads %v", e)
	}
}
