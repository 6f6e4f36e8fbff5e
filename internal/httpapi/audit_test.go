package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmcache/warmcache/internal/httpapi"
	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestAuditLogNamesTheOperation checks the audit record of each write
// request, those that no route takes included: the operation is the
// route's (put, delete, load, invalidate), or method_not_allowed for a
// method that no route of the path takes, never a piece of the path; the
// key is the path's key.
func TestAuditLogNamesTheOperation(t *testing.T) {
	widgets := &warmcache.Namespace{Name: "widgets", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true}
	reg := prometheus.NewRegistry()
	svc, err := warmcache.NewService(memtier.NewHot(nil), memtier.NewWarm(), []*warmcache.Namespace{widgets}, reg,
		slog.New(slog.DiscardHandler), warmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	h, err := httpapi.NewHandler(svc, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg,
		slog.New(slog.NewJSONHandler(&logged, nil)), httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		op, key            string
	}{
		{http.MethodPut, "/v1/kv/widgets/5", `{"v":1}`, http.StatusOK, "put", "5"},
		{http.MethodPatch, "/v1/kv/widgets/5", `{"v":1}`, http.StatusMethodNotAllowed, "method_not_allowed", "5"},
		{http.MethodPost, "/v1/kv/widgets/5", `{"v":1}`, http.StatusMethodNotAllowed, "method_not_allowed", "5"},
		{http.MethodPut, "/v1/kv/widgets/_mget", `{"v":1}`, http.StatusBadRequest, "put", "_mget"},
		{http.MethodPatch, "/v1/kv/widgets/_load", ``, http.StatusMethodNotAllowed, "method_not_allowed", "_load"},
		{http.MethodPost, "/v1/kv/widgets/_invalidate", `{"keys":[5]}`, http.StatusOK, "invalidate", ""},
		{http.MethodDelete, "/v1/kv/widgets/5", ``, http.StatusNoContent, "delete", "5"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			logged.Reset()
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			var rec struct{ Audit, Op, Namespace, Key, Result string }
			if err := json.Unmarshal(logged.Bytes(), &rec); err != nil || rec.Audit != "write" {
				t.Fatalf("audit record %q: %v", logged.String(), err)
			}
			if rec.Op != tc.op || rec.Namespace != "widgets" || rec.Key != tc.key {
				t.Errorf("audit op %q namespace %q key %q, want %q widgets %q", rec.Op, rec.Namespace, rec.Key, tc.op, tc.key)
			}
			if want := map[bool]string{true: "ok", false: "error"}[tc.status < 400]; rec.Result != want {
				t.Errorf("audit result %q, want %q", rec.Result, want)
			}
		})
	}
}
