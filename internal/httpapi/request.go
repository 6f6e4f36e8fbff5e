package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// errBodyTimeout marks a request body that stopped arriving: 408.
var errBodyTimeout = errors.New("request body timeout")

// routeEscaped makes chi route on the escaped path, always, so that a
// path parameter is its escaped segment and pathParam decodes it exactly
// once: %31 is the key 1, %2F a slash inside a key, and %2525 the text %25.
// (net/http keeps RawPath only for some spellings, so without this a key
// would be decoded once or twice depending on how it was written.)
func routeEscaped(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath == "" {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// pathParam returns the path parameter name, percent-decoded once. A
// malformed escape is a bad request.
func pathParam(r *http.Request, name string) (string, error) {
	v, err := url.PathUnescape(chi.URLParam(r, name))
	if err != nil {
		return "", fmt.Errorf("%w: %s is not validly percent-encoded", errInvalidRequest, name)
	}
	return v, nil
}

// nsKey returns the decoded namespace and key of a /v1/kv/{namespace}/{key}
// route.
func nsKey(r *http.Request) (namespace, key string, err error) {
	if namespace, err = pathParam(r, "namespace"); err != nil {
		return "", "", err
	}
	if key, err = pathParam(r, "key"); err != nil {
		return "", "", err
	}
	return namespace, key, nil
}

// noneMatch reports whether If-None-Match header values match etag, by the
// weak comparison of RFC 9110 section 13.1.2: "*" matches any current
// representation, and a list matches if any of its entity tags, with or
// without W/, has the same opaque tag.
func noneMatch(values []string, etag string) bool {
	want := strings.TrimPrefix(etag, "W/")
	for _, v := range values {
		for _, tag := range strings.Split(v, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" || strings.TrimPrefix(tag, "W/") == want {
				return true
			}
		}
	}
	return false
}

// bodyError turns the error of reading a request body into the client's
// error: over the bound is 413 with the bound, a body that stopped
// arriving is 408, any other read failure (a connection cut mid-body) 400.
// Errors that already say what they are pass unchanged.
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: body is larger than %d bytes", warmcache.ErrTooLarge, tooLarge.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: the body stopped arriving", errBodyTimeout)
	case errors.Is(err, errInvalidRequest), errors.Is(err, warmcache.ErrTooLarge), errors.Is(err, warmcache.ErrInvalidKey):
		return err
	}
	return fmt.Errorf("%w: reading body: %w", errInvalidRequest, err)
}

// decodeMGet reads an _mget body, {"keys":[...]}, as a stream: it stops at
// the first key over maxKeys, before decoding more, so that a body of many
// small keys costs no more memory than maxKeys of them. A key is a JSON
// string or integer. Unknown fields and trailing data are refused.
func decodeMGet(body io.Reader, maxKeys int) ([]string, error) {
	dec := json.NewDecoder(body)
	dec.UseNumber()
	bad := func(what string) error {
		return fmt.Errorf("%w: body is not the expected JSON: %s; want {\"keys\":[...]}", errInvalidRequest, what)
	}
	if err := expectDelim(dec, '{'); err != nil {
		return nil, bodyErrorOr(err, bad("not an object"))
	}
	var keys []string
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bodyErrorOr(err, bad("malformed object"))
		}
		if name, _ := tok.(string); name != "keys" {
			return nil, bad(fmt.Sprintf("unknown field %q", truncateText(fmt.Sprint(tok))))
		}
		if seen {
			return nil, bad(`"keys" given twice`)
		}
		seen = true
		if err := expectDelim(dec, '['); err != nil {
			return nil, bodyErrorOr(err, bad(`"keys" is not an array`))
		}
		for dec.More() {
			if len(keys) == maxKeys {
				return nil, fmt.Errorf("%w: more than %d keys in one request", warmcache.ErrTooLarge, maxKeys)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, bodyErrorOr(err, bad(fmt.Sprintf("keys[%d] is not JSON", len(keys))))
			}
			k, err := keyText(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: keys[%d]: %w", errInvalidRequest, len(keys), err)
			}
			keys = append(keys, k)
		}
		if err := expectDelim(dec, ']'); err != nil {
			return nil, bodyErrorOr(err, bad("unterminated keys"))
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, bodyErrorOr(err, bad("unterminated object"))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, bodyErrorOr(err, errors.Join(errInvalidRequest, errors.New("body has data after the JSON object")))
	}
	if keys == nil {
		keys = []string{}
	}
	return keys, nil
}

// expectDelim reads the next token and checks that it is d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return errUnexpectedToken
	}
	return nil
}

var errUnexpectedToken = errors.New("unexpected token")

// bodyErrorOr returns the read error of err when reading the body failed
// (over the bound, timed out), and otherwise syntax, the client's mistake.
func bodyErrorOr(err, syntax error) error {
	var tooLarge *http.MaxBytesError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &tooLarge), errors.Is(err, os.ErrDeadlineExceeded):
		return bodyError(err)
	case errors.As(err, &syn), errors.Is(err, errUnexpectedToken), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return syntax
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		return syntax
	}
	return bodyError(err)
}

// truncateText shortens s for an error message.
func truncateText(s string) string {
	const n = 32
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// keyText accepts a key given as a JSON string or an integer number.
func keyText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s, nil
		}
	} else if n := json.Number(raw); len(raw) > 0 {
		if _, err := n.Int64(); err == nil {
			return n.String(), nil
		}
		return "", errors.New("a key must be a string or a 64-bit integer")
	}
	return "", errors.New("a key must be a string or an integer")
}

// checkJSONType refuses a body whose Content-Type is neither absent nor
// JSON (application/json or a +json type).
func checkJSONType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return fmt.Errorf("%w: Content-Type %q: this route takes application/json", errUnsupportedMedia, truncateText(ct))
}
