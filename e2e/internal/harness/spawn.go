package harness

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/gateway"
	"github.com/warmcache/warmcache/internal/testproc"
)

// Spawn runs the warmcache binary bin as `warmcache serve` with args (on
// free TCP ports unless args say otherwise) and the environment of env
// (Environ, and no other variable of the test's process). Its stdout and
// stderr go to Served.Log. It returns once the binary has printed want
// "warmcache: " lines (one per endpoint, then a notice when no keys are
// configured), from which Served holds the endpoints (gateway.ParseLine),
// and its /readyz answers 200. When the test ends, a binary that still
// runs is stopped with SIGTERM (Process.Stop); a suite that holds it to a
// clean exit stops it itself and checks the error.
func Spawn(t testing.TB, bin string, env map[string]string, want int, args ...string) *Served {
	t.Helper()
	s := &Served{Log: NewLog(t)}
	cmd := exec.Command(bin, append([]string{"serve"}, serveArgs(args)...)...)
	cmd.Env = Environ(env)
	cmd.Stderr = s.Log.f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	s.Process = &Process{cmd: cmd, exited: make(chan struct{})}
	lines := make(chan string, want)
	go s.Process.wait(stdout, s.Log, lines)
	t.Cleanup(func() {
		if s.Process.Running() {
			if err := s.Process.Stop(t, syscall.SIGTERM); err != nil {
				t.Logf("warmcache serve exited with %v; log (end):\n%s", err, s.Log.TailLines(40))
			}
		}
	})
	timeout := time.After(time.Minute)
	for len(s.Lines) < want {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("warmcache serve exited before it served; printed %q; log:\n%s", s.Lines, s.Log.TailLines(40))
			}
			s.Lines = append(s.Lines, line)
			if e, ok := gateway.ParseLine(line); ok {
				s.add(e)
			}
		case <-timeout:
			t.Fatalf("warmcache serve printed %q within a minute, want %d lines; log:\n%s", s.Lines, want, s.Log.TailLines(40))
		}
	}
	if strings.HasPrefix(s.HTTP, "http://") {
		client := &http.Client{Timeout: 5 * time.Second}
		testproc.Eventually(t, 30*time.Second, "warmcache serve ready", func() bool {
			if !s.Process.Running() {
				t.Fatalf("warmcache serve exited; log:\n%s", s.Log.TailLines(40))
			}
			res, err := client.Get(s.HTTP + "/readyz")
			if err != nil {
				return false
			}
			_ = res.Body.Close()
			return res.StatusCode == http.StatusOK
		})
	}
	return s
}

// Process is a binary that Spawn runs.
type Process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // how it exited, once exited is closed
}

// wait copies the binary's stdout to log, sends its first cap(lines)
// "warmcache: " lines on lines, and closes lines at the end of stdout;
// then it waits for the binary to exit.
func (p *Process) wait(stdout io.Reader, log *Log, lines chan<- string) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 4<<10), 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		if n < cap(lines) && strings.HasPrefix(line, "warmcache: ") {
			lines <- line
			n++
		}
	}
	close(lines)
	p.err = p.cmd.Wait()
	close(p.exited)
}

// Pid is the binary's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Running reports whether the binary has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stop sends sig to the binary and returns how it exited: nil for a clean
// exit. After 60s it kills the binary's process group and fails the test.
// Stopping a stopped binary returns how it exited.
func (p *Process) Stop(t testing.TB, sig syscall.Signal) error {
	t.Helper()
	if p.Running() {
		_ = p.cmd.Process.Signal(sig)
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case it was frozen
	}
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Errorf("warmcache serve did not stop within 60s of %v; killing it", sig)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	return p.err
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
