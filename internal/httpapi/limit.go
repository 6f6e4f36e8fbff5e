package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// limitInflight bounds the /v1 requests served at once to n. A request over
// the bound is answered at once with 503 and Retry-After rather than queued,
// so that a flood cannot grow memory. Health, readiness and metrics are not
// counted, so that probes still answer under load.
func (a *api) limitInflight(n int) func(http.Handler) http.Handler {
	slots := make(chan struct{}, n)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasPrefix(r.URL.Path, "/v1/") {
				next.ServeHTTP(w, r)
				return
			}
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
				next.ServeHTTP(w, r)
			default:
				a.writeError(w, r, fmt.Errorf("%w: more than %d requests in flight", warmcache.ErrOverloaded, n))
			}
		})
	}
}
