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
	"github.com/warmcache/warmcache/internal/grpcapi"
)

// listeners serves REST and gRPC on every configured listener: TCP (with
// TLS when configured) and unix sockets (always plain: the socket's file
// permissions guard it). It stops them all together.
type listeners struct {
	log    *slog.Logger
	http   *http.Server
	extra  []*http.Server // the Dapr API's HTTP listener
	grpc   []*grpc.Server
	served chan error
	count  int
}

// startListeners opens every listener of cfg and starts serving. It prints
// one "warmcache: serving ..." line per listener on stdout, the TCP REST
// listener first. On error, whatever was started is stopped.
// dapr is the Dapr state API, served on listeners of its own when cfg names
// them.
// grpcOpts are added to every gRPC server, such as tracing's.
func startListeners(cfg config.Config, handler http.Handler, api *grpcapi.API, dapr daprServers, grpcOpts []grpc.ServerOption, log *slog.Logger, stdout io.Writer) (_ *listeners, err error) {
	l := &listeners{
		log: log,
		http: &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		served: make(chan error, 6),
	}
	defer func() {
		if err != nil {
			l.stopNow()
		}
	}()
	tlsConf, err := loadTLS(cfg)
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		l.http.TLSConfig = tlsConf.Clone()
	}
	if err := l.startREST(cfg, tlsConf, stdout); err != nil {
		return nil, err
	}
	if err := l.startGRPC(cfg, api, grpcOpts, tlsConf, stdout); err != nil {
		return nil, err
	}
	if err := l.startDapr(cfg, dapr, grpcOpts, tlsConf, log, stdout); err != nil {
		return nil, err
	}
	return l, nil
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

// startREST serves the REST API on cfg's TCP address, with TLS when
// tlsConf is set, and on its unix socket when cfg names one.
func (l *listeners) startREST(cfg config.Config, tlsConf *tls.Config, stdout io.Writer) error {
	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTP.Addr, err)
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
		l.serve("http", func() error { return l.http.ServeTLS(ln, "", "") })
	} else {
		l.serve("http", func() error { return l.http.Serve(ln) })
	}
	fmt.Fprintf(stdout, "warmcache: serving HTTP on %s://%s\n", scheme, ln.Addr())
	l.log.Info("serving", "transport", "http", "addr", scheme+"://"+ln.Addr().String())

	if cfg.HTTP.Socket != "" {
		uln, err := listenUnix(cfg.HTTP.Socket)
		if err != nil {
			return err
		}
		l.serve("http", func() error { return l.http.Serve(uln) })
		fmt.Fprintf(stdout, "warmcache: serving HTTP on unix:%s\n", cfg.HTTP.Socket)
		l.log.Info("serving", "transport", "http", "addr", "unix:"+cfg.HTTP.Socket)
	}
	return nil
}

// startGRPC serves the gRPC API on cfg's TCP address, with TLS when
// tlsConf is set, and on its unix socket, when cfg names them.
func (l *listeners) startGRPC(cfg config.Config, api *grpcapi.API, grpcOpts []grpc.ServerOption, tlsConf *tls.Config, stdout io.Writer) error {
	if cfg.GRPC.Addr != "" {
		opts := grpcOpts
		if tlsConf != nil {
			opts = append(opts[:len(opts):len(opts)], grpc.Creds(credentials.NewTLS(tlsConf.Clone())))
		}
		gln, err := net.Listen("tcp", cfg.GRPC.Addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", cfg.GRPC.Addr, err)
		}
		gs := api.NewServer(opts...)
		l.grpc = append(l.grpc, gs)
		l.serve("grpc", func() error { return gs.Serve(gln) })
		suffix := ""
		if tlsConf != nil {
			suffix = " (TLS)"
		}
		fmt.Fprintf(stdout, "warmcache: serving gRPC on %s%s\n", gln.Addr(), suffix)
		l.log.Info("serving", "transport", "grpc", "addr", gln.Addr().String(), "tls", tlsConf != nil)
	}
	if cfg.GRPC.Socket != "" {
		uln, err := listenUnix(cfg.GRPC.Socket)
		if err != nil {
			return err
		}
		gs := api.NewServer(grpcOpts...)
		l.grpc = append(l.grpc, gs)
		l.serve("grpc", func() error { return gs.Serve(uln) })
		fmt.Fprintf(stdout, "warmcache: serving gRPC on unix:%s\n", cfg.GRPC.Socket)
		l.log.Info("serving", "transport", "grpc", "addr", "unix:"+cfg.GRPC.Socket)
	}
	return nil
}

