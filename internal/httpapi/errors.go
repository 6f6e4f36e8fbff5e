package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// errorStatus is the one table that maps the core's errors to HTTP. Client
// errors show the error's text, which the core writes for clients; server
// errors show only the fixed message here.
var errorStatus = []struct {
	err        error
	status     int
	code       string
	message    string // empty: the error's own text
	retryAfter int    // seconds; zero: no Retry-After
	allow      allowList
}{
	{err: errNoRoute, status: http.StatusNotFound, code: "no_route"},
	{err: errMethodNotAllowed, status: http.StatusMethodNotAllowed, code: "method_not_allowed", allow: allowRoute},
	{err: warmcache.ErrNotFound, status: http.StatusNotFound, code: "not_found"},
	{err: warmcache.ErrUnknownNamespace, status: http.StatusNotFound, code: "unknown_namespace"},
	{err: warmcache.ErrInvalidKey, status: http.StatusBadRequest, code: "invalid_key"},
	{err: warmcache.ErrInvalidValue, status: http.StatusBadRequest, code: "invalid_value"},
	{err: errInvalidRequest, status: http.StatusBadRequest, code: "invalid_request"},
	{err: errUnsupportedMedia, status: http.StatusUnsupportedMediaType, code: "unsupported_media_type"},
	{err: errBodyTimeout, status: http.StatusRequestTimeout, code: "timeout"},
	{err: warmcache.ErrConflict, status: http.StatusConflict, code: "conflict", retryAfter: 1},
	{err: warmcache.ErrTooLarge, status: http.StatusRequestEntityTooLarge, code: "too_large"},
	{err: warmcache.ErrReadOnly, status: http.StatusMethodNotAllowed, code: "read_only", allow: allowReads},
	{err: warmcache.ErrVersionMismatch, status: http.StatusPreconditionFailed, code: "precondition_failed"},
	{err: warmcache.ErrOverloaded, status: http.StatusServiceUnavailable, code: "overloaded", message: "too many requests for the warehouse; retry later", retryAfter: 1},
	{err: warmcache.ErrUnavailable, status: http.StatusServiceUnavailable, code: "unavailable", message: "a storage tier is unavailable; retry later", retryAfter: 1},
	{err: context.DeadlineExceeded, status: http.StatusGatewayTimeout, code: "timeout", message: "the request took too long"},
	{err: auth.ErrUnauthenticated, status: http.StatusUnauthorized, code: "unauthenticated", message: auth.ErrUnauthenticated.Error()},
	{err: auth.ErrForbidden, status: http.StatusForbidden, code: "forbidden"},
	{err: auth.ErrRateLimited, status: http.StatusTooManyRequests, code: "rate_limited"}, // Retry-After from the error
}

// allowList says which methods the Allow header of an error lists.
type allowList uint8

const (
	allowNone  allowList = iota // no Allow header
	allowRoute                  // every method of the request's route
	allowReads                  // the route's reads (GET, HEAD): a read-only namespace
)

// errNoRoute marks a request whose path no route has, for any method.
var errNoRoute = errors.New("no such route")

// errMethodNotAllowed marks a request whose path has routes, none for its
// method.
var errMethodNotAllowed = errors.New("method not allowed")

// errInvalidRequest marks a request that is malformed before it reaches the
// core: an undecodable body, a bad header.
var errInvalidRequest = errors.New("invalid request")

// errUnsupportedMedia marks a body whose Content-Type the route does not
// take.
var errUnsupportedMedia = errors.New("unsupported media type")

// writeError answers err with the JSON error shape and the status of the
// table; an error the table does not know is a 500 whose text is logged,
// never shown.
func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client went away; nobody reads the answer.
		w.WriteHeader(499)
		return
	}
	for _, e := range errorStatus {
		if !errors.Is(err, e.err) {
			continue
		}
		msg := e.message
		if msg == "" {
			msg = err.Error()
		}
		if e.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
		}
		var rl *auth.RateLimitError
		if errors.As(err, &rl) {
			w.Header().Set("Retry-After", strconv.Itoa(rl.RetryAfterSeconds()))
		}
		if e.allow != allowNone {
			// RFC 9110, section 15.5.6: a 405 lists the target's methods.
			w.Header().Set("Allow", strings.Join(a.allowed(r, e.allow == allowReads), ", "))
		}
		if e.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="warmcache"`)
		}
		if e.status >= 500 {
			a.log.LogAttrs(r.Context(), slog.LevelWarn, "request failed",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("err", err))
		}
		writeErrorBody(w, e.status, e.code, msg)
		return
	}
	a.log.LogAttrs(r.Context(), slog.LevelError, "internal error",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("err", err))
	writeErrorBody(w, http.StatusInternalServerError, "internal", "internal error")
}

type errorDoc struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeErrorBody(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("ETag")
	w.WriteHeader(status)
	_, _ = w.Write(jsonMarshal(errorDoc{Error: errorDetail{Code: code, Message: message}}))
}
