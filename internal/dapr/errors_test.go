package dapr

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Each surface answers the errors it meets, and only those: an ETag that
// does not hold is FailedPrecondition with the "etag" violation to daprd
// (its contract for pluggable stores) and Aborted on the runtime API, as
// daprd answers it.
func TestFailures(t *testing.T) {
	for _, f := range failures {
		if f.HTTPStatus == 0 && f.Component == codes.OK {
			t.Errorf("%v: no surface answers it", f.Err)
		}
	}
	wrapped := func(err error) error { return fmt.Errorf("namespace widgets: %w", err) }
	tests := []struct {
		err               error
		runtime           codes.Code // codes.OK: unknown
		component         codes.Code // codes.OK: unknown
		etag              bool
		message           string // empty: the error's own text
		runtimeRetryAfter int
		runtimeHTTPStatus int
	}{
		{err: warmcache.ErrVersionMismatch, runtime: codes.Aborted, component: codes.FailedPrecondition, etag: true, runtimeHTTPStatus: 409},
		{err: warmcache.ErrNotFound, runtime: codes.Aborted, component: codes.FailedPrecondition, etag: true, runtimeHTTPStatus: 409},
		{err: ErrETagInvalid, runtime: codes.InvalidArgument, component: codes.InvalidArgument, etag: true, runtimeHTTPStatus: 400},
		{err: ErrMalformed, runtime: codes.InvalidArgument, component: codes.InvalidArgument, runtimeHTTPStatus: 400},
		{err: auth.ErrForbidden, runtime: codes.PermissionDenied, runtimeHTTPStatus: 403},
		{err: ErrUnknownComponent, component: codes.NotFound},
		{err: ErrQueryUnsupported, component: codes.Unimplemented},
		{err: warmcache.ErrConflict, component: codes.Aborted, message: "the write conflicted with a concurrent one; retry"},
		{err: warmcache.ErrUnavailable, runtime: codes.Unavailable, component: codes.Unavailable,
			message: "a storage tier is unavailable; retry later", runtimeRetryAfter: 1, runtimeHTTPStatus: 503},
	}
	for _, tt := range tests {
		err := wrapped(tt.err)
		rf, known := RuntimeFailure(err)
		if known != (tt.runtime != codes.OK) || rf.GRPC != tt.runtime || rf.HTTPStatus != tt.runtimeHTTPStatus || rf.RetryAfter != tt.runtimeRetryAfter {
			t.Errorf("runtime API answers %v with %+v (known %v), want %s %d", tt.err, rf, known, tt.runtime, tt.runtimeHTTPStatus)
		}
		cf, known := ComponentFailure(err)
		if known != (tt.component != codes.OK) || cf.Component != tt.component || (known && cf.ETag != tt.etag) {
			t.Errorf("component answers %v with %+v (known %v), want %s etag %v", tt.err, cf, known, tt.component, tt.etag)
		}
		want := tt.message
		if want == "" {
			want = err.Error()
		}
		for _, f := range []Failure{rf, cf} {
			if f.Err != nil && f.Text(err) != want {
				t.Errorf("%v shows %q, want %q", tt.err, f.Text(err), want)
			}
		}
	}
	if _, known := RuntimeFailure(errors.New("driver: boom")); known {
		t.Error("the runtime API knows an error of no row")
	}
	if _, known := ComponentFailure(errors.New("driver: boom")); known {
		t.Error("the component knows an error of no row")
	}
}
