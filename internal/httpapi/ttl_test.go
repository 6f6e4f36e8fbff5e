package httpapi_test

import (
	"net/http"
	"testing"
	"time"
)

// TestPutTTL: a PUT with ?ttl= answers the item's expiry in the
// Warmcache-Expires header, as a GET then does; a PUT without it clears
// the expiry; a ttl that is not a whole number of seconds from 1 up is a
// 400 invalid_request, and nothing is written.
func TestPutTTL(t *testing.T) {
	c := newContract(t)
	before := time.Now()
	w := c.do(t, http.MethodPut, "/v1/kv/widgets/1?ttl=60", `{"a":1}`)
	expect(t, w, http.StatusOK, "")
	exp, err := time.Parse(time.RFC3339Nano, w.Header().Get("Warmcache-Expires"))
	if err != nil {
		t.Fatalf("Warmcache-Expires %q: %v", w.Header().Get("Warmcache-Expires"), err)
	}
	if exp.Before(before.Add(59*time.Second)) || exp.After(time.Now().Add(61*time.Second)) {
		t.Errorf("Warmcache-Expires %v, want about a minute after %v", exp, before)
	}
	g := c.do(t, http.MethodGet, "/v1/kv/widgets/1", "")
	expect(t, g, http.StatusOK, `{"a":1}`, "Warmcache-Expires", w.Header().Get("Warmcache-Expires"))

	for _, bad := range []string{"0", "-1", "1.5", "abc", "", "315360001"} {
		w := c.do(t, http.MethodPut, "/v1/kv/widgets/2?ttl="+bad, `{"b":2}`)
		expect(t, w, http.StatusBadRequest, "")
		if code := errorCode(t, w); code != "invalid_request" {
			t.Errorf("ttl=%q: code %q, want invalid_request", bad, code)
		}
	}
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/2", ""), http.StatusNotFound, "")

	w = c.do(t, http.MethodPut, "/v1/kv/widgets/1", `{"a":2}`)
	expect(t, w, http.StatusOK, "", "Warmcache-Expires", "")
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/1", ""), http.StatusOK, `{"a":2}`, "Warmcache-Expires", "")
}
