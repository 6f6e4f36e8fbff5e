package docs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConventionCatchesDrift checks the reading of a page: a skip marker
// applies to the sh block right after it, and a marker that is misspelled,
// not directly before a fence, or before a block that never runs is an
// error, so that no example is skipped or run by mistake.
func TestConventionCatchesDrift(t *testing.T) {
	for _, tc := range []struct {
		name, page string
		err        string // empty: no error
		skips      []string
	}{
		{"marked", "<!-- docs-test: skip needs daprd -->\n```sh\ndapr run\n```\n```sh\ncurl x\n```\n", "", []string{"needs daprd", ""}},
		{"blank line between", "<!-- docs-test: skip needs daprd -->\n\n```sh\ndapr run\n```\n", "not directly before a fence", nil},
		{"before yaml", "<!-- docs-test: skip no -->\n```yaml\na: 1\n```\n", "only sh blocks run", nil},
		{"misspelled", "<!-- docs-test: skipped reason -->\n```sh\ntrue\n```\n", "not <!-- docs-test: skip REASON -->", nil},
		{"no reason", "<!-- docs-test: skip -->\n```sh\ntrue\n```\n", "not <!-- docs-test: skip REASON -->", nil},
		{"unclosed", "```sh\ntrue\n", "never closed", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "page.md"), []byte(tc.page), 0o644); err != nil {
				t.Fatal(err)
			}
			bs, err := blocks(dir, "page.md")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var skips []string
			for _, b := range bs {
				skips = append(skips, b.skip)
			}
			if strings.Join(skips, "|") != strings.Join(tc.skips, "|") {
				t.Errorf("skips %q, want %q", skips, tc.skips)
			}
		})
	}
}

// TestExpectedStatus checks that "# → NNN" becomes the expectation of the
// command it ends, continued lines included, and that the addresses are
// substituted.
func TestExpectedStatus(t *testing.T) {
	got := script("curl -i 127.0.0.1:8080/a   # → 404, gone\ncurl -X PUT \\\n  127.0.0.1:8080/b  # → 200\ncurl 127.0.0.1:8080/c\n",
		strings.NewReplacer("127.0.0.1:8080", "127.0.0.1:1234"))
	body := strings.TrimPrefix(got, prelude)
	want := "DOCS_EXPECT=404 curl -i 127.0.0.1:1234/a   # → 404, gone\nDOCS_EXPECT=200 curl -X PUT \\\n  127.0.0.1:1234/b  # → 200\ncurl 127.0.0.1:1234/c\n"
	if body != want {
		t.Errorf("script\n%s\nwant\n%s", body, want)
	}
}
