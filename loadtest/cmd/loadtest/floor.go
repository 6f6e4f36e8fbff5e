package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/warmcache/warmcache/internal/grpcapi"
	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/httpapi"
)

// floorBody returns a JSON document of exactly n bytes (n >= 34).
func floorBody(n int) []byte {
	const head, tail = `{"widget":{"id":"floor","pad":"`, `"}}`
	pad := max(n-len(head)-len(tail), 0)
	return []byte(head + strings.Repeat("x", pad) + tail)
}

// floorKeyHandler answers a GET of one key with the constant body and the
// headers of the service's hit.
func floorKeyHandler(body []byte) http.HandlerFunc {
	length := []string{strconv.Itoa(len(body))}
	return func(w http.ResponseWriter, r *http.Request) {
		_ = chi.URLParam(r, "namespace")
		_ = chi.URLParam(r, "key")
		h := w.Header()
		h["X-Cache"] = []string{"floor"}
		h["Etag"] = []string{`"1"`}
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = length
		_, _ = w.Write(body)
	}
}

// newFloorHandler is the floor: a chi router with the service's GET route
// shape and answer headers, answering a constant body without touching any
// tier and without the service's middleware.
func newFloorHandler(body []byte) http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	r.Route("/v1/kv/{namespace}", func(r chi.Router) {
		r.Get("/{key}", floorKeyHandler(body))
	})
	return r
}

// floorMWRoute is the route of the middleware floor, under the service's
// /v1/kv/{namespace} routes: GET /v1/kv/{namespace}/_floor/{key}.
const floorMWRoute = "/_floor/{key}"

// newMiddlewareFloorHandler is the service's own REST handler
// (httpapi.NewHandler with the service's default options: its metrics,
// recovery, in-flight bound, router and authorization) with one more route
// that answers the constant body, so that a GET of it pays everything a
// hit pays except the core's read. The handler has no core behind it: its
// other /v1 routes must not be called.
func newMiddlewareFloorHandler(body []byte, logw io.Writer) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := httpapi.NewHandler(nil, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), reg, logger, httpapi.Options{})
	if err != nil {
		return nil, err
	}
	mux, ok := h.(*chi.Mux)
	if !ok {
		return nil, fmt.Errorf("httpapi.NewHandler returned %T, not a chi router", h)
	}
	for _, rt := range mux.Routes() {
		if rt.Pattern != "/v1/kv/{namespace}/*" {
			continue
		}
		sub, ok := rt.SubRoutes.(*chi.Mux)
		if !ok {
			return nil, fmt.Errorf("the /v1/kv/{namespace} routes are %T, not a chi router", rt.SubRoutes)
		}
		sub.Get(floorMWRoute, floorKeyHandler(body))
		return h, nil
	}
	return nil, errors.New("httpapi.NewHandler has no /v1/kv/{namespace} routes")
}

// grpcFloor is the gRPC floor: the Cache service answering every Get with
// the constant value, and nothing else.
type grpcFloor struct {
	warmcachev1.UnimplementedCacheServer
	body []byte
}

func (f *grpcFloor) Get(_ context.Context, req *warmcachev1.GetRequest) (*warmcachev1.GetResponse, error) {
	return &warmcachev1.GetResponse{Item: &warmcachev1.Item{Key: req.GetKey(), Value: f.body, Version: 1, Source: "floor"}}, nil
}

// floorServer returns an http.Server with the service's settings.
func floorServer(h http.Handler, stderr io.Writer) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(stderr, "floor: ", 0),
	}
}

// floorFlags are the flags of `loadtest floor`.
type floorFlags struct {
	addr, mwAddr, grpcAddr string
	size                   int
}

