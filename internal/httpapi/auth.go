package httpapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/warmcache/warmcache/internal/auth"
)

// requiredScope is the scope a /v1/kv request needs: reads (GET, HEAD,
// _mget, _query) need read; everything else, _load included, needs write.
// An unknown POST needs write, so that a new route is never readable by
// mistake with a read-only key.
func requiredScope(r *http.Request) auth.Scope {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return auth.ScopeRead
	case http.MethodPost:
		if strings.HasSuffix(r.URL.Path, "/_mget") || strings.HasSuffix(r.URL.Path, "/_query") {
			return auth.ScopeRead
		}
	}
	return auth.ScopeWrite
}

// authorize is the middleware of the /v1/kv/{namespace} routes: it reads
// the bearer token, checks it and the key's rate with keys, checks the
// key's scope on the route's namespace, and logs every write with the
// key's ID. Failures answer 401, 429 or 403 through the error table; none
// says whether the key exists. A nil or open Keyring lets every request
// through as auth.Anonymous (writes are still logged).
func (a *api) authorize(keys *auth.Keyring) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := auth.Principal{KeyID: auth.Anonymous}
			var err error
			if keys != nil {
				p, err = keys.Authenticate(auth.BearerToken(r.Header.Get("Authorization")))
				if err != nil {
					a.writeError(w, r, err)
					return
				}
			}
			namespace, err := pathParam(r, "namespace")
			if err != nil {
				a.writeError(w, r, err)
				return
			}
			scope := requiredScope(r)
			if err := p.Authorize(namespace, scope); err != nil {
				a.writeError(w, r, err)
				return
			}
			if scope != auth.ScopeWrite {
				next.ServeHTTP(w, r)
				return
			}
			r = r.WithContext(auth.NewContext(r.Context(), p))
			sw := &auditWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r)
			err = nil
			if sw.status >= 400 {
				err = errWriteStatus(sw.status)
			}
			op, key := auditOp(r)
			p.LogWrite(r.Context(), a.log, "http", op, namespace, key, err)
		})
	}
}

// auditOp names the write that r, served, was for in the audit log: the
// method of a key's route (put, delete) with the key; the name of a
// namespace route (load, invalidate) with no key; or method_not_allowed,
// with the rest of the path as the key, when no route of the path takes
// the method. It reads the route that chi matched, never the path alone,
// so that a key is never logged as the operation.
func auditOp(r *http.Request) (op, key string) {
	pattern := ""
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		pattern = rctx.RoutePattern()
	}
	switch {
	case strings.HasSuffix(pattern, "/{key}"):
		key, _ = pathParam(r, "key") // a malformed key was answered 400 and is logged as sent
		return strings.ToLower(r.Method), key
	case strings.HasSuffix(pattern, "/_load"), strings.HasSuffix(pattern, "/_invalidate"):
		return pattern[strings.LastIndexByte(pattern, '_')+1:], ""
	}
	// The path is /v1/kv/{namespace}/{rest}, as the routes' prefix made it.
	parts := strings.SplitN(r.URL.EscapedPath(), "/", 5)
	if len(parts) == 5 {
		key = parts[4]
		if k, err := url.PathUnescape(key); err == nil {
			key = k
		}
	}
	return "method_not_allowed", key
}

// errWriteStatus is the outcome of a failed write in the audit log.
type errWriteStatus int

func (e errWriteStatus) Error() string { return "status " + http.StatusText(int(e)) }

// auditWriter remembers the status of a write for the audit log.
type auditWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *auditWriter) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *auditWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
