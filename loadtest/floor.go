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

// serveFloor runs `loadtest floor -addr HOST:PORT [-mw-addr HOST:PORT]
// [-grpc-addr HOST:PORT] -bytes N` until ctx is cancelled: the plain floor,
// the floor behind the service's middleware, and the gRPC floor, each on
// its own listener, all in this one process.
func serveFloor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address of the plain floor (loopback)")
	mwAddr := fs.String("mw-addr", "", "listen address of the floor behind the service's middleware (loopback; empty: none)")
	grpcAddr := fs.String("grpc-addr", "", "listen address of the gRPC floor (loopback; empty: none)")
	size := fs.Int("bytes", 460, "body size")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, a := range []string{*addr, *mwAddr, *grpcAddr} {
		if a == "" {
			continue
		}
		if err := requireLoopback(a); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
	}
	body := floorBody(*size)
	served := make(chan error, 3)
	var servers []*http.Server
	var grpcSrv *grpc.Server
	defer func() {
		if grpcSrv != nil {
			grpcSrv.Stop()
		}
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	serveHTTP := func(a, what string, h http.Handler) error {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("floor: listen: %w", err)
		}
		srv := floorServer(h, stderr)
		servers = append(servers, srv)
		go func() { served <- srv.Serve(ln) }()
		fmt.Fprintf(stdout, "floor: serving %s on http://%s\n", what, ln.Addr())
		return nil
	}
	if err := serveHTTP(*addr, "HTTP", newFloorHandler(body)); err != nil {
		return err
	}
	if *mwAddr != "" {
		h, err := newMiddlewareFloorHandler(body, stderr)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		if err := serveHTTP(*mwAddr, "HTTP behind the service's middleware", h); err != nil {
			return err
		}
	}
	if *grpcAddr != "" {
		ln, err := net.Listen("tcp", *grpcAddr)
		if err != nil {
			return fmt.Errorf("floor: listen: %w", err)
		}
		// The service's message bound (its body bound plus 64 KiB) and
		// its stream workers.
		grpcSrv = grpc.NewServer(grpc.MaxRecvMsgSize(1<<20+64<<10), grpc.NumStreamWorkers(grpcapi.DefaultStreamWorkers))
		warmcachev1.RegisterCacheServer(grpcSrv, &grpcFloor{body: body})
		go func() { served <- grpcSrv.Serve(ln) }()
		fmt.Fprintf(stdout, "floor: serving gRPC on %s\n", ln.Addr())
	}
	select {
	case err := <-served:
		return fmt.Errorf("floor: %w", err)
	case <-ctx.Done():
	}
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var errs []error
	for _, s := range servers {
		if err := s.Shutdown(drainCtx); err != nil {
			errs = append(errs, err)
		}
	}
	servers = nil
	if grpcSrv != nil {
		grpcSrv.GracefulStop()
		grpcSrv = nil
	}
	return errors.Join(errs...)
}
