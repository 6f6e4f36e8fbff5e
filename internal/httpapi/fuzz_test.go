package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// FuzzDecodeMGet feeds arbitrary bodies to the _mget decoder: it must never
// panic, must refuse what is not a {"keys":[...]} object within the bound,
// and must turn each accepted key into the string or integer it was.
// Seeds: testdata/fuzz/FuzzDecodeMGet.
func FuzzDecodeMGet(f *testing.F) {
	for _, s := range []string{`{"keys":[1,"2",3]}`, `{"keys":[]}`, `{"keys":[1.5]}`, `{"kees":[1]}`, `{"keys":[1]} x`, `[`} {
		f.Add([]byte(s))
	}
	a := &api{maxBody: 1 << 10}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/v1/kv/w/_mget", bytes.NewReader(body))
		var req mgetRequest
		err := a.decode(httptest.NewRecorder(), r, &req)
		if err != nil {
			if !errors.Is(err, errInvalidRequest) && !errors.Is(err, warmcache.ErrTooLarge) {
				t.Fatalf("decode error %v is neither a bad request nor too large", err)
			}
			return
		}
		if len(body) > 1<<10 {
			t.Fatalf("accepted a body of %d bytes over the bound", len(body))
		}
		for _, raw := range req.Keys {
			k, err := keyText(raw)
			if err != nil {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) == nil {
				if k != s {
					t.Fatalf("string key %s decoded as %q", raw, k)
				}
			} else if _, err := strconv.ParseInt(k, 10, 64); err != nil {
				t.Fatalf("key %s accepted as %q, neither a string nor an integer", raw, k)
			}
		}
	})
}

// FuzzParseIfMatch checks that an If-Match header is either refused as a
// bad request or read as the version it names. Seeds: testdata/fuzz/FuzzParseIfMatch.
func FuzzParseIfMatch(f *testing.F) {
	for _, s := range []string{`"42"`, `42`, `W/"42"`, `*`, `"-1"`, `""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		v, err := parseIfMatch(h)
		switch {
		case err != nil:
			if !errors.Is(err, errInvalidRequest) {
				t.Fatalf("If-Match %q: error %v is not a bad request", h, err)
			}
		case h == "":
			if v != nil {
				t.Fatalf("no If-Match read as version %d", *v)
			}
		case v == nil:
			t.Fatalf("If-Match %q accepted without a version", h)
		}
	})
}
