package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/gateway"
	"github.com/warmcache/warmcache/internal/testproc"
)

// Options are what an in-process service takes besides its configuration:
// a logger, a registry, and hooks that wrap its tiers or adjust the options
// of its Redis client and core.
type Options = gateway.Options

// Gateway is an opened service: its tiers, its core (Service), its REST
// handler (Handler) and its metrics (Registry).
type Gateway struct {
	*gateway.Gateway
}

// Getenv returns the environment of a service under test: the variables of
// env and nothing else, except that WARMCACHE_FRESHNESS is off unless env
// sets it. The suites share the stack's PostgreSQL, whose wal_level is
// logical, and a server with change capture would leave a replication slot
// in each test's database, which could then not be dropped; the change capture
// suite (e2e/capture) sets it on clusters of its own.
func Getenv(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		if k == "WARMCACHE_FRESHNESS" {
			return "off"
		}
		return ""
	}
}

// Config loads the configuration of `warmcache serve` from args and env
// (through Getenv), as the command does.
func Config(t testing.TB, env map[string]string, args ...string) config.Config {
	t.Helper()
	cfg, err := config.Load(config.ServeCommand, args, Getenv(env), io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// Open builds the service of cfg in-process, without its listeners, for a
// test that serves Handler itself or calls the core. It is closed when the
// test ends.
func Open(t testing.TB, cfg config.Config, o Options) *Gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := gateway.Open(ctx, cfg, o)
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return &Gateway{g}
}

// Served are the addresses a served service printed, by the text after
// "serving", and what it printed and logged.
type Served struct {
	HTTP, GRPC             string // http://host:port or https://, host:port
	HTTPSocket, GRPCSocket string // socket paths
	DaprHTTP, DaprGRPC     string // the Dapr state API: http://host:port, host:port
	DaprSocket             string // the Dapr pluggable state store's socket path
	Lines                  []string
	Log                    *testproc.SyncBuffer
	// Gateway is the served service, for a test that also calls its core.
	Gateway *gateway.Gateway
}

// Serve runs the service of `warmcache serve` with args (always on free
// TCP ports) and env in-process, as the command does: config.Load, then
// gateway.Open, Serve and Close, with the log on Served.Log at the
// configured level. It waits for the lines the service prints at start:
// want is how many "warmcache: " lines to wait for (one per listener, then
// a notice when no keys are configured). The service must stop cleanly,
// within 30s, when the test ends.
func Serve(t testing.TB, env map[string]string, want int, args ...string) *Served {
	t.Helper()
	s := &Served{Log: &testproc.SyncBuffer{}}
	args = append([]string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, args...)
	cfg, err := config.Load(config.ServeCommand, args, Getenv(env), s.Log)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	g, err := gateway.Open(ctx, cfg, gateway.Options{Logger: gateway.NewLogger(s.Log, cfg.LogLevel), Stdout: pw})
	if err != nil {
		cancel()
		t.Fatalf("server did not start: %v; log:\n%s", err, s.Log)
	}
	s.Gateway = g
	done := make(chan error, 1)
	go func() {
		err := errors.Join(g.Serve(ctx), g.Close())
		pw.CloseWithError(fmt.Errorf("server stopped: %v", err))
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v after shutdown; log:\n%s", err, s.Log)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not return within 30s of shutdown")
		}
	})
	br := bufio.NewReader(pr)
	for n := 0; n < want; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("server did not start: %v; printed %q; log:\n%s", err, s.Lines, s.Log)
		}
		line = strings.TrimSpace(line)
		s.Lines = append(s.Lines, line)
		if strings.HasPrefix(line, "warmcache: ") {
			n++
		}
		rest, _ := strings.CutPrefix(line, "warmcache: serving ")
		switch {
		case strings.HasPrefix(rest, "the Dapr state API over HTTP on "):
			s.DaprHTTP = strings.TrimPrefix(rest, "the Dapr state API over HTTP on ")
		case strings.HasPrefix(rest, "the Dapr state API over gRPC on "):
			s.DaprGRPC = strings.TrimPrefix(rest, "the Dapr state API over gRPC on ")
		case strings.HasPrefix(rest, "the Dapr pluggable state store "):
			if _, socket, ok := strings.Cut(rest, " on unix:"); ok {
				s.DaprSocket, _, _ = strings.Cut(socket, " ")
			}
		case strings.HasPrefix(rest, "HTTP on unix:"):
			s.HTTPSocket = strings.TrimPrefix(rest, "HTTP on unix:")
		case strings.HasPrefix(rest, "HTTP on "):
			s.HTTP = strings.TrimPrefix(rest, "HTTP on ")
		case strings.HasPrefix(rest, "gRPC on unix:"):
			s.GRPCSocket = strings.TrimPrefix(rest, "gRPC on unix:")
		case strings.HasPrefix(rest, "gRPC on "):
			s.GRPC = strings.TrimSuffix(strings.TrimPrefix(rest, "gRPC on "), " (TLS)")
		}
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()
	return s
}
