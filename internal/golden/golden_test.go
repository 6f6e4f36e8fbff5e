package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errors []string
	fatal  bool
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.errors = append(r.errors, f) }
func (r *recorder) Fatalf(f string, a ...any) { r.fatal = true; r.errors = append(r.errors, f) }

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "plan.golden"), []byte("SELECT 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	same := &recorder{TB: t}
	Check(same, "plan", []byte("SELECT 1\n"))
	if len(same.errors) != 0 {
		t.Errorf("the same text failed: %q", same.errors)
	}

	differs := &recorder{TB: t}
	Check(differs, "plan", []byte("SELECT 2\n"))
	if len(differs.errors) != 1 || differs.fatal || !strings.Contains(differs.errors[0], "differs") {
		t.Errorf("a different text gave %q (fatal %v), want one error that it differs", differs.errors, differs.fatal)
	}

	missing := &recorder{TB: t}
	Check(missing, "absent", []byte("x"))
	if !missing.fatal {
		t.Errorf("a missing golden file gave %q, want a fatal error", missing.errors)
	}

	*update = true
	t.Cleanup(func() { *update = false })
	rewrite := &recorder{TB: t}
	Check(rewrite, "plan", []byte("SELECT 3\n"))
	if b, err := os.ReadFile(filepath.Join("testdata", "plan.golden")); err != nil || string(b) != "SELECT 3\n" || len(rewrite.errors) != 0 {
		t.Errorf("-update left %q, %v (errors %q), want the new text written", b, err, rewrite.errors)
	}
}
