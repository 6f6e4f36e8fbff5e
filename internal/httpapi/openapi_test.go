package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/httpapi"
)

// apiDoc is the OpenAPI document of the REST API (openapi.json, which the
// service embeds and serves), loaded to check requests and responses
// against it.
type apiDoc struct {
	doc    *openapi3.T
	router routers.Router
}

// loadAPIDoc loads and validates openapi.json.
func loadAPIDoc(t testing.TB) *apiDoc {
	t.Helper()
	data, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI document: %v", err)
	}
	// The legacy router matches the method with the path, as chi does: a
	// key spelled like a batch route (GET /v1/kv/ns/_load) is a key.
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return &apiDoc{doc: doc, router: router}
}

// reporter is the part of testing.TB that checks report through.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// The responses of a request that no operation of the document matches.
const (
	noRouteResponse          = "NoRoute"
	methodNotAllowedResponse = "MethodNotAllowed"
)

// checked returns h with every request it serves and every response it
// gives checked against the document, each mismatch reported to t:
//
//   - the request is matched to an operation; a request that none matches
//     must answer NoRoute (404) or, when the path has operations for other
//     methods, MethodNotAllowed (405) with those methods in Allow, or an
//     error that comes before routing (authentication, overload);
//   - a request that the operation refuses (parameters, body, Content-Type)
//     must answer a 4xx error;
//   - the status must be one the operation declares;
//   - every header but Content-Type and the framing ones must be declared
//     for that status, and the required ones present;
//   - the body must match the declared media type and schema, and none may
//     come where none is declared;
//   - an error's code must be one that the response lists in
//     x-error-codes.
func (d *apiDoc) checked(t reporter, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				t.Errorf("%s %s: reading the request body: %v", r.Method, r.URL.RequestURI(), err)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		ex := d.request(r, body)
		c := &capture{ResponseWriter: w}
		h.ServeHTTP(c, r)
		if c.status == 0 {
			c.status, c.header = http.StatusOK, w.Header().Clone()
		}
		d.checkResponse(t, ex, c.status, c.header, c.body.Bytes())
	})
}

// exchange is a request as the document sees it.
type exchange struct {
	what  string // method and path, for messages
	input *openapi3filter.RequestValidationInput
	// refused is why the document refuses the request; nil when it
	// accepts it.
	refused error
	// allow is the document's methods for the path when no operation
	// matches the request.
	allow []string
}

// request matches r (whose body is body) to an operation of the document
// and validates it.
func (d *apiDoc) request(r *http.Request, body []byte) *exchange {
	vr := r.Clone(r.Context())
	vr.Body = io.NopCloser(bytes.NewReader(body))
	ex := &exchange{what: r.Method + " " + r.URL.RequestURI()}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, SkipSettingDefaults: true,
		IncludeResponseStatus: true}
	route, params, ok := d.find(vr, r.Method)
	if !ok {
		// The order of RFC 9110's method definitions, as the service's.
		for _, m := range [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
			http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch} {
			if _, _, ok := d.find(vr, m); ok {
				ex.allow = append(ex.allow, m)
			}
		}
		ex.input = &openapi3filter.RequestValidationInput{Request: vr, Route: d.unrouted(r, ex.allow), Options: opts}
		return ex
	}
	ex.input = &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: opts}
	ex.refused = openapi3filter.ValidateRequest(r.Context(), ex.input)
	if ex.refused == nil {
		ex.refused = d.checkItems(route.Operation, r.Header.Get("Content-Type"), body)
	}
	return ex
}

// checkItems validates each line of a body of a sequential media type
// (NDJSON) against the item schema its media type gives (x-itemSchema,
// OpenAPI 3.2's itemSchema); blank lines are skipped, as the service does.
// A body whose media type has no item schema is not checked here.
func (d *apiDoc) checkItems(op *openapi3.Operation, contentType string, body []byte) error {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil
	}
	if contentType == "" {
		contentType = "application/x-ndjson" // what _load reads a body without Content-Type as
	}
	mt := op.RequestBody.Value.Content.Get(contentType)
	if mt == nil {
		return nil
	}
	ref, ok := mt.Extensions["x-itemSchema"].(map[string]any)
	if !ok {
		return nil
	}
	name, _ := strings.CutPrefix(fmt.Sprint(ref["$ref"]), "#/components/schemas/")
	schema := d.doc.Components.Schemas[name]
	if schema == nil || schema.Value == nil {
		return fmt.Errorf("x-itemSchema %v names no schema", ref["$ref"])
	}
	for i, line := range bytes.Split(body, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			return fmt.Errorf("line %d is not JSON: %w", i+1, err)
		}
		if err := schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			return fmt.Errorf("line %d: %w", i+1, err)
		}
	}
	return nil
}

