package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/endpoint"
)

// listener is one entry of the gateway's table of endpoints, which
// buildTransports fills: where to listen, and the server to run there.
type listener struct {
	// Endpoint is the address to listen on, as configured.
	endpoint.Endpoint
	// prepare, when set, runs before listening, such as making the folder
	// of a socket.
	prepare func() error
	// server returns the endpoint's server: with tlsConf, which is set when
	// the endpoint serves TLS.
	server func(tlsConf *tls.Config) server
}

// server is what runs on a listener: an HTTP or a gRPC server.
type server interface {
	serve(net.Listener) error
	// drain stops intake and waits for what is in flight until ctx is
	// done; then it stops what is left at once.
	drain(ctx context.Context) error
	// stop stops at once.
	stop()
}

// listeners serves the endpoints of the table, every one on its own
// listener, and stops them all together.
type listeners struct {
	servers   []server
	endpoints []endpoint.Endpoint
	served    chan error
	count     int
}

// startListeners listens on every endpoint of table, in order, and serves
// it. For each it prints the endpoint's Line on stdout and logs it. TCP
// endpoints that serve TLS get tlsConf; unix sockets are always plain: the
// socket's file permissions guard them. On error, whatever was started is
// stopped.
func startListeners(table []listener, tlsConf *tls.Config, log *slog.Logger, stdout io.Writer) (*listeners, error) {
	l := &listeners{served: make(chan error, len(table))}
	for _, entry := range table {
		e, err := l.start(entry, tlsConf)
		if err != nil {
			l.stopNow()
			return nil, err
		}
		fmt.Fprintln(stdout, e.Line())
		attrs := []any{"transport", string(e.Transport), "addr", e.URL(), "tls", e.TLS}
		if e.Name != "" {
			attrs = append(attrs, "name", e.Name)
		}
		if e.Note != "" {
			attrs = append(attrs, "note", e.Note)
		}
		log.Info("serving", attrs...)
	}
	return l, nil
}

// start listens on entry's address and serves it there. It returns the
// endpoint with the address listened on.
func (l *listeners) start(entry listener, tlsConf *tls.Config) (endpoint.Endpoint, error) {
	e := entry.Endpoint
	if entry.prepare != nil {
		if err := entry.prepare(); err != nil {
			return e, err
		}
	}
	var ln net.Listener
	var err error
	if e.Network == "unix" {
		if ln, err = listenUnix(e.Addr); err != nil {
			return e, err
		}
	} else {
		if ln, err = net.Listen("tcp", e.Addr); err != nil {
			return e, fmt.Errorf("listen %s: %w", e.Addr, err)
		}
		e.Addr = ln.Addr().String()
	}
	if !e.TLS {
		tlsConf = nil
	}
	srv := entry.server(tlsConf)
	l.servers = append(l.servers, srv)
	l.endpoints = append(l.endpoints, e)
	l.serve(string(e.Transport), func() error { return srv.serve(ln) })
	return e, nil
}

// loadTLS returns the TLS configuration of cfg's certificate, or nil when
// cfg has none.
func loadTLS(cfg config.Config) (*tls.Config, error) {
	if cfg.TLS.Cert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLS.Cert, cfg.TLS.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// httpServer is an HTTP transport's server, with the bounds of every
// HTTP listener.
type httpServer struct{ *http.Server }

// newHTTPServer returns the server of handler, serving TLS with tlsConf
// when it is set.
func newHTTPServer(handler http.Handler, tlsConf *tls.Config, log *slog.Logger) httpServer {
	s := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if tlsConf != nil {
		s.TLSConfig = tlsConf.Clone()
	}
	return httpServer{s}
}

func (s httpServer) serve(ln net.Listener) error {
	if s.TLSConfig != nil {
		return s.ServeTLS(ln, "", "")
	}
	return s.Serve(ln)
}

func (s httpServer) drain(ctx context.Context) error {
	if err := s.Shutdown(ctx); err != nil {
		_ = s.Close()
		return err
	}
	return nil
}

func (s httpServer) stop() { _ = s.Close() }

// grpcServer is a gRPC transport's server.
type grpcServer struct{ *grpc.Server }

// grpcOptions returns opts, with tlsConf's credentials when it is set.
func grpcOptions(opts []grpc.ServerOption, tlsConf *tls.Config) []grpc.ServerOption {
	if tlsConf == nil {
		return opts
	}
	return append(opts[:len(opts):len(opts)], grpc.Creds(credentials.NewTLS(tlsConf.Clone())))
}

func (s grpcServer) serve(ln net.Listener) error { return s.Serve(ln) }

func (s grpcServer) drain(ctx context.Context) error {
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.Stop()
		<-stopped
	}
	return nil
}

func (s grpcServer) stop() { s.Stop() }

// listenUnix listens on a unix socket at path, replacing a socket file that
// an earlier process left behind (never another kind of file). The socket
// is readable and writable by its owner and group, so that an application
// container sharing the group can connect, and by nobody else at any
// moment: it is created in a fresh directory of mode 0700 beside path,
// given mode 0660 there, and only then linked into place (never over an
// existing file). The listener removes path when it closes.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen unix:%s: remove stale socket: %w", path, err)
		}
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".warmcache-socket-")
	if err != nil {
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	// A link, not a rename: it fails rather than replace a file that
	// appeared at path meanwhile.
	if err := os.Link(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	return &unixListener{UnixListener: ln, path: path}, nil
}

// unixListener removes its socket file when it closes.
type unixListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { _ = os.Remove(l.path) })
	return err
}

func (l *listeners) serve(name string, fn func() error) {
	l.count++
	go func() {
		err := fn()
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("%s server: %w", name, err)
		}
		l.served <- err
	}()
}

// wait returns when ctx is done (nil) or a listener fails (its error).
func (l *listeners) wait(ctx context.Context) error {
	select {
	case err := <-l.served:
		l.count--
		if err == nil {
			err = errors.New("a server stopped unexpectedly")
		}
		return err
	case <-ctx.Done():
		return nil
	}
}

// shutdown stops intake on every listener and drains in-flight requests and
// calls until ctx is done; then it stops what is left at once. It returns
// only after every server has returned.
func (l *listeners) shutdown(ctx context.Context) error {
	drained := make([]error, len(l.servers))
	var wg sync.WaitGroup
	for i, srv := range l.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.drain(ctx); err != nil {
				drained[i] = fmt.Errorf("drain %s on %s: %w", l.endpoints[i].Transport.Title(), l.endpoints[i].URL(), err)
			}
		}()
	}
	wg.Wait()
	var errs []error
	for ; l.count > 0; l.count-- {
		if err := <-l.served; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, drained...)...)
}

// stopNow closes everything without draining, after a failed start.
func (l *listeners) stopNow() {
	for _, srv := range l.servers {
		srv.stop()
	}
	for ; l.count > 0; l.count-- {
		<-l.served
	}
}
