package warmcache

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Searcher is the warm tier's non-key query: JSON containment on the value,
// answered by the warehouse alone. A warm tier that implements it serves
// Service.Query. Implementations are safe for concurrent use.
type Searcher interface {
	// Query returns at most limit rows of ns whose value contains match
	// (a JSON object, as with jsonb's @> operator), ordered by key, with
	// keys greater than after when after is not nil. The error wraps
	// context.DeadlineExceeded when the query ran out of time.
	Query(ctx context.Context, ns *Namespace, match []byte, limit int, after *Key) ([]QueryRow, error)
}

// QueryRow is one row of a non-key query.
type QueryRow struct {
	Key   Key
	Entry Entry
}

// QueryPage is one page of a non-key query's answer.
type QueryPage struct {
	// Rows are ordered by key.
	Rows []QueryRow
	// Next is the opaque cursor of the next page, empty on the last page.
	Next string
}

// The bounds of a query's page size.
const (
	// DefaultQueryLimit is the page size of a query that asks for none.
	DefaultQueryLimit = 100
	// MaxQueryLimit is the largest page size a query may ask for.
	MaxQueryLimit = 1000
	// maxMatchBytes bounds the containment document of a query.
	maxMatchBytes = 64 << 10
	// MaxMatchDepth bounds the nesting of a query's containment document.
	MaxMatchDepth = 32
)

// cursorPrefix marks the version of the cursor format: the key's text, a
// dot, and an HMAC-SHA256 (truncated to 16 bytes) of the namespace and the
// key under the service's cursor key, each base64url.
const cursorPrefix = "k2:"

// Query answers a non-key query on namespace: the rows whose value contains
// match, a JSON object such as {"widget":{"debug":"on"}}, in key order,
// limit at a time (zero means DefaultQueryLimit, at most MaxQueryLimit).
// cursor is empty for the first page and QueryPage.Next of the previous page
// after that (keyset pagination: a page starts after the last key of the
// previous one, so pages neither skip nor repeat rows while others write).
//
// A query always goes to the warehouse, never through the hot tier, and
// neither reads nor fills it. It runs within WarmTimeout, which the
// warehouse applies as a statement timeout, and within the bound of
// concurrent warehouse reads. Errors wrap ErrUnknownNamespace,
// ErrInvalidValue (match is not a JSON object, the cursor is not one this
// service issued or was forged, or the warehouse refused its data: NUL,
// invalid UTF-8, a number out of range), ErrTooLarge (limit or match too
// large), ErrUnavailable (the warm tier has no query, or failed),
// ErrOverloaded, or context.DeadlineExceeded (the statement timeout). Query is safe for
// concurrent use.
func (s *Service) Query(ctx context.Context, namespace string, match []byte, limit int, cursor string) (QueryPage, error) {
	ns, err := s.Namespace(namespace)
	if err != nil {
		return QueryPage{}, err
	}
	if ns.Opaque() {
		return QueryPage{}, fmt.Errorf("%w: namespace %q stores opaque bytes; JSON containment queries need a JSON layout", ErrInvalidValue, ns.Name)
	}
	searcher, ok := s.warm.(Searcher)
	if !ok {
		return QueryPage{}, fmt.Errorf("%w: the warehouse does not answer queries", ErrUnavailable)
	}
	switch {
	case limit < 0:
		return QueryPage{}, fmt.Errorf("%w: limit must not be negative", ErrInvalidValue)
	case limit == 0:
		limit = DefaultQueryLimit
	case limit > MaxQueryLimit:
		return QueryPage{}, fmt.Errorf("%w: limit %d is over the maximum of %d", ErrTooLarge, limit, MaxQueryLimit)
	}
	match, err = checkMatch(match)
	if err != nil {
		return QueryPage{}, err
	}
	var after *Key
	if cursor != "" {
		k, err := s.decodeCursor(ns, cursor)
		if err != nil {
			return QueryPage{}, err
		}
		after = &k
	}

	wctx, cancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
	defer cancel()
	if err := s.takeWarmSlot(ctx, wctx); err != nil {
		return QueryPage{}, err
	}
	defer s.freeWarmSlot()
	// One row more than the page tells whether another page follows.
	rows, err := searcher.Query(wctx, ns, match, limit+1, after)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return QueryPage{}, ctx.Err()
		case wctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
			return QueryPage{}, fmt.Errorf("query on namespace %q: %w", ns.Name, context.DeadlineExceeded)
		}
		// The warm tier classified err: a client error (a match the
		// warehouse cannot take), the warehouse failing (ErrUnavailable),
		// or a bug.
		return QueryPage{}, err
	}
	page := QueryPage{Rows: rows}
	if len(rows) > limit {
		page.Rows = rows[:limit]
		page.Next = s.encodeCursor(ns, rows[limit-1].Key)
	}
	return page, nil
}

// checkMatch validates a containment document and returns it compacted.
func checkMatch(match []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(match)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: match is missing; give a JSON object such as {\"status\":\"open\"}", ErrInvalidValue)
	}
	if len(trimmed) > maxMatchBytes {
		return nil, fmt.Errorf("%w: match is larger than %d bytes", ErrTooLarge, maxMatchBytes)
	}
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, fmt.Errorf("%w: match must be a JSON object", ErrInvalidValue)
	}
	if err := checkJSONText(trimmed, "match"); err != nil {
		return nil, err
	}
	if d := jsonDepth(trimmed); d > MaxMatchDepth {
		return nil, fmt.Errorf("%w: match is nested deeper than %d levels", ErrInvalidValue, MaxMatchDepth)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, trimmed); err != nil {
		return nil, fmt.Errorf("%w: match must be a JSON object", ErrInvalidValue)
	}
	return b.Bytes(), nil
}

// cursorMAC returns the tag that signs a cursor of key in ns.
func (s *Service) cursorMAC(ns *Namespace, key string) []byte {
	m := hmac.New(sha256.New, s.cursorKey)
	m.Write([]byte(ns.Name))
	m.Write([]byte{0})
	m.Write([]byte(key))
	return m.Sum(nil)[:16]
}

// encodeCursor returns the signed, opaque cursor that resumes after key.
func (s *Service) encodeCursor(ns *Namespace, k Key) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix+k.Text)) + "." +
		base64.RawURLEncoding.EncodeToString(s.cursorMAC(ns, k.Text))
}

// decodeCursor reads a cursor of encodeCursor as a key of ns. A cursor
// that this service (or one sharing its cursor key) did not issue for ns
// is refused: its signature does not match.
func (s *Service) decodeCursor(ns *Namespace, cursor string) (Key, error) {
	bad := fmt.Errorf("%w: the cursor is not one this service issued", ErrInvalidValue)
	if len(cursor) > 4*defaultMaxKeyBytes {
		return Key{}, bad
	}
	body, tag, ok := strings.Cut(cursor, ".")
	if !ok {
		return Key{}, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return Key{}, bad
	}
	mac, err := base64.RawURLEncoding.DecodeString(tag)
	text, ok := strings.CutPrefix(string(b), cursorPrefix)
	if err != nil || !ok || !hmac.Equal(mac, s.cursorMAC(ns, text)) {
		return Key{}, bad
	}
	k, err := ns.ParseKey(text)
	if err != nil {
		return Key{}, bad
	}
	return k, nil
}
