package warmcache_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/warmcache"
)

func TestParseKey(t *testing.T) {
	bigint := &warmcache.Namespace{KeyType: warmcache.KeyBigint}
	text := &warmcache.Namespace{KeyType: warmcache.KeyText, MaxKeyBytes: 8}
	cases := []struct {
		name string
		ns   *warmcache.Namespace
		raw  string
		want string // canonical; empty means invalid
	}{
		{"bigint", bigint, "42", "42"},
		{"bigint leading zeros", bigint, "0042", "42"},
		{"bigint negative", bigint, "-7", "-7"},
		{"bigint max", bigint, "9223372036854775807", "9223372036854775807"},
		{"bigint overflow", bigint, "9223372036854775808", ""},
		{"bigint letters", bigint, "4x2", ""},
		{"bigint float", bigint, "4.2", ""},
		{"empty", bigint, "", ""},
		{"text", text, "abc-1", "abc-1"},
		{"text too long", text, "abcdefghi", ""},
		{"text control char", text, "a\x00b", ""},
		{"text invalid utf8", text, "a\xffb", ""},
		{"bigint default max length", bigint, strings.Repeat("1", 300), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, err := c.ns.ParseKey(c.raw)
			if c.want == "" {
				if !errors.Is(err, warmcache.ErrInvalidKey) {
					t.Fatalf("ParseKey(%q) = %v, %v; want ErrInvalidKey", c.raw, k, err)
				}
				return
			}
			if err != nil || k.Text != c.want {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", c.raw, k.Text, err, c.want)
			}
		})
	}
}