// daprServers are the two forms of the Dapr state API.
type daprServers struct {
	http http.Handler
	grpc func(...grpc.ServerOption) *grpc.Server
}

// startDapr serves the Dapr state API on cfg's Dapr listeners, with TLS
// when tlsConf is set.
func (l *listeners) startDapr(cfg config.Config, dapr daprServers, grpcOpts []grpc.ServerOption, tlsConf *tls.Config, log *slog.Logger, stdout io.Writer) error {
	if cfg.Dapr.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.Dapr.HTTPAddr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", cfg.Dapr.HTTPAddr, err)
		}
		hs := &http.Server{
			Handler:           dapr.http,
			ReadHeaderTimeout: l.http.ReadHeaderTimeout,
			ReadTimeout:       l.http.ReadTimeout,
			WriteTimeout:      l.http.WriteTimeout,
			IdleTimeout:       l.http.IdleTimeout,
			MaxHeaderBytes:    l.http.MaxHeaderBytes,
			ErrorLog:          l.http.ErrorLog,
		}
		l.extra = append(l.extra, hs)
		scheme := "http"
		if tlsConf != nil {
			scheme = "https"
			hs.TLSConfig = tlsConf.Clone()
			l.serve("dapr http", func() error { return hs.ServeTLS(ln, "", "") })
		} else {
			l.serve("dapr http", func() error { return hs.Serve(ln) })
		}
		fmt.Fprintf(stdout, "warmcache: serving the Dapr state API over HTTP on %s://%s\n", scheme, ln.Addr())
		log.Info("serving", "transport", "dapr-http", "addr", scheme+"://"+ln.Addr().String())
	}
	if cfg.Dapr.GRPCAddr != "" {
		opts := grpcOpts
		if tlsConf != nil {
			opts = append(opts[:len(opts):len(opts)], grpc.Creds(credentials.NewTLS(tlsConf.Clone())))
		}
		ln, err := net.Listen("tcp", cfg.Dapr.GRPCAddr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", cfg.Dapr.GRPCAddr, err)
		}
		gs := dapr.grpc(opts...)
		l.grpc = append(l.grpc, gs)
		l.serve("dapr grpc", func() error { return gs.Serve(ln) })
		fmt.Fprintf(stdout, "warmcache: serving the Dapr state API over gRPC on %s\n", ln.Addr())
		log.Info("serving", "transport", "dapr-grpc", "addr", ln.Addr().String(), "tls", tlsConf != nil)
	}
	return nil
}

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
	var wg sync.WaitGroup
	for _, gs := range l.grpc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stopped := make(chan struct{})
			go func() { gs.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-ctx.Done():
				gs.Stop()
				<-stopped
			}
		}()
	}
	for _, hs := range l.extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Shutdown(ctx); err != nil {
				_ = hs.Close()
			}
		}()
	}
	drainErr := l.http.Shutdown(ctx)
	if drainErr != nil {
		_ = l.http.Close()
	}
	wg.Wait()
	var errs []error
	for ; l.count > 0; l.count-- {
		if err := <-l.served; err != nil {
			errs = append(errs, err)
		}
	}
	if drainErr != nil {
		errs = append(errs, fmt.Errorf("drain: %w", drainErr))
	}
	return errors.Join(errs...)
}

// stopNow closes everything without draining, after a failed start.
func (l *listeners) stopNow() {
	for _, gs := range l.grpc {
		gs.Stop()
	}
	for _, hs := range l.extra {
		_ = hs.Close()
	}
	_ = l.http.Close()
	for ; l.count > 0; l.count-- {
		<-l.served
	}
}
