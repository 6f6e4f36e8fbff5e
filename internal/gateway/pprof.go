package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// pprofServer serves the net/http/pprof endpoints (/debug/pprof/...) on a
// listener of its own, so that profiling is never reachable through the
// public router. Config refuses a non-loopback address for it.
type pprofServer struct {
	addr   net.Addr
	srv    *http.Server
	served chan error
	log    *slog.Logger
}

// startPprof listens on addr and serves the profiling endpoints until
// close. It returns an error when addr cannot be listened on.
func startPprof(addr string, log *slog.Logger) (*pprofServer, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof: listen %s: %w", addr, err)
	}
	p := &pprofServer{
		addr: ln.Addr(),
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			// No WriteTimeout: a CPU profile or trace streams for as many
			// seconds as it was asked for.
			IdleTimeout: 2 * time.Minute,
			ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		served: make(chan error, 1),
		log:    log,
	}
	go func() { p.served <- p.srv.Serve(ln) }()
	log.Info("serving", "transport", "pprof", "addr", "http://"+ln.Addr().String()+"/debug/pprof/")
	return p, nil
}

// close stops the listener, giving a running profile a few seconds to end,
// and logs an unexpected server error.
func (p *pprofServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		_ = p.srv.Close()
	}
	if err := <-p.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		p.log.Warn("pprof server failed", "err", err)
	}
}
