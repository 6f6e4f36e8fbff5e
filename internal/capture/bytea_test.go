package capture_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/capture"
)

// escapeBytea writes b in bytea's escape output format.
func escapeBytea(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		switch {
		case c == '\\':
			s.WriteString(`\\`)
		case c < 0x20 || c > 0x7e:
			fmt.Fprintf(&s, `\%03o`, c)
		default:
			s.WriteByte(c)
		}
	}
	return s.String()
}

func TestDecodeBytea(t *testing.T) {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	tests := []struct {
		name string
		text string
		want []byte
		ok   bool
	}{
		{"hex every byte", `\x` + hex.EncodeToString(every), every, true},
		{"hex empty", `\x`, []byte{}, true},
		{"hex upper case", `\xDEADBEEF`, []byte{0xde, 0xad, 0xbe, 0xef}, true},
		{"escape every byte", escapeBytea(every), every, true},
		{"escape empty", "", []byte{}, true},
		{"hex odd digits", `\xabc`, nil, false},
		{"hex not hex", `\xzz`, nil, false},
		{"escape bad octal", `\400`, nil, false},
		{"escape lone backslash", `ab\`, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := capture.DecodeBytea([]byte(tt.text))
			if ok != tt.ok {
				t.Fatalf("DecodeBytea(%q) ok = %v, want %v", tt.text, ok, tt.ok)
			}
			if ok && (got == nil || !bytes.Equal(got, tt.want)) {
				t.Fatalf("DecodeBytea(%q) = %x, want %x", tt.text, got, tt.want)
			}
		})
	}
}
