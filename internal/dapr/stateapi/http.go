package stateapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/dapr"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// HTTPOptions bound the HTTP form.
type HTTPOptions struct {
	// MaxBodyBytes bounds a request body. Zero means
	// warmcache.DefaultMaxValueBytes, 1 MiB.
	MaxBodyBytes int64
	// Keys checks the dapr-api-token header of every state request. Nil,
	// or a Keyring without keys, lets every request through.
	Keys *auth.Keyring
}

type httpAPI struct {
	state
	maxBody int64
}

// NewHTTP returns the HTTP form of the state API over svc: the routes of
// Dapr's /v1.0/state/{storename}, and /v1.0/healthz and /v1.0/metadata,
// which SDKs call to find the sidecar. Other Dapr routes answer 501 with
// Dapr's error shape. The handler is safe for concurrent use.
func NewHTTP(svc *warmcache.Service, log *slog.Logger, opts HTTPOptions) http.Handler {
	a := &httpAPI{state: state{svc: svc, keys: opts.Keys, log: log}, maxBody: opts.MaxBodyBytes}
	if a.maxBody <= 0 {
		a.maxBody = warmcache.DefaultMaxValueBytes
	}
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiError{code: "ERR_NOT_IMPLEMENTED", httpStatus: http.StatusNotImplemented,
			message: "warmcache serves only Dapr's state API (/v1.0/state/{storename}); " + r.Method + " " + r.URL.Path + " is not served"})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiError{code: "ERR_METHOD_NOT_ALLOWED", httpStatus: http.StatusMethodNotAllowed,
			message: "method " + r.Method + " is not allowed on " + r.URL.Path})
	})
	r.Get("/v1.0/healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	r.Get("/v1.0/healthz/outbound", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	r.Get("/v1.0/metadata", a.metadata)
	r.Route("/v1.0/state/{store}", func(r chi.Router) {
		r.Post("/", a.save)
		r.Put("/", a.save)
		r.Post("/bulk", a.bulk)
		r.Put("/bulk", a.bulk)
		r.Post("/transaction", a.transaction)
		r.Put("/transaction", a.transaction)
		r.Get("/{key}", a.get)
		r.Delete("/{key}", a.delete)
	})
	query := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiError{code: "ERR_STATE_STORE_NOT_SUPPORTED", httpStatus: http.StatusInternalServerError,
			message: "state store does not support querying"})
	}
	r.Post("/v1.0-alpha1/state/{store}/query", query)
	r.Put("/v1.0-alpha1/state/{store}/query", query)
	return r
}

// fail answers err with Dapr's error shape and the status of the table.
func (a *httpAPI) fail(w http.ResponseWriter, r *http.Request, op operation, store, key string, err error) {
	e, known := toAPIError(op, store, key, err)
	if !known || e.httpStatus >= 500 {
		level := slog.LevelWarn
		if !known {
			level = slog.LevelError
		}
		a.log.LogAttrs(r.Context(), level, "dapr state request failed", slog.String("transport", "http"),
			slog.String("op", op.errorCode()), slog.String("store", store), slog.Any("err", err))
	}
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeError(w, e)
}

type errorBody struct {
	ErrorCode string `json:"errorCode"`
	Message   string `json:"message"`
}

func writeError(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.httpStatus)
	_ = json.NewEncoder(w).Encode(errorBody{ErrorCode: e.code, Message: e.message})
}

// jsonBase64 returns b as the JSON string of its standard base64.
func jsonBase64(b []byte) json.RawMessage {
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(b))+2)
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, b)
	return append(out, '"')
}

// queryMetadata returns the metadata.* query parameters.
func queryMetadata(r *http.Request) map[string]string {
	out := map[string]string{}
	for k, v := range r.URL.Query() {
		if name, ok := strings.CutPrefix(k, "metadata."); ok && len(v) > 0 {
			out[name] = v[0]
		}
	}
	return out
}

// decode reads a JSON body within the size bound.
func (a *httpAPI) decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: body is larger than %d bytes; warmcache's --max-body-bytes (WARMCACHE_MAX_BODY_BYTES) raises the bound", warmcache.ErrTooLarge, tooLarge.Limit)
	case err != nil:
		return fmt.Errorf("%w: reading body: %w", dapr.ErrMalformed, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: failed deserializing HTTP body: %w", dapr.ErrMalformed, err)
	}
	return nil
}

