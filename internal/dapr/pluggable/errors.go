package pluggable

import (
	"context"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/internal/dapr"
)

// etagField is the field of the BadRequest violation by which daprd tells
// an ETag error from any other error of the same code.
const etagField = "etag"

// fail turns err, from method, into the status daprd expects of a
// pluggable state store (dapr/pkg/components/state/pluggable.go), through
// the Dapr error table (dapr.ComponentFailure). A row with ETag adds the
// "etag" field violation. An error the table does not know is internal: it
// is logged, and only "internal error" is sent.
func (s *Store) fail(ctx context.Context, method string, err error) error {
	f, known := dapr.ComponentFailure(err)
	if !known {
		s.log.LogAttrs(ctx, slog.LevelError, "dapr component request failed", slog.String("method", method), slog.Any("err", err))
		return status.Error(codes.Internal, "internal error")
	}
	msg := f.Text(err)
	if f.Component == codes.Unavailable || f.Component == codes.DeadlineExceeded {
		s.log.LogAttrs(ctx, slog.LevelWarn, "dapr component request failed", slog.String("method", method), slog.Any("err", err))
	}
	st := status.New(f.Component, msg)
	if f.ETag {
		detailed, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: etagField, Description: msg},
		}})
		if derr == nil {
			st = detailed
		}
	}
	return st.Err()
}
