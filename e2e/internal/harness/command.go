package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/internal/testproc"
)

// Run runs the warmcache binary bin with args, with the environment of env
// through Getenv (and no other variable of the test's process), its stdout
// and stderr to stdout and stderr. When the command fails, the error is the
// one it printed ("warmcache: <error>"), joined with its exit status.
func Run(ctx context.Context, bin string, args []string, env map[string]string, stdout, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = Environ(env)
	var errOut bytes.Buffer
	cmd.Stdout = stdout
	cmd.Stderr = io.MultiWriter(stderr, &errOut)
	err := cmd.Run()
	if err == nil {
		return nil
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return err
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if msg, ok := strings.CutPrefix(lines[i], "warmcache: "); ok {
			return fmt.Errorf("%s (%w)", msg, err)
		}
	}
	return err
}

// Environ returns env as a process environment, sorted, with the default
// of Getenv: WARMCACHE_FRESHNESS=off unless env sets it.
func Environ(env map[string]string) []string {
	list := make([]string, 0, len(env)+1)
	if _, ok := env["WARMCACHE_FRESHNESS"]; !ok {
		list = append(list, "WARMCACHE_FRESHNESS=off")
	}
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return list
}

// Migrate applies the migrations to the warehouse at dsn with the binary
// bin's `warmcache migrate up` and args (such as --namespaces), through
// localstack.Migrate, failing the test with what the command printed.
func Migrate(t testing.TB, bin, dsn string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := localstack.Migrate(ctx, bin, Environ(map[string]string{"WARMCACHE_POSTGRES_DSN": dsn}), args...); err != nil {
		t.Fatal(err)
	}
}

// MigrateAndSeed applies the migrations of the built-in namespaces to dsn
// (Migrate) and inserts widgets 1..n (SeedWidgets).
func MigrateAndSeed(t testing.TB, bin, dsn string, n int) {
	t.Helper()
	Migrate(t, bin, dsn)
	SeedWidgets(t, dsn, n)
}

// Main is the body of a TestMain whose tests run the warmcache binary: it
// builds the binary once into a fresh directory (testproc.MainWithBinary,
// which names suite if the build fails), sets *bin to its path, runs m and
// exits with its code.
func Main(m *testing.M, suite string, bin *string) {
	testproc.MainWithBinary(suite, func(path string) int {
		*bin = path
		return m.Run()
	})
}