// find returns the operation of the document for r's path and method, and
// its path parameters, percent-decoded once. Matching is on the escaped
// path, so that an escaped slash stays inside its segment, and must be
// exact, with no empty parameter: the router forgives a missing last
// segment or a trailing slash, which OpenAPI's path templating does not.
func (d *apiDoc) find(r *http.Request, method string) (*routers.Route, map[string]string, bool) {
	path := r.URL.EscapedPath()
	mr := r.Clone(r.Context())
	mr.Method = method
	mr.URL.Path, mr.URL.RawPath = path, ""
	route, params, err := d.router.FindRoute(mr)
	if err != nil {
		return nil, nil, false
	}
	expanded := route.Path
	for k, v := range params {
		if v == "" {
			return nil, nil, false
		}
		expanded = strings.ReplaceAll(expanded, "{"+k+"}", v)
	}
	if expanded != path {
		return nil, nil, false
	}
	for k, v := range params {
		dec, err := url.PathUnescape(v)
		if err != nil {
			return nil, nil, false
		}
		params[k] = dec
	}
	return route, params, true
}

// unrouted is the route of a request that no operation matches: its
// answer is NoRoute or MethodNotAllowed, or, for a /v1/ path, an error of
// authentication or overload, which come before routing.
func (d *apiDoc) unrouted(r *http.Request, allow []string) *routers.Route {
	responses := openapi3.NewResponses()
	responses.Delete("default")
	add := func(status int, name string) {
		responses.Set(fmt.Sprint(status), &openapi3.ResponseRef{Ref: "#/components/responses/" + name, Value: d.doc.Components.Responses[name].Value})
	}
	if len(allow) == 0 {
		add(http.StatusNotFound, noRouteResponse)
	} else {
		add(http.StatusMethodNotAllowed, methodNotAllowedResponse)
	}
	add(http.StatusInternalServerError, "Internal")
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		add(http.StatusUnauthorized, "Unauthorized")
		add(http.StatusForbidden, "Forbidden")
		add(http.StatusTooManyRequests, "TooManyRequests")
		add(http.StatusServiceUnavailable, "Unavailable")
	}
	return &routers.Route{Spec: d.doc, Method: r.Method, PathItem: &openapi3.PathItem{},
		Operation: &openapi3.Operation{Responses: responses}}
}

// checkResponse checks the response of ex against the document.
func (d *apiDoc) checkResponse(t reporter, ex *exchange, status int, header http.Header, body []byte) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s answered %d: %s", ex.what, status, fmt.Sprintf(format, args...))
	}
	if ex.refused != nil && (status < 400 || status > 499) {
		fail("the document refuses the request, the service did not: %v", ex.refused)
	}
	op := ex.input.Route.Operation
	ref := op.Responses.Status(status)
	if ref == nil || ref.Value == nil {
		fail("the status is not declared; body %.200s", body)
		return
	}
	resp := ref.Value
	// The headers of HTTP itself, which no operation declares; the body's
	// Content-Type is checked against its declared media types.
	framing := [...]string{"Content-Length", "Content-Type", "Date", "Connection", "Transfer-Encoding", "Trailer"}
	for name := range header {
		if slices.Contains(framing[:], name) {
			continue
		}
		if declared(resp.Headers, name) == nil {
			fail("header %s (%q) is not declared", name, header.Get(name))
		}
	}
	for name, h := range resp.Headers {
		if h.Value != nil && h.Value.Required && len(header.Values(name)) == 0 {
			fail("the required header %s is missing", name)
		}
	}
	if len(resp.Content) == 0 {
		if len(body) > 0 || header.Get("Content-Type") != "" {
			fail("a body (%s, %.100q) where none is declared", header.Get("Content-Type"), body)
		}
	} else if len(body) > 0 {
		ct := header.Get("Content-Type")
		if resp.Content.Get(ct) == nil {
			fail("Content-Type %q is not declared", ct)
		}
		if codes, ok := resp.Extensions["x-error-codes"].([]any); ok && strings.HasPrefix(ct, "application/json") {
			var doc struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &doc); err != nil || !slices.Contains(codes, any(doc.Error.Code)) {
				fail("error code %q is not one of the response's %v (body %.200s)", doc.Error.Code, codes, body)
			}
		}
	}
	if len(ex.allow) > 0 && status == http.StatusMethodNotAllowed {
		if got, want := header.Get("Allow"), strings.Join(ex.allow, ", "); got != want {
			fail("Allow: %q, the document's methods for the path are %q", got, want)
		}
	}
	in := &openapi3filter.ResponseValidationInput{RequestValidationInput: ex.input, Status: status, Header: header,
		Options: ex.input.Options}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		fail("%v", err)
	}
}

