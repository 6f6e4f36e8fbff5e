package grpcapi

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// errorCodes is the one table that maps the core's and the access
// control's errors to gRPC codes. Client errors show the error's text,
// which the core writes for clients; server errors show only the fixed
// message here. retry adds a RetryInfo detail (a rate limit error brings
// its own delay).
var errorCodes = []struct {
	err     error
	code    codes.Code
	message string // empty: the error's own text
	retry   time.Duration
}{
	{err: warmcache.ErrNotFound, code: codes.NotFound},
	{err: warmcache.ErrUnknownNamespace, code: codes.NotFound},
	{err: warmcache.ErrInvalidKey, code: codes.InvalidArgument},
	{err: warmcache.ErrInvalidValue, code: codes.InvalidArgument},
	{err: errInvalidRequest, code: codes.InvalidArgument},
	{err: warmcache.ErrTooLarge, code: codes.ResourceExhausted},
	{err: warmcache.ErrReadOnly, code: codes.FailedPrecondition},
	{err: warmcache.ErrVersionMismatch, code: codes.FailedPrecondition},
	{err: warmcache.ErrConflict, code: codes.Aborted, retry: time.Second},
	{err: errLoadIdle, code: codes.DeadlineExceeded},
	{err: warmcache.ErrOverloaded, code: codes.ResourceExhausted, message: "too many requests for the warehouse; retry later", retry: time.Second},
	{err: warmcache.ErrUnavailable, code: codes.Unavailable, message: "a storage tier is unavailable; retry later", retry: time.Second},
	{err: auth.ErrUnauthenticated, code: codes.Unauthenticated, message: auth.ErrUnauthenticated.Error()},
	{err: auth.ErrForbidden, code: codes.PermissionDenied},
	{err: auth.ErrRateLimited, code: codes.ResourceExhausted},
	{err: context.DeadlineExceeded, code: codes.DeadlineExceeded, message: "the request took too long"},
	{err: context.Canceled, code: codes.Canceled, message: "the request was cancelled"},
}

// errInvalidRequest marks a request that is malformed before it reaches
// the core, such as a Load stream without a namespace.
var errInvalidRequest = errors.New("invalid request")

// toStatus turns err into the status of the table; an error the table does
// not know is INTERNAL, and its text is logged, never sent.
func (a *API) toStatus(ctx context.Context, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range errorCodes {
		if !errors.Is(err, e.err) {
			continue
		}
		msg := e.message
		if msg == "" {
			msg = err.Error()
		}
		retry := e.retry
		var rl *auth.RateLimitError
		if errors.As(err, &rl) {
			retry = time.Duration(rl.RetryAfterSeconds()) * time.Second
		}
		if e.code == codes.Unavailable || e.code == codes.DeadlineExceeded {
			a.log.LogAttrs(ctx, slog.LevelWarn, "request failed", slog.String("method", method), slog.Any("err", err))
		}
		st := status.New(e.code, msg)
		if retry > 0 {
			if withRetry, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); derr == nil {
				st = withRetry
			}
		}
		return st.Err()
	}
	a.log.LogAttrs(ctx, slog.LevelError, "internal error", slog.String("method", method), slog.Any("err", err))
	return status.Error(codes.Internal, "internal error")
}
