package warmcache_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// FuzzParseKey checks that every key ParseKey accepts is canonical, bounded
// and safe to send to SQL, for both key types. Seeds: testdata/fuzz/FuzzParseKey.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"42", "-0", "0042", "9223372036854775807", "abc", "a\x00b", "", "\xff"} {
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
			for _, c := range []byte(raw) {
				if c < 0x20 || c == 0x7f {
					t.Fatalf("text key %q with a control character accepted", raw)
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
			if len(value) > maxBytes || !json.Valid(value) {
				t.Fatalf("%s: accepted %q", ns.Name, value)
			}
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
