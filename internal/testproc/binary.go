package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	// go test puts the go command of its own toolchain first on PATH.
	if out, err := exec.Command("go", "build", "-o", bin, WarmcachePackage).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: build warmcache: %v\n%s", suite, err, out)
		return 1
	}
	return run(bin)
}