func (a *httpAPI) get(w http.ResponseWriter, r *http.Request) {
	store, key := chi.URLParam(r, "store"), chi.URLParam(r, "key")
	if _, err := a.authorize(r.Context(), r.Header.Get(tokenHeader), store, auth.ScopeRead); err != nil {
		a.fail(w, r, opGet, store, key, err)
		return
	}
	if err := dapr.CheckMetadata(a.metadataOf(store, queryMetadata(r))); err != nil {
		a.fail(w, r, opGet, store, key, err)
		return
	}
	it, found, err := dapr.Read(r.Context(), a.svc, store, key, r.URL.Query().Get("consistency") == dapr.Strong)
	if err != nil {
		a.fail(w, r, opGet, store, key, err)
		return
	}
	if !found {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h := w.Header()
	h.Set("ETag", dapr.ETag(it.Entry.Version))
	for k, v := range dapr.ItemMetadata(it) {
		h.Set("Metadata."+k, v)
	}
	h.Set("X-Cache", string(it.Source))
	h.Set("Content-Type", contentType(it))
	_, _ = w.Write(it.Entry.Value)
}

// stateOptions are the options of a save or delete in a body.
type stateOptions struct {
	Concurrency string `json:"concurrency"`
	Consistency string `json:"consistency"`
}

// stateRequest is one item of a save body, or the request of a transaction
// operation.
type stateRequest struct {
	Key      string            `json:"key"`
	Value    json.RawMessage   `json:"value"`
	ETag     *string           `json:"etag"`
	Metadata map[string]string `json:"metadata"`
	Options  stateOptions      `json:"options"`
}

func (s stateRequest) set(query map[string]string) *dapr.Save {
	return &dapr.Save{Key: s.Key, Value: s.Value, ETag: s.ETag, Concurrency: s.Options.Concurrency, Metadata: merge(s.Metadata, query)}
}

func (s stateRequest) del(query map[string]string) *dapr.Delete {
	return &dapr.Delete{Key: s.Key, ETag: s.ETag, Concurrency: s.Options.Concurrency, Metadata: merge(s.Metadata, query)}
}

// merge adds the query's metadata to an item's, as daprd does.
func merge(item, query map[string]string) map[string]string {
	if len(query) == 0 {
		return item
	}
	out := make(map[string]string, len(item)+len(query))
	for k, v := range item {
		out[k] = v
	}
	for k, v := range query {
		out[k] = v
	}
	return out
}

func (a *httpAPI) save(w http.ResponseWriter, r *http.Request) {
	store := chi.URLParam(r, "store")
	p, err := a.authorize(r.Context(), r.Header.Get(tokenHeader), store, auth.ScopeWrite)
	if err != nil {
		a.fail(w, r, opSave, store, "", err)
		return
	}
	var reqs []stateRequest
	if err := a.decode(w, r, &reqs); err != nil {
		a.fail(w, r, opSave, store, "", err)
		return
	}
	query := queryMetadata(r)
	ops := make([]txOp, len(reqs))
	for i, s := range reqs {
		if s.Key == "" {
			a.fail(w, r, opSave, store, "", fmt.Errorf("%w: \"key\" is a required field", dapr.ErrMalformed))
			return
		}
		ops[i] = txOp{set: s.set(query)}
	}
	if err := a.apply(r.Context(), p, "dapr-http", "save", store, ops, nil); err != nil {
		a.fail(w, r, opSave, store, "", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *httpAPI) delete(w http.ResponseWriter, r *http.Request) {
	store, key := chi.URLParam(r, "store"), chi.URLParam(r, "key")
	p, err := a.authorize(r.Context(), r.Header.Get(tokenHeader), store, auth.ScopeWrite)
	if err != nil {
		a.fail(w, r, opDelete, store, key, err)
		return
	}
	del := &dapr.Delete{Key: key, Concurrency: r.URL.Query().Get("concurrency"), Metadata: queryMetadata(r)}
	if _, ok := r.Header["If-Match"]; ok {
		etag := r.Header.Get("If-Match")
		del.ETag = &etag
	}
	if err := a.apply(r.Context(), p, "dapr-http", "delete", store, []txOp{{del: del}}, nil); err != nil {
		a.fail(w, r, opDelete, store, key, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type bulkRequest struct {
	Keys        []string          `json:"keys"`
	Parallelism int               `json:"parallelism"`
	Metadata    map[string]string `json:"metadata"`
}

type bulkResponseItem struct {
	Key      string            `json:"key"`
	Data     json.RawMessage   `json:"data,omitempty"`
	ETag     string            `json:"etag,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Error    string            `json:"error,omitempty"`
}

func (a *httpAPI) bulk(w http.ResponseWriter, r *http.Request) {
	store := chi.URLParam(r, "store")
	if _, err := a.authorize(r.Context(), r.Header.Get(tokenHeader), store, auth.ScopeRead); err != nil {
		a.fail(w, r, opBulkGet, store, "", err)
		return
	}
	var req bulkRequest
	if err := a.decode(w, r, &req); err != nil {
		a.fail(w, r, opBulkGet, store, "", err)
		return
	}
	if err := dapr.CheckMetadata(a.metadataOf(store, merge(req.Metadata, queryMetadata(r)))); err != nil {
		a.fail(w, r, opBulkGet, store, "", err)
		return
	}
	items, err := dapr.BulkRead(r.Context(), a.svc, store, req.Keys)
	if err != nil {
		a.fail(w, r, opBulkGet, store, "", err)
		return
	}
	out := make([]bulkResponseItem, len(items))
	for i, it := range items {
		out[i] = bulkResponseItem{Key: it.Key}
		if it.Found {
			out[i].Data, out[i].ETag = it.Item.Entry.Value, dapr.ETag(it.Item.Entry.Version)
			out[i].Metadata = dapr.ItemMetadata(it.Item)
			if it.Item.Opaque {
				// The data of a bulk read is JSON: opaque bytes go as
				// the JSON string of their base64.
				out[i].Data = jsonBase64(it.Item.Entry.Value)
				out[i].Metadata[dapr.MetaContentType] = it.Item.MediaType
			}
		}
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(out); err != nil {
		a.fail(w, r, opBulkGet, store, "", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

type transactionRequest struct {
	Operations []struct {
		Operation string       `json:"operation"`
		Request   stateRequest `json:"request"`
	} `json:"operations"`
	Metadata map[string]string `json:"metadata"`
}

func (a *httpAPI) transaction(w http.ResponseWriter, r *http.Request) {
	store := chi.URLParam(r, "store")
	p, err := a.authorize(r.Context(), r.Header.Get(tokenHeader), store, auth.ScopeWrite)
	if err != nil {
		a.fail(w, r, opTransaction, store, "", err)
		return
	}
	var req transactionRequest
	if err := a.decode(w, r, &req); err != nil {
		a.fail(w, r, opTransaction, store, "", err)
		return
	}
	query := queryMetadata(r)
	ops := make([]txOp, len(req.Operations))
	for i, o := range req.Operations {
		switch o.Operation {
		case "upsert":
			ops[i] = txOp{set: o.Request.set(query)}
		case "delete":
			ops[i] = txOp{del: o.Request.del(query)}
		default:
			writeError(w, apiError{code: "ERR_NOT_SUPPORTED_STATE_OPERATION", httpStatus: http.StatusBadRequest,
				message: fmt.Sprintf("operation type %s not supported", o.Operation)})
			return
		}
	}
	if err := a.apply(r.Context(), p, "dapr-http", "transaction", store, ops, merge(req.Metadata, query)); err != nil {
		a.fail(w, r, opTransaction, store, "", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// metadata answers /v1.0/metadata with the stores, so that tools that list
// a sidecar's components see the namespaces as state stores.
func (a *httpAPI) metadata(w http.ResponseWriter, r *http.Request) {
	type component struct {
		Name         string   `json:"name"`
		Type         string   `json:"type"`
		Version      string   `json:"version"`
		Capabilities []string `json:"capabilities"`
	}
	doc := struct {
		ID         string      `json:"id"`
		Components []component `json:"components"`
	}{ID: "warmcache"}
	for _, name := range a.svc.NamespaceNames() {
		doc.Components = append(doc.Components, component{Name: name, Type: "state.warmcache", Version: "v1",
			Capabilities: []string{"ETAG", "TRANSACTIONAL"}})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}
