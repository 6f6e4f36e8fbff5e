package httpapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmcache/warmcache/internal/httpapi"
	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// contract is the REST API over the core and the in-memory tiers: the
// whole request path but the servers.
type contract struct {
	h    http.Handler
	hot  *memtier.Hot
	warm *memtier.Warm
}

func newContract(t *testing.T) *contract {
	t.Helper()
	widgets := &warmcache.Namespace{Name: "widgets", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true}
	frozen := &warmcache.Namespace{Name: "frozen", Table: "frozen", KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version"}
	c := &contract{hot: memtier.NewHot(nil), warm: memtier.NewWarm()}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	svc, err := warmcache.NewService(c.hot, c.warm, []*warmcache.Namespace{widgets, frozen}, reg, log, warmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.h, err = httpapi.NewHandler(svc, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg, log, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// do sends one request; header is name, value pairs.
func (c *contract) do(t *testing.T, method, path, body string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, req)
	return w
}

// expect checks a response's status, and its body and headers where given
// (name, value pairs; an empty value means the header is absent).
func expect(t *testing.T, w *httptest.ResponseRecorder, status int, body string, header ...string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if body != "" && strings.TrimSpace(w.Body.String()) != body {
		t.Errorf("body %s, want %s", w.Body, body)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if got := w.Header().Get(header[i]); got != header[i+1] {
			t.Errorf("%s: %q, want %q", header[i], got, header[i+1])
		}
	}
}

// errorCode returns the code of an error body.
func errorCode(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var doc struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || doc.Error.Message == "" {
		t.Fatalf("error body %q: %v; want {\"error\":{\"code\":...,\"message\":...}}", w.Body, err)
	}
	return doc.Error.Code
}

func etag(v int64) string { return `"` + strconv.FormatInt(v, 10) + `"` }

func TestContractReadWrite(t *testing.T) {
	c := newContract(t)

	// An absent key: the warehouse answers once, then the negative entry.
	w := c.do(t, http.MethodGet, "/v1/kv/widgets/7", "")
	expect(t, w, http.StatusNotFound, "", "X-Cache", "miss", "ETag", "")
	if code := errorCode(t, w); code != "not_found" {
		t.Errorf("error code %q, want not_found", code)
	}
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusNotFound, "", "X-Cache", "hit")
	if n := c.warm.Lookups(); n != 1 {
		t.Errorf("warehouse reads = %d, want 1: the absent key is cached", n)
	}

	// A write answers the stored value and its version; a read then hits
	// the cache the write filled, at that version.
	w = c.do(t, http.MethodPut, "/v1/kv/widgets/7", `{"color":"red"}`)
	expect(t, w, http.StatusOK, `{"color":"red"}`)
	first := w.Header().Get("ETag")
	row, ok := c.warm.Row("widgets", "7")
	if !ok || first != etag(row.Version) {
		t.Fatalf("PUT ETag %s, want the row's version %d", first, row.Version)
	}
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/007", ""), http.StatusOK, `{"color":"red"}`,
		"X-Cache", "hit", "ETag", first, "Content-Type", "application/json")
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", "", "If-None-Match", first), http.StatusNotModified, "", "ETag", first)

	// If-Match: a stale version is refused and changes nothing; the
	// current one writes a newer version.
	w = c.do(t, http.MethodPut, "/v1/kv/widgets/7", `{"color":"blue"}`, "If-Match", etag(row.Version-1))
	expect(t, w, http.StatusPreconditionFailed, "")
	if code := errorCode(t, w); code != "precondition_failed" {
		t.Errorf("error code %q, want precondition_failed", code)
	}
	w = c.do(t, http.MethodPut, "/v1/kv/widgets/7", `{"color":"blue"}`, "If-Match", first)
	expect(t, w, http.StatusOK, `{"color":"blue"}`)
	second := w.Header().Get("ETag")
	if v, _ := strconv.ParseInt(strings.Trim(second, `"`), 10, 64); v <= row.Version {
		t.Fatalf("second PUT ETag %s, want a version above %d", second, row.Version)
	}
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusOK, `{"color":"blue"}`, "X-Cache", "hit", "ETag", second)

	// After the cache is lost, one read misses and fills it again.
	c.hot.Forget()
	reads := c.warm.Lookups()
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusOK, `{"color":"blue"}`, "X-Cache", "miss", "ETag", second)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusOK, `{"color":"blue"}`, "X-Cache", "hit", "ETag", second)
	if n := c.warm.Lookups() - reads; n != 1 {
		t.Errorf("warehouse reads after the cache was lost = %d, want 1", n)
	}

	// Deletes: a stale If-Match is refused; then the key is gone, from the
	// cache too, and a second delete finds nothing.
	expect(t, c.do(t, http.MethodDelete, "/v1/kv/widgets/7", "", "If-Match", first), http.StatusPreconditionFailed, "")
	expect(t, c.do(t, http.MethodDelete, "/v1/kv/widgets/7", "", "If-Match", second), http.StatusNoContent, "")
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusNotFound, "", "X-Cache", "hit")
	if _, ok := c.warm.Row("widgets", "7"); ok {
		t.Error("the row is still in the warehouse after DELETE")
	}
	w = c.do(t, http.MethodDelete, "/v1/kv/widgets/7", "")
	expect(t, w, http.StatusNotFound, "")
	if code := errorCode(t, w); code != "not_found" {
		t.Errorf("error code %q, want not_found", code)
	}
}

