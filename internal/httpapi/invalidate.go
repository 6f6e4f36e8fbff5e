package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// invalidateRequest is the body of POST /v1/kv/{namespace}/_invalidate:
// either keys, or all.
type invalidateRequest struct {
	Keys []json.RawMessage `json:"keys"`
	All  bool              `json:"all"`
}

// invalidate answers POST /v1/kv/{namespace}/_invalidate: the listed keys
// are read again from the warehouse, or, with "all": true, every cached
// entry of the namespace is retired at once (a new generation). It needs
// the write scope and is audit-logged like every write. The answer is
// {"invalidated": N} for keys and {"all": true} for the namespace.
func (a *api) invalidate(w http.ResponseWriter, r *http.Request) {
	var req invalidateRequest
	if err := a.decode(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	if req.All == (len(req.Keys) > 0) {
		a.writeError(w, r, fmt.Errorf("%w: give either keys or \"all\": true", errInvalidRequest))
		return
	}
	keys := make([]string, len(req.Keys))
	for i, raw := range req.Keys {
		k, err := keyText(raw)
		if err != nil {
			a.writeError(w, r, fmt.Errorf("%w: keys[%d]: %w", errInvalidRequest, i, err))
			return
		}
		keys[i] = k
	}
	n, err := a.svc.Invalidate(r.Context(), chi.URLParam(r, "namespace"), keys, req.All)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if req.All {
		_, _ = w.Write([]byte(`{"all":true}`))
		return
	}
	_, _ = fmt.Fprintf(w, `{"invalidated":%d}`, n)
}
