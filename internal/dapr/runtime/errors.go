package daprapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// operation is a Dapr state operation, which names the error code and the
// message of its failures, as daprd does.
type operation int

const (
	opGet operation = iota
	opBulkGet
	opSave
	opDelete
	opBulkDelete
	opTransaction
)

// errorCode is Dapr's errorCode of a failed operation.
func (o operation) errorCode() string {
	return [...]string{"ERR_STATE_GET", "ERR_STATE_BULK_GET", "ERR_STATE_SAVE", "ERR_STATE_DELETE",
		"ERR_STATE_BULK_DELETE", "ERR_STATE_TRANSACTION"}[o]
}

// message words a failure of the operation as daprd does.
func (o operation) message(store, key, detail string) string {
	switch o {
	case opGet:
		return fmt.Sprintf("fail to get %s from state store %s: %s", key, store, detail)
	case opSave:
		return fmt.Sprintf("failed saving state in state store %s: %s", store, detail)
	case opDelete:
		return fmt.Sprintf("failed deleting state with key %s: %s", key, detail)
	case opBulkDelete:
		return fmt.Sprintf("failed deleting state in state store %s: %s", store, detail)
	case opTransaction:
		return fmt.Sprintf("error while executing state transaction: %s", detail)
	default:
		return detail
	}
}

// apiError is an error as Dapr answers it: an errorCode and a message
// for HTTP ({"errorCode":...,"message":...}) and a gRPC status.
type apiError struct {
	code       string
	message    string
	httpStatus int
	grpcCode   codes.Code
	retryAfter int // seconds; zero: no Retry-After
}

// errorTable is the one table that maps the core's and the access
// control's errors to Dapr's answers, for both transports. op is the
// operation's own errorCode; a row with a code keeps it. Client errors show
// the error's text, which the core writes for clients; server errors show
// only the fixed message here.
var errorTable = []struct {
	err        error
	code       string // empty: the operation's code
	httpStatus int
	grpcCode   codes.Code
	message    string // empty: the error's own text
	retryAfter int
}{
	{err: warmcache.ErrUnknownNamespace, code: "ERR_STATE_STORE_NOT_FOUND", httpStatus: http.StatusBadRequest, grpcCode: codes.InvalidArgument},
	{err: auth.ErrUnauthenticated, code: "ERR_UNAUTHENTICATED", httpStatus: http.StatusUnauthorized, grpcCode: codes.Unauthenticated,
		message: "a valid API key is required in the dapr-api-token header"},
	{err: auth.ErrForbidden, code: "ERR_PERMISSION_DENIED", httpStatus: http.StatusForbidden, grpcCode: codes.PermissionDenied},
	{err: auth.ErrRateLimited, code: "ERR_TOO_MANY_REQUESTS", httpStatus: http.StatusTooManyRequests, grpcCode: codes.ResourceExhausted, retryAfter: 1},
	{err: errMalformed, code: "ERR_MALFORMED_REQUEST", httpStatus: http.StatusBadRequest, grpcCode: codes.InvalidArgument},
	{err: errETagInvalid, httpStatus: http.StatusBadRequest, grpcCode: codes.InvalidArgument},
	{err: warmcache.ErrVersionMismatch, httpStatus: http.StatusConflict, grpcCode: codes.Aborted},
	{err: warmcache.ErrNotFound, httpStatus: http.StatusConflict, grpcCode: codes.Aborted},
	{err: errUnsupported, httpStatus: http.StatusBadRequest, grpcCode: codes.InvalidArgument},
	{err: warmcache.ErrInvalidKey, httpStatus: http.StatusBadRequest, grpcCode: codes.InvalidArgument},
	{err: warmcache.ErrInvalidValue, httpStatus: http.StatusBadRequest, grpcCode: codes.InvalidArgument},
	{err: warmcache.ErrTooLarge, httpStatus: http.StatusBadRequest, grpcCode: codes.InvalidArgument},
	{err: warmcache.ErrReadOnly, httpStatus: http.StatusBadRequest, grpcCode: codes.FailedPrecondition},
	{err: warmcache.ErrOverloaded, httpStatus: http.StatusServiceUnavailable, grpcCode: codes.Unavailable,
		message: "too many requests for the warehouse; retry later", retryAfter: 1},
	{err: warmcache.ErrUnavailable, httpStatus: http.StatusServiceUnavailable, grpcCode: codes.Unavailable,
		message: "a storage tier is unavailable; retry later", retryAfter: 1},
	{err: context.DeadlineExceeded, httpStatus: http.StatusGatewayTimeout, grpcCode: codes.DeadlineExceeded, message: "the request took too long"},
	{err: context.Canceled, httpStatus: 499, grpcCode: codes.Canceled, message: "the request was cancelled"},
}

// toAPIError maps err, from operation op on store (and key, for single-key
// operations), through the table. An error the table does not know is
// internal: its text is logged by the caller, never sent.
func toAPIError(op operation, store, key string, err error) (apiError, bool) {
	for _, row := range errorTable {
		if !errors.Is(err, row.err) {
			continue
		}
		detail := row.message
		if detail == "" {
			detail = err.Error()
		}
		e := apiError{code: row.code, httpStatus: row.httpStatus, grpcCode: row.grpcCode, retryAfter: row.retryAfter}
		switch {
		case row.err == warmcache.ErrUnknownNamespace:
			e.message = fmt.Sprintf("state store %s is not found", store)
		case row.code != "":
			e.message = detail
		default:
			e.code = op.errorCode()
			if row.err == warmcache.ErrVersionMismatch || row.err == warmcache.ErrNotFound {
				detail = "possible etag mismatch. error from state store: " + detail
			}
			e.message = op.message(store, key, detail)
		}
		if op == opTransaction && e.grpcCode == codes.Aborted {
			// daprd answers every failed transaction as an internal error.
			e.httpStatus, e.grpcCode = http.StatusInternalServerError, codes.Internal
		}
		return e, true
	}
	return apiError{code: op.errorCode(), message: op.message(store, key, "internal error"),
		httpStatus: http.StatusInternalServerError, grpcCode: codes.Internal}, false
}
