package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

// floorBody returns a JSON document of exactly n bytes (n >= 34).
func floorBody(n int) []byte {
	const head, tail = `{"widget":{"id":"floor","pad":"`, `"}}`
	pad := max(n-len(head)-len(tail), 0)
	return []byte(head + strings.Repeat("x", pad) + tail)
}

// newFloorHandler is the floor: the service's router (chi) with its GET
// route shape and answer headers, answering a constant body without
// touching any tier.
func newFloorHandler(body []byte) http.Handler {
	length := strconv.Itoa(len(body))
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	r.Route("/v1/kv/{namespace}", func(r chi.Router) {
		r.Get("/{key}", func(w http.ResponseWriter, r *http.Request) {
			_ = chi.URLParam(r, "namespace")
			_ = chi.URLParam(r, "key")
			h := w.Header()
			h.Set("X-Cache", "floor")
			h.Set("ETag", `"1"`)
			h.Set("Content-Type", "application/json")
			h.Set("Content-Length", length)
			_, _ = w.Write(body)
		})
	})
	return r
}

// serveFloor runs `loadtest floor -addr HOST:PORT -bytes N` until ctx is
// cancelled, with the service's http.Server settings.
func serveFloor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback)")
	size := fs.Int("bytes", 460, "body size")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := requireLoopback(*addr); err != nil {
		return fmt.Errorf("floor: -addr: %w", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("floor: listen: %w", err)
	}
	srv := &http.Server{
		Handler:           newFloorHandler(floorBody(*size)),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(stderr, "floor: ", 0),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "floor: serving HTTP on http://%s\n", ln.Addr())
	select {
	case err := <-served:
		return fmt.Errorf("floor: %w", err)
	case <-ctx.Done():
	}
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	shutdownErr := srv.Shutdown(drainCtx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("floor: %w", err)
	}
	return shutdownErr
}
