package main

import (
	"strings"
	"testing"
	"time"
)

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// The format of a load is the one asked for, or by the file's extension.
func TestLoadFormat(t *testing.T) {
	for _, tc := range []struct {
		path, format, want string
	}{
		{"-", "auto", "ndjson"},
		{"rows.csv", "auto", "csv"},
		{"ROWS.CSV", "", "csv"},
		{"rows.ndjson", "auto", "ndjson"},
		{"rows.csv", "ndjson", "ndjson"},
		{"-", "csv", "csv"},
	} {
		got, err := loadFormat(tc.path, tc.format)
		if err != nil || got != tc.want {
			t.Errorf("loadFormat(%q, %q) = %q, %v; want %q", tc.path, tc.format, got, err, tc.want)
		}
	}
	if _, err := loadFormat("rows.csv", "xml"); err == nil {
		t.Error("loadFormat accepted xml")
	}
}

// The progress line has a bar only when the input's size is known, and the
// bar never runs past full.
func TestProgressLine(t *testing.T) {
	line := progressLine(2500, 1<<20, -1, time.Second)
	if strings.Contains(line, "[") || !strings.HasPrefix(line, "2,500 rows  2,500 rows/s  1.0 MiB") {
		t.Errorf("unknown size: %q", line)
	}
	half := progressLine(10, 50, 100, time.Second)
	if !strings.HasPrefix(half, "["+strings.Repeat("#", 15)+strings.Repeat(".", 15)+"]  50%") {
		t.Errorf("half way: %q", half)
	}
	over := progressLine(10, 200, 100, time.Second)
	if !strings.HasPrefix(over, "["+strings.Repeat("#", 30)+"] 100%") {
		t.Errorf("past the size: %q", over)
	}
}
