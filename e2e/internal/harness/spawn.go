package harness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/internal/testproc"
)

// Spawn runs the warmcache binary bin as `warmcache serve` with args (on
// free TCP ports unless args say otherwise) and the environment of env
// (Environ, and no other variable of the test's process), through
// localstack.Serve, the launcher the load tools use too. Its stdout and
// stderr go to Served.Log. It returns once the binary has printed want
// "warmcache: " lines (one per endpoint, then a notice when no keys are
// configured), from which Served holds the endpoints (endpoint.ParseLine),
// and its /readyz answers 200. When the test ends, a binary that still
// runs is stopped with SIGTERM (Process.Stop); a suite that holds it to a
// clean exit stops it itself and checks the error.
func Spawn(t testing.TB, bin string, env map[string]string, want int, args ...string) *Served {
	t.Helper()
	s := &Served{Log: NewLog(t)}
	served, err := localstack.Serve(context.Background(), bin, localstack.ServeOptions{
		Args: serveArgs(args), Env: Environ(env), Stdout: s.Log, Stderr: s.Log,
		Lines: want, OwnGroup: true})
	if err != nil {
		t.Fatalf("%v; log:\n%s", err, s.Log.TailLines(40))
	}
	s.Process = &Process{served.Process}
	s.Lines = served.Lines
	for _, e := range served.Endpoints {
		s.add(e)
	}
	t.Cleanup(func() {
		if s.Process.Running() {
			if err := s.Process.Stop(t, syscall.SIGTERM); err != nil {
				t.Logf("warmcache serve exited with %v; log (end):\n%s", err, s.Log.TailLines(40))
			}
		}
	})
	return s
}

// Process is a binary that Spawn runs.
type Process struct {
	*localstack.Process
}

// Stop sends sig to the binary and returns how it exited: nil for a clean
// exit. After 60s it kills the binary's process group and fails the test.
// Stopping a stopped binary returns how it exited.
func (p *Process) Stop(t testing.TB, sig syscall.Signal) error {
	t.Helper()
	err := p.Process.Stop(sig, time.Minute)
	if errors.Is(err, localstack.ErrNotStopped) {
		t.Errorf("warmcache serve: %v", err)
	}
	return err
}

// Log is a service's log, in a file of the test's temporary directory, so
// that a long run keeps none of it in memory. It is safe for concurrent
// writers.
type Log struct {
	f *os.File
}

// NewLog creates an empty log, closed when the test ends.
func NewLog(t testing.TB) *Log {
	t.Helper()
	// Appended to, as a binary and the test may both write to it.
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "serve.log"), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("log: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return &Log{f: f}
}

func (l *Log) Write(p []byte) (int, error) { return l.f.Write(p) }

// Path is the log's file.
func (l *Log) Path() string { return l.f.Name() }

// String returns everything written.
func (l *Log) String() string {
	b, err := os.ReadFile(l.f.Name())
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// TailBytes returns the last n bytes written.
func (l *Log) TailBytes(n int) string { return testproc.TailBytes(l.String(), n) }

// TailLines returns the last n lines written.
func (l *Log) TailLines(n int) string { return testproc.TailLines(l.String(), n) }
