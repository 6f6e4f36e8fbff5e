package warmcache

import (
	"bytes"
	"context"
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
)

// cursorPrefix marks the version of the cursor format.
const cursorPrefix = "k1:"

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
// service issued), ErrTooLarge (limit or match too large), ErrUnavailable
// (the warm tier has no query, or failed), ErrOverloaded, or
// context.DeadlineExceeded (the statement timeout). Query is safe for
// concurrent use.
func (s *Service) Query(ctx context.Context, namespace string, match []byte, limit int, cursor string) (QueryPage, error) {
	ns, err := s.Namespace(namespace)
	if err != nil {
		return QueryPage{}, err
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
		k, err := ns.decodeCursor(cursor)
		if err != nil {
			return QueryPage{}, err
		}
		after = &k
	}

	wctx, cancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
	defer cancel()
	select {
	case s.warmSlots <- struct{}{}:
	case <-wctx.Done():
		if ctx.Err() != nil {
			return QueryPage{}, ctx.Err()
		}
		return QueryPage{}, fmt.Errorf("%w: too many warehouse reads in flight", ErrOverloaded)
	}
	defer func() { <-s.warmSlots }()
	// One row more than the page tells whether another page follows.
	rows, err := searcher.Query(wctx, ns, match, limit+1, after)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return QueryPage{}, ctx.Err()
		case wctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
			return QueryPage{}, fmt.Errorf("query on namespace %q: %w", ns.Name, context.DeadlineExceeded)
		}
		return QueryPage{}, fmt.Errorf("%w: warehouse query: %w", ErrUnavailable, err)
	}
	page := QueryPage{Rows: rows}
	if len(rows) > limit {
		page.Rows = rows[:limit]
		page.Next = encodeCursor(rows[limit-1].Key)
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
	if d := jsonDepth(trimmed); d > 32 {
		return nil, fmt.Errorf("%w: match is nested deeper than 32 levels", ErrInvalidValue)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, trimmed); err != nil {
		return nil, fmt.Errorf("%w: match must be a JSON object", ErrInvalidValue)
	}
	return b.Bytes(), nil
}

// encodeCursor returns the opaque cursor that resumes after key.
func encodeCursor(k Key) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + k.Text))
}

// decodeCursor reads a cursor of encodeCursor as a key of ns.
func (ns *Namespace) decodeCursor(cursor string) (Key, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	text, ok := strings.CutPrefix(string(b), cursorPrefix)
	if err != nil || !ok {
		return Key{}, fmt.Errorf("%w: the cursor is not one this service issued", ErrInvalidValue)
	}
	k, err := ns.ParseKey(text)
	if err != nil {
		return Key{}, fmt.Errorf("%w: the cursor is not one this service issued", ErrInvalidValue)
	}
	return k, nil
}
