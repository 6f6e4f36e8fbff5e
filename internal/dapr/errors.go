package dapr

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Errors of the mapping and of the surfaces, which Failures maps.
var (
	// ErrETagInvalid marks an ETag that is not a version of this store.
	ErrETagInvalid = errors.New("invalid etag value")
	// ErrUnsupported marks options or metadata that have no equivalent
	// here.
	ErrUnsupported = errors.New("not supported")
	// ErrMalformed marks a request that cannot be decoded, such as an
	// empty key.
	ErrMalformed = errors.New("malformed request")
	// ErrUnknownComponent marks a call of daprd for a component not
	// configured.
	ErrUnknownComponent = errors.New("no such component")
	// ErrMisconfigured marks a component YAML that disagrees with
	// warmcache's configuration.
	ErrMisconfigured = errors.New("component misconfigured")
	// ErrQueryUnsupported marks a query: values are opaque bytes to a
	// component.
	ErrQueryUnsupported = errors.New("state store does not support querying: its values are opaque bytes")
)

// Failure is how Dapr answers one error, on each surface. A surface whose
// columns are zero does not know the error: it answers it as an internal
// error, which it logs and does not show.
type Failure struct {
	Err error

	// The runtime API's answer. Code is Dapr's errorCode; empty: the
	// failed operation's own (ERR_STATE_SAVE...). HTTPStatus zero: the
	// runtime API does not know the error.
	Code       string
	HTTPStatus int
	GRPC       codes.Code
	// RetryAfter, in seconds, is the runtime API's Retry-After; zero: none.
	RetryAfter int

	// Component is the gRPC code that daprd expects of a pluggable
	// component; codes.OK: the component does not know the error. ETag adds
	// the "etag" field violation, which daprd turns into its ETag error
	// (mismatch for FailedPrecondition, invalid for InvalidArgument).
	Component codes.Code
	ETag      bool

	// Message is what both surfaces show; empty: the error's own text,
	// which the core writes for clients. Server errors show only the fixed
	// message.
	Message string
}

// failures is the one table of Dapr's answers to errors, for both surfaces
// and all their transports. The first row whose error err is (errors.Is)
// answers it.
var failures = []Failure{
	{Err: warmcache.ErrUnknownNamespace, Code: "ERR_STATE_STORE_NOT_FOUND", HTTPStatus: http.StatusBadRequest, GRPC: codes.InvalidArgument},
	{Err: auth.ErrUnauthenticated, Code: "ERR_UNAUTHENTICATED", HTTPStatus: http.StatusUnauthorized, GRPC: codes.Unauthenticated,
		Message: "a valid API key is required in the dapr-api-token header"},
	{Err: auth.ErrForbidden, Code: "ERR_PERMISSION_DENIED", HTTPStatus: http.StatusForbidden, GRPC: codes.PermissionDenied},
	{Err: auth.ErrRateLimited, Code: "ERR_TOO_MANY_REQUESTS", HTTPStatus: http.StatusTooManyRequests, GRPC: codes.ResourceExhausted, RetryAfter: 1},
	{Err: ErrMalformed, Code: "ERR_MALFORMED_REQUEST", HTTPStatus: http.StatusBadRequest, GRPC: codes.InvalidArgument,
		Component: codes.InvalidArgument},
	{Err: ErrETagInvalid, HTTPStatus: http.StatusBadRequest, GRPC: codes.InvalidArgument,
		Component: codes.InvalidArgument, ETag: true},
	{Err: warmcache.ErrVersionMismatch, HTTPStatus: http.StatusConflict, GRPC: codes.Aborted,
		Component: codes.FailedPrecondition, ETag: true},
	// The key of a write at an ETag is absent.
	{Err: warmcache.ErrNotFound, HTTPStatus: http.StatusConflict, GRPC: codes.Aborted,
		Component: codes.FailedPrecondition, ETag: true},
	{Err: ErrUnknownComponent, Component: codes.NotFound},
	{Err: ErrQueryUnsupported, Component: codes.Unimplemented},
	{Err: ErrMisconfigured, Component: codes.InvalidArgument},
	{Err: ErrUnsupported, HTTPStatus: http.StatusBadRequest, GRPC: codes.InvalidArgument, Component: codes.InvalidArgument},
	{Err: warmcache.ErrInvalidKey, HTTPStatus: http.StatusBadRequest, GRPC: codes.InvalidArgument, Component: codes.InvalidArgument},
	{Err: warmcache.ErrInvalidValue, HTTPStatus: http.StatusBadRequest, GRPC: codes.InvalidArgument, Component: codes.InvalidArgument},
	{Err: warmcache.ErrTooLarge, HTTPStatus: http.StatusBadRequest, GRPC: codes.InvalidArgument, Component: codes.InvalidArgument},
	{Err: warmcache.ErrReadOnly, HTTPStatus: http.StatusBadRequest, GRPC: codes.FailedPrecondition, Component: codes.FailedPrecondition},
	{Err: warmcache.ErrConflict, Component: codes.Aborted, Message: "the write conflicted with a concurrent one; retry"},
	{Err: warmcache.ErrOverloaded, HTTPStatus: http.StatusServiceUnavailable, GRPC: codes.Unavailable, RetryAfter: 1,
		Component: codes.Unavailable, Message: "too many requests for the warehouse; retry later"},
	{Err: warmcache.ErrUnavailable, HTTPStatus: http.StatusServiceUnavailable, GRPC: codes.Unavailable, RetryAfter: 1,
		Component: codes.Unavailable, Message: "a storage tier is unavailable; retry later"},
	{Err: context.DeadlineExceeded, HTTPStatus: http.StatusGatewayTimeout, GRPC: codes.DeadlineExceeded,
		Component: codes.DeadlineExceeded, Message: "the request took too long"},
	{Err: context.Canceled, HTTPStatus: 499, GRPC: codes.Canceled,
		Component: codes.Canceled, Message: "the request was cancelled"},
}

// RuntimeFailure returns the runtime API's answer to err; false when the
// runtime API does not know it.
func RuntimeFailure(err error) (Failure, bool) {
	return lookup(err, func(f Failure) bool { return f.HTTPStatus != 0 })
}

// ComponentFailure returns the pluggable component's answer to err; false
// when the component does not know it.
func ComponentFailure(err error) (Failure, bool) {
	return lookup(err, func(f Failure) bool { return f.Component != codes.OK })
}

func lookup(err error, answered func(Failure) bool) (Failure, bool) {
	for _, f := range failures {
		if answered(f) && errors.Is(err, f.Err) {
			return f, true
		}
	}
	return Failure{}, false
}

// Text is what the answer to err shows: the fixed message, or the error's
// own text.
func (f Failure) Text(err error) string {
	if f.Message != "" {
		return f.Message
	}
	return err.Error()
}
