package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// invalidateRequest is the body of POST /v1/kv/{namespace}/_invalidate:
// either keys (at least one) or "all": true, and only one of the two
// members, as the OpenAPI document's InvalidateRequest says. The members
// stay raw so that a member given as null, [] or false counts as given.
type invalidateRequest struct {
	Keys json.RawMessage `json:"keys"`
	All  json.RawMessage `json:"all"`
}

// parse returns the keys of r, or all; an error says which rule r breaks.
func (r invalidateRequest) parse() (keys []json.RawMessage, all bool, err error) {
	switch {
	case r.Keys != nil && r.All != nil:
		return nil, false, errors.New(`give either keys or "all": true, not both`)
	case r.All != nil:
		if err := json.Unmarshal(r.All, &all); err != nil || !all {
			return nil, false, errors.New(`"all" must be true; to invalidate keys, give keys alone`)
		}
		return nil, true, nil
	case r.Keys != nil:
		if err := json.Unmarshal(r.Keys, &keys); err != nil || len(keys) == 0 {
			return nil, false, errors.New(`"keys" must be an array of at least one key`)
		}
		return keys, false, nil
	}
	return nil, false, errors.New(`give either keys or "all": true`)
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
	raws, all, err := req.parse()
	if err != nil {
		a.writeError(w, r, fmt.Errorf("%w: %w", errInvalidRequest, err))
		return
	}
	keys := make([]string, len(raws))
	for i, raw := range raws {
		k, err := keyText(raw)
		if err != nil {
			a.writeError(w, r, fmt.Errorf("%w: keys[%d]: %w", errInvalidRequest, i, err))
			return
		}
		keys[i] = k
	}
	n, err := a.svc.Invalidate(r.Context(), chi.URLParam(r, "namespace"), keys, all)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if all {
		_, _ = w.Write([]byte(`{"all":true}`))
		return
	}
	_, _ = fmt.Fprintf(w, `{"invalidated":%d}`, n)
}