// declared returns the header called name (in any case) of headers.
func declared(headers openapi3.Headers, name string) *openapi3.HeaderRef {
	for k, h := range headers {
		if strings.EqualFold(k, name) {
			return h
		}
	}
	return nil
}

// capture is a ResponseWriter that passes everything on and keeps the
// status, the header as it was sent and the body.
type capture struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (c *capture) WriteHeader(status int) {
	if c.status == 0 {
		c.status, c.header = status, c.ResponseWriter.Header().Clone()
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *capture) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status, c.header = http.StatusOK, c.ResponseWriter.Header().Clone()
	}
	c.body.Write(b)
	return c.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (c *capture) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// TestOpenAPIDocument checks the document itself: an OpenAPI 3.1 document
// that kin-openapi loads and validates, copied unchanged to
// docs/openapi.json, and served unchanged at GET /openapi.json.
func TestOpenAPIDocument(t *testing.T) {
	d := loadAPIDoc(t)
	if d.doc.OpenAPI != "3.1.0" || !d.doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %q, want 3.1.0", d.doc.OpenAPI)
	}
	canonical, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	published, err := os.ReadFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(published, canonical) {
		t.Error("docs/openapi.json differs from internal/httpapi/openapi.json, the one the service embeds and serves; " +
			"edit the latter and copy it: cp internal/httpapi/openapi.json docs/openapi.json")
	}
	c := newContract(t)
	w := c.do(t, http.MethodGet, "/openapi.json", "")
	expect(t, w, http.StatusOK, "", "Content-Type", "application/json")
	if !bytes.Equal(w.Body.Bytes(), canonical) {
		t.Error("GET /openapi.json does not serve openapi.json")
	}
}

