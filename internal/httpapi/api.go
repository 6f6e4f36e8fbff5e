// Package httpapi is the REST transport: chi routes for /v1/kv, health,
// metrics and the API's OpenAPI document (openapi.json), with bounded bodies
// and one table that maps errors to statuses.
package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Options bound the transport.
type Options struct {
	// MaxBodyBytes bounds a request body. Zero means
	// warmcache.DefaultMaxValueBytes, 1 MiB.
	MaxBodyBytes int64
	// MaxLoadBytes bounds the streamed body of a _load (bulk load), which
	// is not held in memory. Zero means 64 MiB.
	MaxLoadBytes int64
	// LoadIdleTimeout cuts off a _load whose body sends nothing for this
	// long (408); nothing of it is written. Zero means 30s.
	LoadIdleTimeout time.Duration
	// MaxInflight bounds the /v1 requests served at once. Zero means
	// 1024.
	MaxInflight int
	// Keys checks the API key of every /v1/kv request. Nil, or a Keyring
	// without keys, lets every request through unauthenticated.
	Keys *auth.Keyring
}

// defaultMaxInflight is what a zero Options.MaxInflight means.
const defaultMaxInflight = 1024

type api struct {
	svc     *warmcache.Service
	log     *slog.Logger
	maxBody int64
	// mux is the root router: the Allow header of a 405 lists the methods
	// it routes on the request's path.
	mux *chi.Mux
}

// NewHandler returns the REST handler over svc. metrics serves /metrics;
// the request metrics are registered on reg. The handler is safe for
// concurrent use.
func NewHandler(svc *warmcache.Service, metrics http.Handler, reg prometheus.Registerer, log *slog.Logger, opts Options) (http.Handler, error) {
	a := &api{svc: svc, log: log, maxBody: opts.MaxBodyBytes}
	if a.maxBody <= 0 {
		a.maxBody = warmcache.DefaultMaxValueBytes
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	a.mux = r
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = defaultMaxInflight
	}
	r.Use(routeEscaped, m.middleware, a.recoverer, a.limitInflight(opts.MaxInflight))
	r.NotFound(a.noRoute)
	r.MethodNotAllowed(a.methodNotAllowed)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	r.Get("/readyz", a.ready)
	r.Method(http.MethodGet, "/metrics", metrics)
	r.Get("/openapi.json", serveOpenAPI)
	r.Route("/v1/kv/{namespace}", func(r chi.Router) {
		r.Use(a.authorize(opts.Keys))
		r.Post("/_mget", a.mget)
		r.Post("/_query", a.query)
		r.Post("/_load", a.load(opts.MaxLoadBytes, opts.LoadIdleTimeout))
		r.Post("/_invalidate", a.invalidate)
		r.Get("/{key}", a.get)
		r.Put("/{key}", a.put)
		r.Delete("/{key}", a.delete)
	})
	return r, nil
}

// noRoute answers a request whose path no route has: 404 no_route.
func (a *api) noRoute(w http.ResponseWriter, r *http.Request) {
	a.writeError(w, r, fmt.Errorf("%w: %s %s", errNoRoute, r.Method, r.URL.Path))
}

// methodNotAllowed answers a request whose path has routes, none for its
// method: 405 method_not_allowed, with the Allow header. A method that chi
// does not know (such as PURGE) comes here whatever the path, so a path that
// no method routes is a 404 no_route instead.
func (a *api) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	if len(a.allowed(r, false)) == 0 {
		a.noRoute(w, r)
		return
	}
	a.writeError(w, r, fmt.Errorf("%w: %s on %s", errMethodNotAllowed, r.Method, r.URL.Path))
}

// allowed returns the methods that a route answers on the path of r, in
// the order of RFC 9110's method definitions; with readsOnly, only GET and
// HEAD. Routing is on the escaped path, as routeEscaped makes chi do.
func (a *api) allowed(r *http.Request, readsOnly bool) []string {
	path := r.URL.EscapedPath()
	var methods []string
	for _, m := range [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch} {
		if readsOnly && m != http.MethodGet && m != http.MethodHead {
			continue
		}
		if a.mux.Match(chi.NewRouteContext(), m, path) {
			methods = append(methods, m)
		}
	}
	return methods
}

