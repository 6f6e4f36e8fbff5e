package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

func TestDaprComponents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		want   []config.DaprComponent
		socket string
		err    string
	}{
		{name: "none", socket: "/tmp/dapr-components-sockets/warmcache.sock"},
		{name: "a component per namespace", args: []string{"--dapr-components", "statestore=widgets_state,cache"},
			want:   []config.DaprComponent{{Name: "statestore", Namespace: "widgets_state"}, {Name: "cache", Namespace: "cache"}},
			socket: "/tmp/dapr-components-sockets/warmcache.sock"},
		{name: "daprd's folder variable", env: map[string]string{"WARMCACHE_DAPR_COMPONENTS": "s=n", "DAPR_COMPONENTS_SOCKETS_FOLDER": "/run/dapr"},
			want: []config.DaprComponent{{Name: "s", Namespace: "n"}}, socket: "/run/dapr/warmcache.sock"},
		{name: "the injector's folder variable", env: map[string]string{"DAPR_COMPONENT_SOCKETS_FOLDER": "/var/sockets"},
			socket: "/var/sockets/warmcache.sock"},
		{name: "flags win", args: []string{"--dapr-socket-folder", "/x", "--dapr-socket-name", "cache"},
			env: map[string]string{"DAPR_COMPONENTS_SOCKETS_FOLDER": "/run/dapr"}, socket: "/x/cache.sock"},
		{name: "empty component name", args: []string{"--dapr-components", "=widgets"}, err: "want component=namespace"},
		{name: "a name twice", args: []string{"--dapr-components", "s=a,s=b"}, err: "named twice"},
		{name: "a socket name with a slash", args: []string{"--dapr-components", "s", "--dapr-socket-name", "a/b"}, err: "not a file name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(config.ServeCommand, tc.args, func(k string) string { return tc.env[k] }, &strings.Builder{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Load = %v; want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Dapr.Components, tc.want) || cfg.Dapr.SocketPath() != tc.socket {
				t.Fatalf("components %v at %s; want %v at %s", cfg.Dapr.Components, cfg.Dapr.SocketPath(), tc.want, tc.socket)
			}
		})
	}
}
