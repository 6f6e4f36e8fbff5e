package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/warmcache/warmcache/e2e/internal/faultproxy"
)

// echo starts a server that echoes every line back, until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, deadline time.Duration) error {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(deadline))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		t.Fatalf("echo answered %q", line)
	}
	return err
}

// TestProxy forwards, delays past a deadline, stalls and resumes in order,
// and resets.
func TestProxy(t *testing.T) {
	p := faultproxy.Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := roundTrip(t, c, r, 5*time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	p.SetLatency(0, 300*time.Millisecond)
	if err := roundTrip(t, c, r, 50*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("with 300ms of latency, a 50ms deadline: %v, want it exceeded", err)
	}
	p.SetLatency(0, 0)
	// The late answer still arrives.
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("the late answer: %q, %v", line, err)
	}
	if err := roundTrip(t, c, r, 5*time.Second); err != nil {
		t.Fatalf("after the latency: %v", err)
	}

	p.Stall()
	if err := roundTrip(t, c, r, 100*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled: %v, want the deadline exceeded", err)
	}
	p.Resume()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("the stalled answer: %q, %v", line, err)
	}
	if err := roundTrip(t, c, r, 5*time.Second); err != nil {
		t.Fatalf("resumed: %v", err)
	}

	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset ended %d connections, want 1", n)
	}
	if err := roundTrip(t, c, r, 5*time.Second); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("after a reset: %v, want a reset connection", err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(t, c2, bufio.NewReader(c2), 5*time.Second); err != nil {
		t.Fatalf("a new connection after a reset: %v", err)
	}
}
