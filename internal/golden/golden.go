// Package golden compares what a test produced with a golden file in the
// test's testdata directory, and rewrites the file when the test runs
// with -update. It is for tests only.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update is the test binary's -update flag: flags are process-wide, and
// every test package that checks golden files shares this one.
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Check compares got with testdata/name.golden, or rewrites that file with
// -update. A difference is an error of t that shows both texts.
func Check(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("write golden file: %v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
