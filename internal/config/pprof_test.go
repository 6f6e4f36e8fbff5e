package config_test

import (
	"io"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

func TestPprofAddr(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     string
		args    []string
		want    string
		wantErr bool
	}{
		{"off by default", "", nil, "", false},
		{"env", "127.0.0.1:6060", nil, "127.0.0.1:6060", false},
		{"flag wins", "127.0.0.1:6060", []string{"-pprof", "localhost:7070"}, "localhost:7070", false},
		{"not loopback", "0.0.0.0:6060", nil, "", true},
		{"no port", "127.0.0.1", nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "WARMCACHE_PPROF_ADDR" {
					return tc.env
				}
				return ""
			}
			cfg, err := config.Load(config.ServeCommand, tc.args, getenv, io.Discard)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Load: err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && cfg.Server.PprofAddr != tc.want {
				t.Errorf("PprofAddr = %q, want %q", cfg.Server.PprofAddr, tc.want)
			}
		})
	}
}
