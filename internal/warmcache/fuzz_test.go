package warmcache_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// FuzzParseKey checks that every key ParseKey accepts is canonical, bounded
// and safe to send to SQL, for both key types. Seeds: testdata/fuzz/FuzzParseKey.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"42", "-0", "0042", "9223372036854775807", "abc", "a\x00b", "", "\xff",
		"a\u0085b", "a\u202eb", "\u2066x", "' OR 1=1 --", "%31"} {
		f.Add(s)
	}
	bigint := &warmcache.Namespace{KeyType: warmcache.KeyBigint}
	text := &warmcache.Namespace{KeyType: warmcache.KeyText, MaxKeyBytes: 64}
	f.Fuzz(func(t *testing.T, raw string) {
		if k, err := bigint.ParseKey(raw); err == nil {
			if k.Text != strconv.FormatInt(k.Int, 10) {
				t.Fatalf("bigint %q: canonical %q does not match %d", raw, k.Text, k.Int)
			}
			again, err := bigint.ParseKey(k.Text)
			if err != nil || again != k {
				t.Fatalf("bigint %q: canonical form %q does not parse to itself", raw, k.Text)
			}
		}
		if k, err := text.ParseKey(raw); err == nil {
			if k.Text != raw || len(raw) == 0 || len(raw) > 64 || !utf8.ValidString(raw) {
				t.Fatalf("text key %q accepted as %q", raw, k.Text)
			}
			for _, r := range raw {
				if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
					t.Fatalf("text key %q with the control or bidirectional character U+%04X accepted", raw, r)
				}
			}
		}
	})
}

// FuzzCheckValue checks that every value accepted for storage is valid JSON
// within the size and depth bounds. Seeds: testdata/fuzz/FuzzCheckValue.
func FuzzCheckValue(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[[[[]]]]`, `"x"`, `{"a":`, `"\\"[["`, `{"status":"ok"}`} {
		f.Add([]byte(s))
	}
	packed := &warmcache.Namespace{Name: "p", Layout: warmcache.LayoutPacked}
	cols := &warmcache.Namespace{Name: "c", Layout: warmcache.LayoutColumns, Columns: []warmcache.Column{{Name: "status", Type: "text"}}}
	const maxBytes, maxDepth = 4096, 8
	f.Fuzz(func(t *testing.T, value []byte) {
		for _, ns := range []*warmcache.Namespace{packed, cols} {
			if err := warmcache.CheckValue(ns, value, maxBytes, maxDepth); err != nil {
				continue
			}
			if len(value) > maxBytes || !json.Valid(value) || !utf8.Valid(value) {
				t.Fatalf("%s: accepted %q", ns.Name, value)
			}
			checkStorable(t, value)
			if depth(t, value) > maxDepth {
				t.Fatalf("%s: accepted %q nested deeper than %d", ns.Name, value, maxDepth)
			}
			if ns == cols {
				var m map[string]json.RawMessage
				if err := json.Unmarshal(value, &m); err != nil {
					t.Fatalf("columns: accepted a value that is not an object: %q", value)
				}
				for k := range m {
					if k != "status" {
						t.Fatalf("columns: accepted field %q", k)
					}
				}
			}
		}
	})
}

// depth measures nesting with the JSON decoder, independently of the
// service's own scanner.
func depth(t *testing.T, value []byte) int {
	dec := json.NewDecoder(bytes.NewReader(value))
	d, max := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return max
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			d++
			if d > max {
				max = d
			}
		case json.Delim('}'), json.Delim(']'):
			d--
		}
	}
}

// checkStorable fails when an accepted JSON document holds what the
// warehouse cannot store: a NUL in a string, or a number out of numeric's
// range. It walks the document with the JSON decoder, independently of the
// service's scanner.
func checkStorable(t *testing.T, doc []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		switch v := tok.(type) {
		case string:
			if strings.ContainsRune(v, 0) {
				t.Fatalf("accepted %q with a NUL", doc)
			}
		case json.Number:
			mant, exp, _ := strings.Cut(strings.ToLower(v.String()), "e")
			if len(mant) > 1002 {
				t.Fatalf("accepted %q with a number of %d characters", doc, len(mant))
			}
			if exp != "" {
				if e, err := strconv.Atoi(exp); err != nil || e > 1000 || e < -1000 {
					t.Fatalf("accepted %q with exponent %s", doc, exp)
				}
			}
		}
	}
}

// FuzzCheckMatch checks the filter of a non-key query: every match
// accepted is a JSON object within the size and depth bounds, storable as
// jsonb (no NUL, numbers in range, valid UTF-8), and compacted without
// changing its meaning. Seeds: testdata/fuzz/FuzzCheckMatch.
func FuzzCheckMatch(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":"\u0000"}`, "{\"a\":\"\xff\"}", `{"a":1e999999}`, `[1]`, `{"a":{"b":[1,2]}}`,
		`{"name":"x' OR '1'='1"}`, `{"a":-0.5E-3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, match []byte) {
		got, err := warmcache.CheckMatch(match)
		if err != nil {
			if !errors.Is(err, warmcache.ErrInvalidValue) && !errors.Is(err, warmcache.ErrTooLarge) {
				t.Fatalf("match %q: error %v is not a client error", match, err)
			}
			return
		}
		trimmed := bytes.TrimSpace(match)
		if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(got) || !utf8.Valid(got) {
			t.Fatalf("match %q accepted as %q", match, got)
		}
		if depth(t, got) > warmcache.MaxMatchDepth {
			t.Fatalf("match %q nested deeper than %d accepted", match, warmcache.MaxMatchDepth)
		}
		checkStorable(t, got)
		a, errA := decodeExact(trimmed)
		b, errB := decodeExact(got)
		if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("match %q compacted to %q, another document", match, got)
		}
	})
}

// decodeExact decodes a JSON document keeping its numbers as their text, so
// that numbers beyond float64 (which jsonb's numeric keeps) compare too.
func decodeExact(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}
