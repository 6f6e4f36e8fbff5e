package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmcache/warmcache/internal/httpapi"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
)

// TestRequestDurationLabels checks the labels that each request's duration
// is recorded under: the route pattern (never the path), the method (unknown
// ones as "other") and the status class, each series counting its own
// requests.
func TestRequestDurationLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := httpapi.NewHandler(nil, http.NotFoundHandler(), reg, slog.New(slog.NewTextHandler(io.Discard, nil)), httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h = loadAPIDoc(t).checked(t, h)
	for _, r := range []struct {
		method, path, contentType string
		status                    int
	}{
		{"GET", "/healthz", "", 200},
		{"GET", "/healthz", "", 200},
		{"GET", "/no/such/route", "", 404},
		{"POST", "/healthz", "", 405},
		{"PURGE", "/healthz", "", 405},
		{"POST", "/v1/kv/widgets/_mget", "text/plain", 415},
		{"POST", "/v1/kv/other/_mget", "text/plain", 415},
	} {
		req := httptest.NewRequest(r.method, r.path, strings.NewReader("x"))
		if r.contentType != "" {
			req.Header.Set("Content-Type", r.contentType)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != r.status {
			t.Fatalf("%s %s = %d, want %d", r.method, r.path, w.Code, r.status)
		}
	}
	want := []struct {
		method, route, status string
		n                     float64
	}{
		{"GET", "/healthz", "2xx", 2},
		{"GET", "unmatched", "4xx", 1},
		{"POST", "unmatched", "4xx", 1},
		{"other", "unmatched", "4xx", 1},
		{"POST", "/v1/kv/{namespace}/_mget", "4xx", 2},
	}
	const name = "warmcache_http_request_duration_seconds"
	if n, err := testutil.GatherAndCount(reg, name); err != nil || n != len(want) {
		t.Errorf("%s has %d series (%v), want %d", name, n, err, len(want))
	}
	for _, w := range want {
		if got := promregtest.Value(t, reg, name, "method", w.method, "route", w.route, "status", w.status); got != w.n {
			t.Errorf("series %s %s %s counted %v requests, want %v", w.method, w.route, w.status, got, w.n)
		}
	}
}
