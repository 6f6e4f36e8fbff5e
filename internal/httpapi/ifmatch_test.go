package httpapi_test

import (
	"net/http"
	"testing"
)

// TestContractIfMatchMalformed checks that an If-Match header that is
// present but names no version (empty, blank, unbalanced quotes, a list,
// a wildcard, a weak tag, two headers) is refused with 400 invalid_request
// on PUT and DELETE, and writes or deletes nothing: a client that asked for
// a conditional write never gets an unconditional one.
func TestContractIfMatchMalformed(t *testing.T) {
	c := newContract(t)
	expect(t, c.do(t, http.MethodPut, "/v1/kv/widgets/7", `{"v":1}`), http.StatusOK, "")
	for _, tc := range []struct {
		name   string
		values []string
	}{
		{"empty", []string{""}},
		{"blank", []string{"  "}},
		{"empty quotes", []string{`""`}},
		{"opening quote only", []string{`"1`}},
		{"closing quote only", []string{`1"`}},
		{"list", []string{`"1", "2"`}},
		{"wildcard", []string{`*`}},
		{"weak", []string{`W/"1"`}},
		{"not a number", []string{`"abc"`}},
		{"beyond int64", []string{`"9223372036854775808"`}},
		{"two headers", []string{`"1"`, `"1"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, method := range []string{http.MethodPut, http.MethodDelete} {
				body := ""
				if method == http.MethodPut {
					body = `{"v":2}`
				}
				w := c.doHeader(t, method, "/v1/kv/widgets/7", body, http.Header{"If-Match": tc.values})
				expect(t, w, http.StatusBadRequest, "")
				if code := errorCode(t, w); code != "invalid_request" {
					t.Errorf("%s: error code %q, want invalid_request", method, code)
				}
			}
			expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusOK, `{"v":1}`)
		})
	}
	// The forms that name a version still work, quoted or not.
	w := c.do(t, http.MethodGet, "/v1/kv/widgets/7", "")
	tag := w.Header().Get("ETag")
	w = c.do(t, http.MethodPut, "/v1/kv/widgets/7", `{"v":3}`, "If-Match", tag)
	expect(t, w, http.StatusOK, `{"v":3}`)
	unquoted := w.Header().Get("ETag")
	unquoted = unquoted[1 : len(unquoted)-1]
	expect(t, c.do(t, http.MethodDelete, "/v1/kv/widgets/7", "", "If-Match", " "+unquoted+" "), http.StatusNoContent, "")
}
