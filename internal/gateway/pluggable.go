package gateway

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dapr/pluggable"
	"github.com/warmcache/warmcache/internal/endpoint"
)

// addPluggable builds the Dapr pluggable state store of the
// configuration's components and adds its endpoint to the table: a unix
// socket in daprd's components folder, which Serve creates if missing.
// None when the configuration names no component. The socket is plain
// gRPC, guarded by its file mode (see listenUnix): daprd sends no API key
// to a component.
func (g *Gateway) addPluggable(grpcOpts []grpc.ServerOption) error {
	if len(g.cfg.Dapr.Components) == 0 {
		return nil
	}
	components := make([]pluggable.Component, len(g.cfg.Dapr.Components))
	names := make([]string, len(g.cfg.Dapr.Components))
	for i, c := range g.cfg.Dapr.Components {
		components[i] = pluggable.Component{Name: c.Name, Namespace: c.Namespace}
		names[i] = c.Name + "=" + c.Namespace
	}
	store, err := pluggable.New(g.svc, components, pluggable.Options{MaxValueBytes: int(g.cfg.Dapr.MaxValueBytes)}, g.reg, g.log)
	if err != nil {
		return err
	}
	opts := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(store.MaxRecvBytes())}, grpcOpts...)
	g.table = append(g.table, listener{
		Endpoint: endpoint.Endpoint{Transport: endpoint.DaprComponent, Network: "unix", Addr: g.cfg.Dapr.SocketPath(),
			Name: "state." + g.cfg.Dapr.SocketName, Note: "components " + strings.Join(names, ", ")},
		prepare: func() error {
			if err := os.MkdirAll(g.cfg.Dapr.SocketFolder, 0o750); err != nil {
				return fmt.Errorf("dapr components folder: %w", err)
			}
			return nil
		},
		server: func(*tls.Config) server { return grpcServer{store.NewServer(opts...)} },
	})
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
