package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"testing"
)

// WarmcachePackage is the import path of the service's binary.
const WarmcachePackage = "github.com/warmcache/warmcache/cmd/warmcache"

// MainWithBinary is the body of a TestMain whose tests run the warmcache
// binary: it builds WarmcachePackage into a fresh directory that every user
// can search (servers started as another user may run it), calls run with
// the binary's path, removes the directory and exits with run's code. A
// failed build exits 1 with the compiler's output, naming suite.
func MainWithBinary(suite string, run func(bin string) int) {
	os.Exit(mainWithBinary(suite, run))
}

func mainWithBinary(suite string, run func(bin string) int) int {
	dir, err := os.MkdirTemp("", "warmcache-"+suite+"-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", suite, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", suite, err)
		return 1
	}
	bin := filepath.Join(dir, "warmcache")
	if out, err := build(bin, WarmcachePackage); err != nil {
		fmt.Fprintf(os.Stderr, "%s: build warmcache: %v\n%s", suite, err, out)
		return 1
	}
	return run(bin)
}

// Build builds the program pkg (an import path) into a directory of the
// test's own and returns the binary's path; a failed build fails the test
// with the compiler's output.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), path.Base(pkg))
	if out, err := build(bin, pkg); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// build runs the go tool of the toolchain that runs the tests, else the
// one on PATH.
func build(bin, pkg string) ([]byte, error) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	return exec.Command(goTool, "build", "-o", bin, pkg).CombinedOutput()
}