func TestContractMGet(t *testing.T) {
	c := newContract(t)
	c.warm.Set("widgets", "1", []byte(`{"n":1}`), 5)
	c.warm.Set("widgets", "2", []byte(`{"n":2}`), 6)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/1", ""), http.StatusOK, `{"n":1}`, "X-Cache", "miss", "ETag", etag(5))

	mget := func() map[string]any {
		t.Helper()
		w := c.do(t, http.MethodPost, "/v1/kv/widgets/_mget", `{"keys":[1,"2",3,"02"]}`)
		expect(t, w, http.StatusOK, "", "Content-Type", "application/json")
		var doc map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
			t.Fatalf("mget body %s: %v", w.Body, err)
		}
		return doc
	}
	doc := mget()
	items, _ := doc["items"].(map[string]any)
	missing, _ := doc["missing"].([]any)
	if len(items) != 2 || items["1"] == nil || items["2"] == nil || len(missing) != 1 || missing[0] != "3" {
		t.Fatalf("mget = %v; want items 1 and 2, and 3 missing", doc)
	}
	if n, _ := items["2"].(map[string]any)["n"].(float64); n != 2 {
		t.Errorf("item 2 = %v, want {\"n\":2}", items["2"])
	}
	reads := c.warm.Lookups()
	if reads != 2 {
		t.Errorf("warehouse reads = %d, want 2: the GET, then one for the keys the cache lacked", reads)
	}
	// Everything is cached now, the absent key too.
	mget()
	if n := c.warm.Lookups(); n != reads {
		t.Errorf("a second mget read the warehouse %d more times, want none", n-reads)
	}
	// A write shows in the next mget.
	expect(t, c.do(t, http.MethodPut, "/v1/kv/widgets/3", `{"n":3}`), http.StatusOK, `{"n":3}`)
	if doc := mget(); len(doc["items"].(map[string]any)) != 3 || doc["missing"] != nil && len(doc["missing"].([]any)) != 0 {
		t.Errorf("mget after PUT 3 = %v; want three items, none missing", doc)
	}
	expect(t, c.do(t, http.MethodPost, "/v1/kv/widgets/_mget", `{"keys":["x"]}`), http.StatusBadRequest, "")
}

func TestContractRefusals(t *testing.T) {
	c := newContract(t)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"bad key", http.MethodGet, "/v1/kv/widgets/abc", "", http.StatusBadRequest, "invalid_key"},
		{"unknown namespace", http.MethodGet, "/v1/kv/nope/1", "", http.StatusNotFound, "unknown_namespace"},
		{"not JSON", http.MethodPut, "/v1/kv/widgets/1", `{"a":`, http.StatusBadRequest, "invalid_value"},
		{"read-only namespace", http.MethodPut, "/v1/kv/frozen/a", `1`, http.StatusMethodNotAllowed, "read_only"},
		{"bad If-Match", http.MethodDelete, "/v1/kv/widgets/1", "", http.StatusBadRequest, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w *httptest.ResponseRecorder
			if tc.name == "bad If-Match" {
				w = c.do(t, tc.method, tc.path, tc.body, "If-Match", "W/abc")
			} else {
				w = c.do(t, tc.method, tc.path, tc.body)
			}
			expect(t, w, tc.status, "")
			if code := errorCode(t, w); code != tc.code {
				t.Errorf("error code %q, want %q", code, tc.code)
			}
		})
	}
	if n := c.warm.Writes(); n != 0 {
		t.Errorf("refused requests wrote %d times to the warehouse", n)
	}
}

func TestContractTierOutages(t *testing.T) {
	c := newContract(t)
	c.warm.Set("widgets", "1", []byte(`1`), 1)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/1", ""), http.StatusOK, `1`, "X-Cache", "miss")

	// The warehouse down: hits go on, misses fail fast with a 503.
	c.warm.SetFailing(true)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/1", ""), http.StatusOK, `1`, "X-Cache", "hit")
	w := c.do(t, http.MethodGet, "/v1/kv/widgets/2", "")
	expect(t, w, http.StatusServiceUnavailable, "", "Retry-After", "1")
	if code := errorCode(t, w); code != "unavailable" {
		t.Errorf("error code %q, want unavailable", code)
	}
	expect(t, c.do(t, http.MethodPut, "/v1/kv/widgets/2", `2`), http.StatusServiceUnavailable, "")

	// The hot tier down: reads go on from the warehouse.
	c.warm.SetFailing(false)
	c.hot.SetDown(true)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/1", ""), http.StatusOK, `1`, "X-Cache", "miss", "ETag", etag(1))
}
