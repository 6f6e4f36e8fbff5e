package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/httpapi"
)

// BenchmarkMiddleware serves GETs of a constant body through the whole
// REST handler (its middleware chain, both chi routers and authorization)
// on a route of its own beside the key routes, in process: what a hit
// pays for the transport, without the core's read and without a socket.
// The same route on a bare chi router is the reference. Its requests are not
// checked against the OpenAPI document, as the contract tests' are: the route
// is not the API's, and checking would cost more than what is measured.
//
//	go test ./internal/httpapi -run '^$' -bench Middleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	body := make([]byte, 460)
	constant := func(w http.ResponseWriter, r *http.Request) {
		_ = chi.URLParam(r, "key")
		h := w.Header()
		h["Etag"] = []string{`"1"`}
		h["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(body)
	}
	bare := chi.NewRouter()
	bare.Route("/v1/kv/{namespace}", func(r chi.Router) { r.Get("/_const/{key}", constant) })

	reg := prometheus.NewRegistry()
	h, err := httpapi.NewHandler(nil, http.NotFoundHandler(), reg, slog.New(slog.NewTextHandler(io.Discard, nil)), httpapi.Options{})
	if err != nil {
		b.Fatal(err)
	}
	mounted := false
	for _, rt := range h.(*chi.Mux).Routes() {
		if sub, ok := rt.SubRoutes.(*chi.Mux); ok && rt.Pattern == "/v1/kv/{namespace}/*" {
			sub.Get("/_const/{key}", constant)
			mounted = true
		}
	}
	if !mounted {
		b.Fatal("no /v1/kv/{namespace} routes")
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"service", h}} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/v1/kv/widgets/_const/42", nil)
			w := &discardWriter{header: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.header)
				c.h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
		// Every core at once, as under load: what the chain's shared
		// counters cost when the cores contend for them.
		b.Run(c.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest(http.MethodGet, "/v1/kv/widgets/_const/42", nil)
				w := &discardWriter{header: http.Header{}}
				for pb.Next() {
					clear(w.header)
					w.status = 0
					c.h.ServeHTTP(w, req)
					if w.status != http.StatusOK {
						b.Errorf("status %d", w.status)
						return
					}
				}
			})
		})
	}
}

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.header }
func (w *discardWriter) WriteHeader(s int)   { w.status = s }
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(b), nil
}
