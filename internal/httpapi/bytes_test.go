package httpapi_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

// opaqueValues are the values the bytes tests round-trip: each byte
// 0x00-0xFF, 1 MiB of random bytes (the value bound), no bytes, and bytes
// that are not JSON.
func opaqueValues() map[string][]byte { return tiertest.OpaqueValues() }

// TestBytesNamespace round-trips opaque values through PUT, GET and
// _mget of a bytes namespace, under any request Content-Type, and answers
// them with the namespace's content type.
func TestBytesNamespace(t *testing.T) {
	c := newContract(t)
	values := opaqueValues()
	types := []string{"", "application/octet-stream", "image/png", "text/plain; charset=utf-8"}
	i := 0
	for name, v := range values {
		ct := types[i%len(types)]
		i++
		var w *httptest.ResponseRecorder
		if ct == "" {
			// No Content-Type at all.
			req := httptest.NewRequest(http.MethodPut, "/v1/kv/blobs/"+name, bytes.NewReader(v))
			w = httptest.NewRecorder()
			c.h.ServeHTTP(w, req)
		} else {
			w = c.do(t, http.MethodPut, "/v1/kv/blobs/"+name, string(v), "Content-Type", ct)
		}
		expect(t, w, http.StatusOK, "", "Content-Type", "application/x-blob")
		if !bytes.Equal(w.Body.Bytes(), v) {
			t.Fatalf("PUT %s (Content-Type %q) answered %d bytes, want the %d written", name, ct, w.Body.Len(), len(v))
		}
		etag := w.Header().Get("ETag")
		for _, source := range []string{"miss", "hit"} {
			w = c.do(t, http.MethodGet, "/v1/kv/blobs/"+name, "")
			expect(t, w, http.StatusOK, "", "Content-Type", "application/x-blob", "ETag", etag)
			if !bytes.Equal(w.Body.Bytes(), v) {
				t.Fatalf("GET %s (%s) = %d bytes, want the %d written", name, source, w.Body.Len(), len(v))
			}
		}
	}
	w := c.do(t, http.MethodPost, "/v1/kv/blobs/_mget", `{"keys":["every-byte","empty","text","absent"]}`)
	expect(t, w, http.StatusOK, "", "Content-Type", "application/json")
	var got struct {
		Items   map[string]string `json:"items"`
		Missing []string          `json:"missing"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("_mget body %.200s: %v", w.Body, err)
	}
	for _, name := range []string{"every-byte", "empty", "text"} {
		b, err := base64.StdEncoding.DecodeString(got.Items[name])
		if err != nil || !bytes.Equal(b, values[name]) {
			t.Errorf("_mget %s = %q (%v), want the base64 of the %d bytes written", name, got.Items[name], err, len(values[name]))
		}
	}
	if len(got.Missing) != 1 || got.Missing[0] != "absent" {
		t.Errorf("_mget missing = %v, want [absent]", got.Missing)
	}
}

// TestBytesNamespaceRefusesJSONOperations checks that a bytes namespace
// refuses what needs JSON (a containment query, a load) and the value
// bound, and that a JSON namespace still refuses what is not JSON.
func TestBytesNamespaceRefusesJSONOperations(t *testing.T) {
	c := newContract(t)
	w := c.do(t, http.MethodPost, "/v1/kv/blobs/_query", `{"match":{"a":1}}`)
	expect(t, w, http.StatusBadRequest, "")
	if code := errorCode(t, w); code != "invalid_value" || !strings.Contains(w.Body.String(), "opaque bytes") {
		t.Errorf("_query on bytes = %s, want invalid_value naming opaque bytes", w.Body)
	}
	w = c.do(t, http.MethodPost, "/v1/kv/blobs/_load", `{"key":"a","value":1}`, "Content-Type", "application/x-ndjson")
	expect(t, w, http.StatusBadRequest, "")
	if code := errorCode(t, w); code != "invalid_value" || !strings.Contains(w.Body.String(), "opaque bytes") {
		t.Errorf("_load into bytes = %s, want invalid_value naming opaque bytes", w.Body)
	}
	w = c.do(t, http.MethodPut, "/v1/kv/blobs/big", strings.Repeat("x", 1<<20+1), "Content-Type", "application/octet-stream")
	expect(t, w, http.StatusRequestEntityTooLarge, "")

	w = c.do(t, http.MethodPut, "/v1/kv/widgets/1", "\x00\xff not json")
	expect(t, w, http.StatusBadRequest, "")
	if code := errorCode(t, w); code != "invalid_value" {
		t.Errorf("PUT of bytes into a JSON namespace = %s, want invalid_value", w.Body)
	}
	w = c.do(t, http.MethodPut, "/v1/kv/widgets/1", `{"a":1}`, "Content-Type", "application/octet-stream")
	expect(t, w, http.StatusUnsupportedMediaType, "")
}
