package main

import (
	"bytes"
	"os"
	"testing"
)

// RESULTS.md ends with the hand-written parts it was written from, so that
// the next make bench keeps an edit of the reading of the results: an edit
// belongs in analysis.md (or capture.md), and then in RESULTS.md.
func TestResultsEndWithTheHandWrittenParts(t *testing.T) {
	results, err := os.ReadFile("../../RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	parts := handWritten("../..")
	if !bytes.Contains(parts, []byte("## Reading the results")) || !bytes.Contains(parts, []byte("## Change capture")) {
		t.Fatalf("analysis.md or capture.md is missing or lacks its heading (%d bytes read)", len(parts))
	}
	if !bytes.HasSuffix(results, parts) {
		t.Fatal("RESULTS.md does not end with analysis.md and capture.md: edit those, and the same text in RESULTS.md (or run make bench)")
	}
}