// parseFloorFlags parses the flags of `loadtest floor` and checks that
// every address is a loopback address.
func parseFloorFlags(args []string, stderr io.Writer) (floorFlags, error) {
	var f floorFlags
	fs := flag.NewFlagSet("loadtest floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:0", "listen address of the plain floor (loopback)")
	fs.StringVar(&f.mwAddr, "mw-addr", "", "listen address of the floor behind the service's middleware (loopback; empty: none)")
	fs.StringVar(&f.grpcAddr, "grpc-addr", "", "listen address of the gRPC floor (loopback; empty: none)")
	fs.IntVar(&f.size, "bytes", 460, "body size")
	if err := fs.Parse(args); err != nil {
		return floorFlags{}, err
	}
	for _, a := range []string{f.addr, f.mwAddr, f.grpcAddr} {
		if a == "" {
			continue
		}
		if err := requireLoopback(a); err != nil {
			return floorFlags{}, fmt.Errorf("floor: %w", err)
		}
	}
	return f, nil
}

// serveFloor runs `loadtest floor -addr HOST:PORT [-mw-addr HOST:PORT]
// [-grpc-addr HOST:PORT] -bytes N` until ctx is cancelled: the plain floor,
// the floor behind the service's middleware, and the gRPC floor, each on
// its own listener, all in this one process.
func serveFloor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseFloorFlags(args, stderr)
	if err != nil {
		return err
	}
	s := &floorServers{stdout: stdout, stderr: stderr, served: make(chan error, 3)}
	defer s.close()
	if err := s.start(f); err != nil {
		return err
	}
	select {
	case err := <-s.served:
		return fmt.Errorf("floor: %w", err)
	case <-ctx.Done():
	}
	return s.shutdown(ctx)
}

// floorServers are the floor's running servers; served receives the
// error of any that stops serving.
type floorServers struct {
	stdout, stderr io.Writer
	served         chan error
	http           []*http.Server
	grpc           *grpc.Server
}

// start starts the floors that f asks for.
func (s *floorServers) start(f floorFlags) error {
	body := floorBody(f.size)
	if err := s.serveHTTP(f.addr, "HTTP", newFloorHandler(body)); err != nil {
		return err
	}
	if f.mwAddr != "" {
		h, err := newMiddlewareFloorHandler(body, s.stderr)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		if err := s.serveHTTP(f.mwAddr, "HTTP behind the service's middleware", h); err != nil {
			return err
		}
	}
	if f.grpcAddr != "" {
		return s.serveGRPC(f.grpcAddr, body)
	}
	return nil
}

func (s *floorServers) serveHTTP(addr, what string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("floor: listen: %w", err)
	}
	srv := floorServer(h, s.stderr)
	s.http = append(s.http, srv)
	go func() { s.served <- srv.Serve(ln) }()
	fmt.Fprintf(s.stdout, "floor: serving %s on http://%s\n", what, ln.Addr())
	return nil
}

func (s *floorServers) serveGRPC(addr string, body []byte) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("floor: listen: %w", err)
	}
	// The service's server options: its message bound (its default body
	// bound plus 64 KiB), send bound, concurrent streams, stream workers
	// and handshake timeout. Not its codec check and interceptors, which
	// are the per-call work the floor leaves out.
	srv := grpc.NewServer(grpcapi.ServerOptions(grpcapi.Options{MaxMessageBytes: 1<<20 + 64<<10})...)
	warmcachev1.RegisterCacheServer(srv, &grpcFloor{body: body})
	s.grpc = srv
	go func() { s.served <- srv.Serve(ln) }()
	fmt.Fprintf(s.stdout, "floor: serving gRPC on %s\n", ln.Addr())
	return nil
}

// shutdown drains the servers, for up to five seconds.
func (s *floorServers) shutdown(ctx context.Context) error {
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var errs []error
	for _, srv := range s.http {
		if err := srv.Shutdown(drainCtx); err != nil {
			errs = append(errs, err)
		}
	}
	s.http = nil
	if s.grpc != nil {
		s.grpc.GracefulStop()
		s.grpc = nil
	}
	return errors.Join(errs...)
}

// close stops the servers that are still running, at once.
func (s *floorServers) close() {
	if s.grpc != nil {
		s.grpc.Stop()
	}
	for _, srv := range s.http {
		_ = srv.Close()
	}
}
