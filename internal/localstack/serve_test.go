package localstack_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/endpoint"
	"github.com/warmcache/warmcache/internal/localstack"
)

// script writes an executable shell script that stands in for the binary:
// it prints what `warmcache serve` prints, for the launcher to read.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "warmcache")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeReadsTheEndpointsAndWaitsForReadyz starts a stand-in that prints
// two serving lines, whose REST endpoint answers /readyz with 503 and then
// 200, and stops it.
func TestServeReadsTheEndpointsAndWaitsForReadyz(t *testing.T) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if asked.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	rest := endpoint.Endpoint{Transport: endpoint.REST, Network: "tcp", Addr: strings.TrimPrefix(srv.URL, "http://")}
	grpc := endpoint.Endpoint{Transport: endpoint.GRPC, Network: "tcp", Addr: "127.0.0.1:9"}
	bin := script(t, "echo '"+rest.Line()+"'\necho '"+grpc.Line()+"'\nexec sleep 60\n")
	var stdout strings.Builder
	s, err := localstack.Serve(context.Background(), bin, localstack.ServeOptions{Stdout: &stdout, Lines: 2, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.HTTP() != srv.URL || s.URL(endpoint.GRPC) != "127.0.0.1:9" || len(s.Lines) != 2 || asked.Load() < 3 {
		t.Errorf("HTTP %q, gRPC %q, lines %q, /readyz asked %d times", s.HTTP(), s.URL(endpoint.GRPC), s.Lines, asked.Load())
	}
	if err := s.Stop(syscall.SIGTERM, 10*time.Second); err == nil || errors.Is(err, localstack.ErrNotStopped) {
		t.Errorf("Stop = %v, want the signal's exit", err)
	}
	if !strings.Contains(stdout.String(), rest.Line()) {
		t.Errorf("stdout %q lacks the serving line", stdout.String())
	}
}

// TestServeReportsAnEarlyExit starts a stand-in that exits before it
// prints its REST endpoint.
func TestServeReportsAnEarlyExit(t *testing.T) {
	bin := script(t, "echo 'warmcache: config: no namespaces'\nexit 1\n")
	_, err := localstack.Serve(context.Background(), bin, localstack.ServeOptions{Timeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("Serve = %v, want an error that says it exited", err)
	}
}
