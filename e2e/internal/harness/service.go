package harness

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/endpoint"
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

// Served is a service that serves: in-process (Serve) or the built binary
// (Spawn). Its addresses are those of its endpoints, which Endpoints
// lists; a transport it does not serve has an empty address.
type Served struct {
	HTTP, GRPC             string // http://host:port or https://, host:port
	HTTPSocket, GRPCSocket string // socket paths
	DaprHTTP, DaprGRPC     string // the Dapr state API: http://host:port, host:port
	DaprSocket             string // the Dapr pluggable state store's socket path
	Endpoints              []endpoint.Endpoint
	// Lines are the "warmcache: " lines it printed at start.
	Lines []string
	// Log is its log, and for the binary what it printed.
	Log *Log
	// Gateway is the service of Serve, for a test that also calls its
	// core; nil for the binary.
	Gateway *gateway.Gateway
	// Process is the binary of Spawn; nil in-process.
	Process *Process
}

// add records an endpoint that the service serves.
func (s *Served) add(e endpoint.Endpoint) {
	s.Endpoints = append(s.Endpoints, e)
	unix := e.Network == "unix"
	switch {
	case e.Transport == endpoint.REST && unix:
		s.HTTPSocket = e.Addr
	case e.Transport == endpoint.REST:
		s.HTTP = e.URL()
	case e.Transport == endpoint.GRPC && unix:
		s.GRPCSocket = e.Addr
	case e.Transport == endpoint.GRPC:
		s.GRPC = e.Addr
	case e.Transport == endpoint.DaprHTTP:
		s.DaprHTTP = e.URL()
	case e.Transport == endpoint.DaprGRPC:
		s.DaprGRPC = e.Addr
	case e.Transport == endpoint.DaprComponent:
		s.DaprSocket = e.Addr
	}
}

// serveArgs are the arguments of `warmcache serve` for a test: on free TCP
// ports unless args say otherwise.
func serveArgs(args []string) []string {
	return append([]string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, args...)
}

// Serve runs the service of `warmcache serve` with args (on free TCP ports
// unless args say otherwise) and env in-process, as the command does:
// config.Load, then gateway.Open, Serve and Close, with the log on
// Served.Log at the configured level. It returns once the gateway listens
// on every endpoint, which Served holds as the gateway reports them. want
// is how many "warmcache: " lines it must have printed by then, at least
// (one per endpoint, then a notice when no keys are configured). The service must
// stop cleanly, within 30s, when the test ends.
func Serve(t testing.TB, env map[string]string, want int, args ...string) *Served {
	t.Helper()
	s := &Served{Log: NewLog(t)}
	cfg, err := config.Load(config.ServeCommand, serveArgs(args), Getenv(env), s.Log)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout testproc.SyncBuffer
	g, err := gateway.Open(ctx, cfg, gateway.Options{Logger: gateway.NewLogger(s.Log, cfg.LogLevel), Stdout: &stdout})
	if err != nil {
		cancel()
		t.Fatalf("server did not start: %v; log:\n%s", err, s.Log)
	}
	s.Gateway = g
	done := make(chan error, 1)
	go func() { done <- errors.Join(g.Serve(ctx), g.Close()) }()
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
	select {
	case <-g.Listening():
	case err := <-done:
		done <- err
		t.Fatalf("server did not start: %v; printed %q; log:\n%s", err, stdout.String(), s.Log)
	}
	for _, e := range g.Endpoints() {
		s.add(e)
	}
	s.Lines = strings.FieldsFunc(stdout.String(), func(r rune) bool { return r == '\n' })
	if len(s.Lines) < want {
		t.Fatalf("the server printed %d lines, want at least %d: %q", len(s.Lines), want, s.Lines)
	}
	return s
}
