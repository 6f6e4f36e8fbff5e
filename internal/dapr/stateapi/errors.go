package stateapi

import (
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/warmcache/warmcache/internal/dapr"
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

// toAPIError maps err, from operation op on store (and key, for single-key
// operations), through the Dapr error table (dapr.RuntimeFailure), in the
// words of op. An error the table does not know is internal: its text is
// logged by the caller, never sent.
func toAPIError(op operation, store, key string, err error) (apiError, bool) {
	f, known := dapr.RuntimeFailure(err)
	if !known {
		return apiError{code: op.errorCode(), message: op.message(store, key, "internal error"),
			httpStatus: http.StatusInternalServerError, grpcCode: codes.Internal}, false
	}
	detail := f.Text(err)
	e := apiError{code: f.Code, httpStatus: f.HTTPStatus, grpcCode: f.GRPC, retryAfter: f.RetryAfter}
	switch {
	case f.Err == warmcache.ErrUnknownNamespace:
		e.message = fmt.Sprintf("state store %s is not found", store)
	case f.Code != "":
		e.message = detail
	default:
		e.code = op.errorCode()
		if f.Err == warmcache.ErrVersionMismatch || f.Err == warmcache.ErrNotFound {
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
