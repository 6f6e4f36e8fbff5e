package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// FuzzDecodeMGet feeds arbitrary bodies to the streaming _mget decoder: it
// must never panic, must refuse what is not a {"keys":[...]} object within
// the bounds (bytes and keys), and must turn each accepted key into the
// string or integer it was. Seeds: testdata/fuzz/FuzzDecodeMGet.
func FuzzDecodeMGet(f *testing.F) {
	for _, s := range []string{`{"keys":[1,"2",3]}`, `{"keys":[]}`, `{"keys":[1.5]}`, `{"kees":[1]}`, `{"keys":[1]} x`, `[`,
		`{"keys":[1,2,3,4,5]}`, `{"keys":[1],"keys":[2]}`, `{"keys":["' OR 1=1 --"]}`} {
		f.Add([]byte(s))
	}
	const maxBody, maxKeys = 1 << 10, 4
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		keys, err := decodeMGet(http.MaxBytesReader(rec, io.NopCloser(bytes.NewReader(body)), maxBody), maxKeys)
		if err != nil {
			if !errors.Is(err, errInvalidRequest) && !errors.Is(err, warmcache.ErrTooLarge) {
				t.Fatalf("decode error %v is neither a bad request nor too large", err)
			}
			return
		}
		if len(body) > maxBody || len(keys) > maxKeys {
			t.Fatalf("accepted a body of %d bytes and %d keys over the bounds", len(body), len(keys))
		}
		var doc struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if err := json.Unmarshal(body, &doc); err != nil || len(doc.Keys) != len(keys) {
			t.Fatalf("accepted %q (%d keys), which encoding/json reads as %d keys, err %v", body, len(keys), len(doc.Keys), err)
		}
		for i, raw := range doc.Keys {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				if keys[i] != s {
					t.Fatalf("string key %s decoded as %q", raw, keys[i])
				}
			} else if _, err := strconv.ParseInt(keys[i], 10, 64); err != nil {
				t.Fatalf("key %s accepted as %q, neither a string nor an integer", raw, keys[i])
			}
		}
	})
}

// FuzzPathKey checks the REST key path: a key sent percent-encoded in any
// way reaches the core decoded exactly once, so that two spellings of one
// key are the same key and an escape is never decoded twice. Seeds:
// testdata/fuzz/FuzzPathKey.
func FuzzPathKey(f *testing.F) {
	for _, s := range []string{"1", "a/b", "%", "a%2Fb", "caf\u00e9", " ", "..", "' OR 1=1 --"} {
		f.Add(s)
	}
	var got string
	r := chi.NewRouter()
	r.Use(routeEscaped)
	r.Get("/v1/kv/{namespace}/{key}", func(w http.ResponseWriter, r *http.Request) {
		_, k, err := nsKey(r)
		if err != nil {
			got = "<error>"
			return
		}
		got = k
	})
	f.Fuzz(func(t *testing.T, key string) {
		if key == "" || !utf8.ValidString(key) {
			return
		}
		for _, spelling := range []string{url.PathEscape(key), escapeAll(key)} {
			req := httptest.NewRequest("GET", "/v1/kv/ns/x", nil)
			req.URL.RawPath = "/v1/kv/ns/" + spelling
			req.URL.Path = "/v1/kv/ns/" + key
			got = "<no route>"
			r.ServeHTTP(httptest.NewRecorder(), req)
			if got != key {
				t.Fatalf("key %q sent as %q reached the core as %q", key, spelling, got)
			}
		}
	})
}

// escapeAll percent-encodes every byte of s.
func escapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// FuzzParseIfMatch checks that an If-Match header is either refused as a
// bad request or read as the version it names, and that it is accepted
// exactly when it matches the pattern the OpenAPI document gives it.
// Seeds: testdata/fuzz/FuzzParseIfMatch.
func FuzzParseIfMatch(f *testing.F) {
	for _, s := range []string{`"42"`, `42`, `W/"42"`, `*`, `"-1"`, `""`, ``, `"42`, ` 42 `} {
		f.Add(s)
	}
	pattern := regexp.MustCompile(`^[ \t]*("-?[0-9]+"|-?[0-9]+)[ \t]*$`)
	f.Fuzz(func(t *testing.T, h string) {
		v, err := parseIfMatch(http.Header{"If-Match": {h}})
		switch {
		case err != nil:
			if !errors.Is(err, errInvalidRequest) {
				t.Fatalf("If-Match %q: error %v is not a bad request", h, err)
			}
			if pattern.MatchString(h) && len(strings.Trim(h, " \t\"")) < 19 {
				t.Fatalf("If-Match %q refused, though the document's pattern takes it", h)
			}
		case v == nil:
			t.Fatalf("If-Match %q accepted without a version", h)
		case !pattern.MatchString(h):
			t.Fatalf("If-Match %q read as version %d, though the document's pattern refuses it", h, *v)
		}
	})
	if v, err := parseIfMatch(http.Header{}); v != nil || err != nil {
		f.Fatalf("no If-Match: version %v, error %v; want neither", v, err)
	}
}
