package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"google.golang.org/grpc"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dapr/pluggable"
)

// buildPluggable builds the Dapr pluggable state store of the
// configuration's components; none when it names none.
func (g *Gateway) buildPluggable() error {
	if len(g.cfg.Dapr.Components) == 0 {
		return nil
	}
	components := make([]pluggable.Component, len(g.cfg.Dapr.Components))
	for i, c := range g.cfg.Dapr.Components {
		components[i] = pluggable.Component{Name: c.Name, Namespace: c.Namespace}
	}
	store, err := pluggable.New(g.svc, components, pluggable.Options{MaxValueBytes: int(g.cfg.Dapr.MaxValueBytes)}, g.reg, g.log)
	if err != nil {
		return err
	}
	g.pluggable = store
	return nil
}

// maxValueBytes is the core's bound on a stored value: a request body's
// (--max-body-bytes), or, when the pluggable component is served and its
// bound (--dapr-max-value-bytes) is larger, the component's, which checks
// its own values against it.
func maxValueBytes(cfg config.Config) int {
	if len(cfg.Dapr.Components) == 0 {
		return int(cfg.Limits.MaxBodyBytes)
	}
	return int(max(cfg.Limits.MaxBodyBytes, cfg.Dapr.MaxValueBytes))
}

// startPluggable serves the pluggable state store, when there is one, on
// its socket in daprd's components folder, which it creates if missing.
// The socket is plain gRPC, guarded by its file mode (see listenUnix):
// daprd sends no API key to a component.
func (l *listeners) startPluggable(cfg config.Config, store *pluggable.Store, grpcOpts []grpc.ServerOption, log *slog.Logger, stdout io.Writer) error {
	if store == nil {
		return nil
	}
	if err := os.MkdirAll(cfg.Dapr.SocketFolder, 0o750); err != nil {
		return fmt.Errorf("dapr components folder: %w", err)
	}
	path := cfg.Dapr.SocketPath()
	ln, err := listenUnix(path)
	if err != nil {
		return err
	}
	opts := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(store.MaxRecvBytes())}, grpcOpts...)
	gs := store.NewServer(opts...)
	l.grpc = append(l.grpc, gs)
	l.serve("dapr component", func() error { return gs.Serve(ln) })
	names := make([]string, len(cfg.Dapr.Components))
	for i, c := range cfg.Dapr.Components {
		names[i] = c.Name + "=" + c.Namespace
	}
	fmt.Fprintf(stdout, "warmcache: serving the Dapr pluggable state store state.%s on unix:%s (components %s)\n",
		cfg.Dapr.SocketName, path, strings.Join(names, ", "))
	log.Info("serving", "transport", "dapr-component", "addr", "unix:"+path, "components", names)
	return nil
}
