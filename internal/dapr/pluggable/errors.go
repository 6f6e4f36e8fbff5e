package daprstore

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/internal/daprapi"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// etagField is the field of the BadRequest violation by which daprd tells
// an ETag error from any other error of the same code.
const etagField = "etag"

// errorTable is the one table that maps errors to the statuses daprd
// expects of a pluggable state store. A row with etag adds the "etag" field
// violation, which daprd turns into its ETag error (mismatch for
// FailedPrecondition, invalid for InvalidArgument). Client errors show the
// error's text, which the core writes for clients; server errors show only
// the fixed message here.
var errorTable = []struct {
	err     error
	code    codes.Code
	etag    bool
	message string // empty: the error's own text
}{
	{err: warmcache.ErrVersionMismatch, code: codes.FailedPrecondition, etag: true},
	// The key of a write at an ETag is absent.
	{err: warmcache.ErrNotFound, code: codes.FailedPrecondition, etag: true},
	{err: daprapi.ErrETagInvalid, code: codes.InvalidArgument, etag: true},
	{err: errUnknownComponent, code: codes.NotFound},
	{err: errQueryUnsupported, code: codes.Unimplemented},
	{err: errMisconfigured, code: codes.InvalidArgument},
	{err: daprapi.ErrMalformed, code: codes.InvalidArgument},
	{err: daprapi.ErrUnsupported, code: codes.InvalidArgument},
	{err: warmcache.ErrInvalidKey, code: codes.InvalidArgument},
	{err: warmcache.ErrInvalidValue, code: codes.InvalidArgument},
	{err: warmcache.ErrTooLarge, code: codes.InvalidArgument},
	{err: warmcache.ErrReadOnly, code: codes.FailedPrecondition},
	{err: warmcache.ErrConflict, code: codes.Aborted, message: "the write conflicted with a concurrent one; retry"},
	{err: warmcache.ErrOverloaded, code: codes.Unavailable, message: "too many requests for the warehouse; retry later"},
	{err: warmcache.ErrUnavailable, code: codes.Unavailable, message: "a storage tier is unavailable; retry later"},
	{err: context.DeadlineExceeded, code: codes.DeadlineExceeded, message: "the request took too long"},
	{err: context.Canceled, code: codes.Canceled, message: "the request was cancelled"},
}

// fail turns err, from method, into its status. An error the table does
// not know is internal: it is logged, and only "internal error" is sent.
func (s *Store) fail(ctx context.Context, method string, err error) error {
	for _, row := range errorTable {
		if !errors.Is(err, row.err) {
			continue
		}
		msg := row.message
		if msg == "" {
			msg = err.Error()
		}
		if row.code == codes.Unavailable || row.code == codes.DeadlineExceeded {
			s.log.LogAttrs(ctx, slog.LevelWarn, "dapr component request failed", slog.String("method", method), slog.Any("err", err))
		}
		st := status.New(row.code, msg)
		if row.etag {
			detailed, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
				{Field: etagField, Description: msg},
			}})
			if derr == nil {
				st = detailed
			}
		}
		return st.Err()
	}
	s.log.LogAttrs(ctx, slog.LevelError, "dapr component request failed", slog.String("method", method), slog.Any("err", err))
	return status.Error(codes.Internal, "internal error")
}
