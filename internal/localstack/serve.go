package localstack

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/warmcache/warmcache/internal/endpoint"
)

// ServeOptions says how Serve starts `warmcache serve`.
type ServeOptions struct {
	// Args are the arguments after serve.
	Args []string
	// Env is the binary's whole environment. Nil means this process's.
	Env []string
	// Stdout receives every line the binary prints on stdout, the serving
	// lines too; Stderr receives its stderr. Nil discards them.
	Stdout, Stderr io.Writer
	// Lines is how many "warmcache: " lines Serve reads before it waits
	// for /readyz: one per endpoint, then a notice when no API keys are
	// configured. Zero means up to the line of the REST endpoint on TCP.
	Lines int
	// Wrap, when set, returns the command that runs bin with args in its
	// stead, such as taskset's pinning of it to a CPU.
	Wrap func(bin string, args []string) (string, []string)
	// OwnGroup runs the binary in a process group of its own, which Stop
	// kills whole when the binary outlives its grace.
	OwnGroup bool
	// Timeout bounds the start: the serving lines and then /readyz. Zero
	// means a minute.
	Timeout time.Duration
}

// linePrefix starts every line that warmcache prints on stdout at start.
const linePrefix = "warmcache: "

// Serve starts the warmcache binary bin as `warmcache serve` with o, reads
// the endpoints from the lines it prints (endpoint.ParseLine), and returns
// once /readyz of its REST endpoint answers 200 (where that endpoint is
// plain HTTP on TCP). A binary that exits first, or does not get there
// within o.Timeout, is killed, and Serve returns an error that says which.
// The caller stops the binary it returns (Served.Stop).
func Serve(ctx context.Context, bin string, o ServeOptions) (*Served, error) {
	timeout := o.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	name, args := bin, append([]string{"serve"}, o.Args...)
	if o.Wrap != nil {
		name, args = o.Wrap(name, args)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = o.Env
	cmd.Stderr = o.Stderr
	if o.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	lines := make(chan string, 64)
	p, err := start(cmd, o.OwnGroup, func() { forwardLines(stdout, o.Stdout, lines) })
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Served{Process: p}
	err = s.read(ctx, lines, o.Lines)
	if err == nil {
		err = s.ready(ctx)
	}
	if err != nil {
		_ = p.Stop(syscall.SIGKILL, 10*time.Second)
		return nil, err
	}
	return s, nil
}

// forwardLines copies the lines of stdout to w (nil: nowhere) and sends
// the "warmcache: " ones on lines while it has room, then closes lines at
// the end of stdout.
func forwardLines(stdout io.Reader, w io.Writer, lines chan<- string) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 4<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if w != nil {
			fmt.Fprintln(w, line)
		}
		if strings.HasPrefix(line, linePrefix) {
			select {
			case lines <- line:
			default:
			}
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	close(lines)
}

// read takes the serving lines from lines: want of them, or with want
// zero up to the REST endpoint's line on TCP.
func (s *Served) read(ctx context.Context, lines <-chan string, want int) error {
	for want > 0 && len(s.Lines) < want || want == 0 && s.HTTP() == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				<-s.exited
				return fmt.Errorf("warmcache serve exited (%v) before it served; it printed %q", s.err, s.Lines)
			}
			s.Lines = append(s.Lines, line)
			if e, ok := endpoint.ParseLine(line); ok {
				s.Endpoints = append(s.Endpoints, e)
			}
		case <-ctx.Done():
			return fmt.Errorf("warmcache serve printed %q before its start timed out, want %d lines", s.Lines, want)
		}
	}
	return nil
}

// ready polls /readyz of the REST endpoint, where it is plain HTTP, until
// it answers 200.
func (s *Served) ready(ctx context.Context) error {
	base := s.HTTP()
	if !strings.HasPrefix(base, "http://") {
		return nil
	}
	err := s.WaitStatus(ctx, base+"/readyz", http.StatusOK, 50*time.Millisecond)
	if errors.Is(err, ErrExited) {
		return fmt.Errorf("warmcache serve exited (%v) before %s/readyz answered 200", s.err, base)
	}
	if err != nil {
		return fmt.Errorf("warmcache serve not ready: %w", err)
	}
	return nil
}

// Served is a `warmcache serve` that Serve started.
type Served struct {
	*Process
	// Endpoints are those of the serving lines Serve read.
	Endpoints []endpoint.Endpoint
	// Lines are the "warmcache: " lines Serve read.
	Lines []string
}

// URL returns the address a client dials for transport t on TCP
// (endpoint.Endpoint.URL), or "" where the binary does not serve it.
func (s *Served) URL(t endpoint.Transport) string {
	for _, e := range s.Endpoints {
		if e.Transport == t && e.Network == "tcp" {
			return e.URL()
		}
	}
	return ""
}

// HTTP returns the REST endpoint's URL on TCP: http://host:port, or
// https:// with TLS.
func (s *Served) HTTP() string { return s.URL(endpoint.REST) }

// Process is a binary that Serve or Start started.
type Process struct {
	cmd    *exec.Cmd
	group  bool
	exited chan struct{}
	err    error // how it exited, once exited is closed
}

// Start starts cmd and watches for its exit.
func Start(cmd *exec.Cmd) (*Process, error) {
	return start(cmd, cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid, nil)
}

// start starts cmd; before waiting for its exit, it runs drain (nil:
// nothing), which reads the pipes that cmd.Wait would close.
func start(cmd *exec.Cmd, group bool, drain func()) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, group: group, exited: make(chan struct{})}
	go func() {
		if drain != nil {
			drain()
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the binary's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the binary has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err returns how the binary exited (nil: cleanly), once Exited is closed.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// Running reports whether the binary has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Signal sends sig to the binary, unless it has exited.
func (p *Process) Signal(sig os.Signal) error {
	if !p.Running() {
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

// ErrExited reports a binary that exited while WaitStatus waited for it.
var ErrExited = errors.New("exited")

// WaitStatus polls url every interval until it answers status, the binary
// exits (ErrExited) or ctx ends (an error with the last answer).
func (p *Process) WaitStatus(ctx context.Context, url string, status int, interval time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := "no answer"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == status {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		select {
		case <-p.exited:
			return ErrExited
		case <-ctx.Done():
			return fmt.Errorf("%s answered %s, want %d", url, last, status)
		case <-tick.C:
		}
	}
}

// ErrNotStopped reports a binary that did not exit within the grace that
// Stop gave it, and was killed.
var ErrNotStopped = errors.New("did not stop in time, and was killed")

// Stop sends sig to the binary (and SIGCONT, in case it was frozen), waits
// up to grace for it to exit and returns how it exited: nil for a clean
// exit. A binary still running after grace is killed, with its process
// group where it has one of its own, and Stop returns ErrNotStopped.
// Stopping a binary that has exited returns how it exited.
func (p *Process) Stop(sig os.Signal, grace time.Duration) error {
	if p.Running() {
		_ = p.cmd.Process.Signal(sig)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(grace):
	}
	if p.group {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	} else {
		_ = p.cmd.Process.Kill()
	}
	<-p.exited
	return fmt.Errorf("%s %w within %v of %v", p.cmd.Path, ErrNotStopped, grace, sig)
}

// Migrate applies the migrations with the warmcache binary bin's
// `warmcache migrate up` and args (such as --namespaces), in the
// environment env (nil: this process's), which names the warehouse
// (WARMCACHE_POSTGRES_DSN). Its error holds what the command printed.
func Migrate(ctx context.Context, bin string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, append([]string{"migrate", "up"}, args...)...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s migrate up: %w\n%s", bin, err, out)
	}
	return nil
}