// TestOpenAPIRoutes checks that every route of the handler is an operation
// of the document, and every operation of the document a route.
func TestOpenAPIRoutes(t *testing.T) {
	d := loadAPIDoc(t)
	h, err := httpapi.NewHandler(nil, http.NotFoundHandler(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler), httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("the handler is a %T, not a chi router", h)
	}
	routed := map[string]bool{}
	err = chi.Walk(mux, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, item := range d.doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	for r := range routed {
		if !documented[r] {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for r := range documented {
		if !routed[r] {
			t.Errorf("openapi.json has %s, which no route serves", r)
		}
	}
	if len(routed) == 0 {
		t.Error("chi.Walk found no routes")
	}
}

// reports is a reporter that keeps what it is told.
type reports struct{ errs []string }

func (r *reports) Helper() {}
func (r *reports) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestOpenAPICheckCatchesDrift checks the checks: answers that the document
// does not describe are reported, and answers that it does are not.
func TestOpenAPICheckCatchesDrift(t *testing.T) {
	d := loadAPIDoc(t)
	// answer returns a handler that answers status with the headers
	// (name, value pairs) and body.
	answer := func(status int, body string, header ...string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i+1 < len(header); i += 2 {
				w.Header().Set(header[i], header[i+1])
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		})
	}
	errBody := func(code string) string { return `{"error":{"code":"` + code + `","message":"m"}}` }
	const json = "application/json"
	for _, tc := range []struct {
		name         string
		method, path string
		header       []string // of the request
		body         string   // of the request; empty: {}
		h            http.Handler
		want         string // in the report; empty: no report
	}{
		{"a declared answer", "GET", "/healthz", nil, "", answer(200, `{"status":"ok"}`, "Content-Type", json), ""},
		{"a declared error", "GET", "/v1/kv/widgets/1", nil, "", answer(404, errBody("not_found"), "Content-Type", json, "X-Cache", "miss"), ""},
		{"an Allow of the document's methods", "PATCH", "/healthz", nil, "",
			answer(405, errBody("method_not_allowed"), "Content-Type", json, "Allow", "GET"), ""},
		{"an undeclared status", "GET", "/healthz", nil, "", answer(418, errBody("internal"), "Content-Type", json), "status is not declared"},
		{"an undeclared header", "GET", "/healthz", nil, "", answer(200, `{"status":"ok"}`, "Content-Type", json, "X-Debug", "1"),
			"header X-Debug"},
		{"an error code outside the enum", "GET", "/v1/kv/widgets/1", nil, "", answer(404, errBody("gone"), "Content-Type", json),
			"doesn't match schema"},
		{"an error code of another status", "GET", "/v1/kv/widgets/1", nil, "", answer(404, errBody("forbidden"), "Content-Type", json),
			`error code "forbidden" is not one of`},
		{"a missing required header", "PUT", "/v1/kv/frozen/a", []string{"Content-Type", json}, "",
			answer(405, errBody("read_only"), "Content-Type", json), "required header Allow"},
		{"a header of the wrong form", "GET", "/v1/kv/widgets/1", nil, "",
			answer(200, `1`, "Content-Type", json, "ETag", "7", "X-Cache", "hit"), `"ETag" doesn't match schema`},
		{"a body where none is declared", "DELETE", "/v1/kv/widgets/1", nil, "", answer(204, `{}`, "Content-Type", json),
			"where none is declared"},
		{"an undeclared media type", "GET", "/healthz", nil, "", answer(200, `ok`, "Content-Type", "text/plain"), "Content-Type"},
		{"a body off its schema", "GET", "/readyz", nil, "", answer(200, `{"status":"fine","tiers":{}}`, "Content-Type", json),
			"doesn't match schema"},
		{"a header off its const", "POST", "/v1/kv/widgets/_query", []string{"Content-Type", json}, `{"match":{}}`,
			answer(200, `{"items":[]}`, "Content-Type", json, "X-Cache", "hit", "Cache-Control", "no-store"), `"X-Cache" doesn't match schema`},
		{"a 4xx to a request the document accepts", "POST", "/v1/kv/widgets/_invalidate", []string{"Content-Type", json}, "",
			answer(400, errBody("invalid_request"), "Content-Type", json), ""},
		{"a body off its oneOf", "POST", "/v1/kv/widgets/_invalidate", []string{"Content-Type", json}, "",
			answer(200, `{"all":false}`, "Content-Type", json), "doesn't match schema"},
		{"an undocumented route", "GET", "/debug", nil, "", answer(200, `{}`, "Content-Type", json), "status is not declared"},
		{"an Allow other than the document's", "PATCH", "/healthz", nil, "",
			answer(405, errBody("method_not_allowed"), "Content-Type", json, "Allow", "GET, POST"), `the document's methods for the path are "GET"`},
		{"a refused request served", "DELETE", "/v1/kv/widgets/1", []string{"If-Match", "W/abc"}, "", answer(204, ""),
			"the document refuses the request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if body == "" {
				body = `{}`
			}
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(body))
			for i := 0; i+1 < len(tc.header); i += 2 {
				req.Header.Set(tc.header[i], tc.header[i+1])
			}
			var r reports
			d.checked(&r, tc.h).ServeHTTP(httptest.NewRecorder(), req)
			switch {
			case tc.want == "" && len(r.errs) > 0:
				t.Errorf("reported %q", r.errs)
			case tc.want != "" && !slices.ContainsFunc(r.errs, func(e string) bool { return strings.Contains(e, tc.want) }):
				t.Errorf("reported %q, want a report with %q", r.errs, tc.want)
			}
		})
	}
}
