package stateapi

import (
	"errors"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/warmcache/warmcache/internal/dapr"
	"github.com/warmcache/warmcache/internal/warmcache"
)

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
		{opSave, dapr.ErrETagInvalid, "ERR_STATE_SAVE", http.StatusBadRequest, codes.InvalidArgument},
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
