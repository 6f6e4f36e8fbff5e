package config_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/config"
)

func TestNearCacheBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     string
		args    []string
		want    int64
		wantErr string
	}{
		{"off by default", "", nil, 0, ""},
		{"env", "67108864", nil, 64 << 20, ""},
		{"env zero", "0", nil, 0, ""},
		{"flag wins", "67108864", []string{"-near-cache-bytes", "1024"}, 1024, ""},
		{"env negative", "-1", nil, 0, "WARMCACHE_NEAR_CACHE_BYTES"},
		{"env not a number", "64MiB", nil, 0, "WARMCACHE_NEAR_CACHE_BYTES"},
		{"flag negative", "", []string{"-near-cache-bytes", "-5"}, 0, "near-cache-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(config.ServeCommand, tc.args, env(map[string]string{"WARMCACHE_NEAR_CACHE_BYTES": tc.env}), io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load: err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if cfg.Near.Bytes != tc.want {
				t.Errorf("NearCacheBytes = %d, want %d", cfg.Near.Bytes, tc.want)
			}
		})
	}
}

func TestNearCacheTracking(t *testing.T) {
	checkStringSetting(t, "near-cache-tracking", "WARMCACHE_NEAR_CACHE_TRACKING", func(c config.Config) string { return c.Near.Tracking }, []stringSettingCase{
		{"bcast by default", "", nil, "bcast", false},
		{"env", "off", nil, "off", false},
		{"flag wins", "off", []string{"-near-cache-tracking", "bcast"}, "bcast", false},
		{"unknown mode", "", []string{"-near-cache-tracking", "default"}, "", true},
	})
}

func TestNamespaceNearTTL(t *testing.T) {
	for _, tc := range []struct {
		name    string
		value   string // near_ttl in YAML; empty leaves the field out
		want    time.Duration
		wantErr bool
	}{
		{"off when absent", "", 0, false},
		{"zero is off", "0", 0, false},
		{"zero with a unit is off", "0s", 0, false},
		{"duration", "250ms", 250 * time.Millisecond, false},
		{"negative", "-1s", 0, true},
		{"not a duration", "soon", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{namespaces: [{name: w}]}`
			if tc.value != "" {
				doc = `{namespaces: [{name: w, near_ttl: "` + tc.value + `"}]}`
			}
			nss, _, err := config.ParseNamespaces([]byte(doc))
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), `namespaces[0] "w": near_ttl`) {
					t.Fatalf("err = %v, want one naming near_ttl", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseNamespaces: %v", err)
			}
			if nss[0].NearTTL != tc.want {
				t.Errorf("NearTTL = %v, want %v", nss[0].NearTTL, tc.want)
			}
		})
	}
}

func TestDefaultNamespacesNearTTL(t *testing.T) {
	want := map[string]time.Duration{"widgets": time.Second, "widgets_archive": 0}
	nss, _ := config.DefaultNamespaces()
	for _, ns := range nss {
		if d, ok := want[ns.Name]; ok && ns.NearTTL != d {
			t.Errorf("%s: NearTTL = %v, want %v", ns.Name, ns.NearTTL, d)
		}
	}
}
