package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/warmcache/warmcache/internal/httpapi"
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
	got := map[string]uint64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "warmcache_http_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			got[labels(m)] = m.GetHistogram().GetSampleCount()
		}
	}
	want := map[string]uint64{
		"GET /healthz 2xx":                  2,
		"GET unmatched 4xx":                 1,
		"POST unmatched 4xx":                1,
		"other unmatched 4xx":               1,
		"POST /v1/kv/{namespace}/_mget 4xx": 2,
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("series %q counted %d requests, want %d (all: %v)", k, got[k], n, got)
		}
	}
}

// labels returns "method route status" of a series.
func labels(m *dto.Metric) string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l["method"] + " " + l["route"] + " " + l["status"]
}
