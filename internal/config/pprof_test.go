package config_test

import (
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

func TestPprofAddr(t *testing.T) {
	checkStringSetting(t, "pprof", "WARMCACHE_PPROF_ADDR", func(c config.Config) string { return c.Server.PprofAddr }, []stringSettingCase{
		{"off by default", "", nil, "", false},
		{"env", "127.0.0.1:6060", nil, "127.0.0.1:6060", false},
		{"flag wins", "127.0.0.1:6060", []string{"-pprof", "localhost:7070"}, "localhost:7070", false},
		{"not loopback", "0.0.0.0:6060", nil, "", true},
		{"no port", "127.0.0.1", nil, "", true},
	})
}