// recoverer turns a panic in a handler into a logged 500.
func (a *api) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				a.writeError(w, r, fmt.Errorf("httpapi: panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	namespace, key, err := nsKey(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	item, err := a.svc.Get(r.Context(), namespace, key)
	// The hot path sets headers in their canonical form directly, sparing
	// Header.Set's canonicalization.
	h := w.Header()
	if item.Source != "" {
		h["X-Cache"] = xCache(item.Source)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	// The ETag and the Content-Length share one string and one slice.
	vals := hitHeaderValues(item.Entry.Version, len(item.Entry.Value))
	etag := vals[0]
	h["Etag"] = vals[0:1:1]
	if match := r.Header.Values("If-None-Match"); len(match) > 0 && noneMatch(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if !item.Entry.ExpiresAt.IsZero() {
		h[expiresHeader] = []string{formatExpiry(item.Entry.ExpiresAt)}
	}
	h["Content-Type"] = contentType(item)
	h["Content-Length"] = vals[1:2:2]
	_, _ = w.Write(item.Entry.Value)
}

// contentType returns the Content-Type header of the value of it: its
// namespace's media type, application/json for the JSON layouts.
func contentType(it warmcache.Item) []string {
	if !it.Opaque {
		return jsonContentType
	}
	return []string{it.MediaType}
}

// opaque reports whether namespace stores opaque bytes (LayoutBytes), for
// a write to judge its request before the core reads its body.
func (a *api) opaque(namespace string) bool {
	ns, err := a.svc.Namespace(namespace)
	return err == nil && ns.Opaque()
}

// expiresHeader tells when an item expires (its writer's TTL), in RFC 3339
// with milliseconds, in UTC; an item without a TTL has none.
const expiresHeader = "Warmcache-Expires"

// formatExpiry is the text of the expiresHeader.
func formatExpiry(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// parseTTL reads the ttl query parameter of a write: a whole number of
// seconds from 1 up to warmcache.MaxTTL. Without it the item never
// expires.
func parseTTL(r *http.Request) (time.Duration, error) {
	q := r.URL.Query()
	if !q.Has("ttl") {
		return 0, nil
	}
	v := q.Get("ttl")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > int64(warmcache.MaxTTL/time.Second) {
		return 0, fmt.Errorf("%w: ttl must be a whole number of seconds from 1 to %d, got %q", errInvalidRequest, int64(warmcache.MaxTTL/time.Second), v)
	}
	return time.Duration(n) * time.Second, nil
}

// hitHeaderValues returns the ETag of version and the text of length, both
// cut from one string, in one slice.
func hitHeaderValues(version int64, length int) []string {
	var buf [48]byte
	b := append(buf[:0], '"')
	b = strconv.AppendInt(b, version, 10)
	b = append(b, '"')
	n := len(b)
	b = strconv.AppendInt(b, int64(length), 10)
	s := string(b)
	return []string{s[:n], s[n:]}
}

func (a *api) put(w http.ResponseWriter, r *http.Request) {
	ifMatch, err := parseIfMatch(r.Header)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	namespace, key, err := nsKey(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	ttl, err := parseTTL(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	// A bytes namespace takes any body under any Content-Type (or none):
	// its values are stored as sent and always served with the
	// namespace's own content type, so the request's is not checked.
	if !a.opaque(namespace) {
		if err := checkJSONType(r); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	body, err := a.readBody(w, r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	items, err := a.svc.Transact(r.Context(), namespace, []warmcache.Op{{Key: key, Value: body, IfMatch: ifMatch, TTL: ttl}})
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	item := items[0]
	if !item.Entry.ExpiresAt.IsZero() {
		w.Header().Set(expiresHeader, formatExpiry(item.Entry.ExpiresAt))
	}
	w.Header().Set("ETag", formatETag(item.Entry.Version))
	w.Header()["Content-Type"] = contentType(item)
	_, _ = w.Write(item.Entry.Value)
}

func (a *api) delete(w http.ResponseWriter, r *http.Request) {
	ifMatch, err := parseIfMatch(r.Header)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	namespace, key, err := nsKey(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := a.svc.Delete(r.Context(), namespace, key, ifMatch); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) mget(w http.ResponseWriter, r *http.Request) {
	namespace, err := pathParam(r, "namespace")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := checkJSONType(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	if r.ContentLength > a.maxBody {
		a.writeError(w, r, fmt.Errorf("%w: body is larger than %d bytes", warmcache.ErrTooLarge, a.maxBody))
		return
	}
	keys, err := decodeMGet(http.MaxBytesReader(w, r.Body, a.maxBody), a.svc.MaxBatchKeys())
	if err != nil {
		a.writeError(w, r, bodyError(err))
		return
	}
	items, err := a.svc.MGet(r.Context(), namespace, keys)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	// The values are written as stored, without decoding them; a bytes
	// namespace's as JSON strings of their standard base64.
	opaque := len(items) > 0 && items[0].Opaque
	var buf bytes.Buffer
	buf.WriteString(`{"items":{`)
	first := true
	var missing []string
	for _, it := range items {
		if !it.Entry.Found {
			missing = append(missing, it.Key.Text)
			continue
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		buf.Write(jsonMarshal(it.Key.Text))
		buf.WriteByte(':')
		if opaque {
			buf.WriteByte('"')
			buf.WriteString(base64.StdEncoding.EncodeToString(it.Entry.Value))
			buf.WriteByte('"')
			continue
		}
		buf.Write(it.Entry.Value)
	}
	buf.WriteString(`},"missing":`)
	if missing == nil {
		missing = []string{}
	}
	buf.Write(jsonMarshal(missing))
	buf.WriteByte('}')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

func (a *api) ready(w http.ResponseWriter, r *http.Request) {
	states := a.svc.Readiness(r.Context())
	tiers := make(map[string]string, len(states))
	status := http.StatusOK
	for _, s := range states {
		tiers[s.Tier] = "ok"
		if s.Err != nil {
			tiers[s.Tier] = "unavailable"
			status = http.StatusServiceUnavailable
			a.log.LogAttrs(r.Context(), slog.LevelWarn, "tier not ready", slog.String("tier", s.Tier), slog.Any("err", s.Err))
		}
	}
	word := "ok"
	if status != http.StatusOK {
		word = "unavailable"
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(jsonMarshal(map[string]any{"status": word, "tiers": tiers}))
}

// readBody reads the whole body within the size bound.
func (a *api) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > a.maxBody {
		return nil, fmt.Errorf("%w: body is larger than %d bytes", warmcache.ErrTooLarge, a.maxBody)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	if err != nil {
		return nil, bodyError(err)
	}
	return body, nil
}

// decode reads a JSON request body into v, refusing unknown fields and
// trailing data.
func (a *api) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if err := checkJSONType(r); err != nil {
		return err
	}
	body, err := a.readBody(w, r)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body is not the expected JSON: %w", errInvalidRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: body has data after the JSON object", errInvalidRequest)
	}
	return nil
}

// Header values shared by every response; net/http only reads them.
var (
	jsonContentType = []string{"application/json"}
	xCacheHot       = []string{string(warmcache.SourceHot)}
	xCacheNear      = []string{string(warmcache.SourceNear)}
	xCacheValues    = map[warmcache.Source][]string{
		warmcache.SourceNear: {string(warmcache.SourceNear)}, warmcache.SourceHot: {string(warmcache.SourceHot)},
		warmcache.SourceWarm: {string(warmcache.SourceWarm)}, warmcache.SourceStale: {string(warmcache.SourceStale)},
	}
)

func xCache(s warmcache.Source) []string {
	switch s {
	case warmcache.SourceHot:
		return xCacheHot
	case warmcache.SourceNear:
		return xCacheNear
	}
	if v, ok := xCacheValues[s]; ok {
		return v
	}
	return []string{string(s)}
}

func formatETag(version int64) string {
	return `"` + strconv.FormatInt(version, 10) + `"`
}

// parseIfMatch reads the If-Match header of h: absent, or one version
// ETag, quoted ("42") or not (42), with blanks around it. A header that is
// present but names no version (empty, unbalanced quotes, a list, "*", a
// weak tag, several headers) is a bad request, never read as absent: a
// client that asked for a conditional write gets no unconditional one.
func parseIfMatch(h http.Header) (*int64, error) {
	values, ok := h["If-Match"]
	if !ok {
		return nil, nil
	}
	if len(values) != 1 {
		return nil, fmt.Errorf("%w: If-Match must be one version ETag such as \"42\", got %d headers", errInvalidRequest, len(values))
	}
	v := strings.Trim(values[0], " \t")
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || v[0] == '+' {
		return nil, fmt.Errorf("%w: If-Match must be a version ETag such as \"42\", got %q", errInvalidRequest, values[0])
	}
	return &n, nil
}

// jsonMarshal encodes v without HTML escaping and without a newline.
func jsonMarshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`null`)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
