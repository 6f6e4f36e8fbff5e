package config_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/config"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKeysFile(t *testing.T) {
	keys := writeFile(t, "keys.yaml", `
api_keys:
  - id: orders-app
    sha256: `+auth.HashToken("s3cret")+`
    scopes: [read, write]
    namespaces: [widgets]
    rate: 100
    burst: 200
  - id: reporting
    sha256: `+auth.HashToken("other")+`
    scopes: [read]
    namespaces: ["*"]
`)
	c, err := config.Load(config.ServeCommand, []string{"--keys-file", keys, "--http-addr", "0.0.0.0:8080"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Access.Keys) != 2 {
		t.Fatalf("APIKeys = %+v, want 2", c.Access.Keys)
	}
	k := c.Access.Keys[0]
	if k.ID != "orders-app" || k.Scopes != auth.ScopeRead|auth.ScopeWrite || k.Rate != 100 || k.Burst != 200 ||
		!k.Allows("widgets", auth.ScopeWrite) || k.Allows("orders", auth.ScopeRead) {
		t.Fatalf("key = %+v", k)
	}
	if !c.Access.Keys[1].Allows("anything", auth.ScopeRead) || c.Access.Keys[1].Allows("anything", auth.ScopeWrite) {
		t.Fatalf("reporting key = %+v, want read on every namespace", c.Access.Keys[1])
	}
}

func TestKeysFileErrorsNameTheField(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"bad hash", "api_keys: [{id: a, sha256: xyz, scopes: [read], namespaces: [w]}]", `api_keys[0] "a": sha256`},
		{"bad scope", "api_keys: [{id: a, sha256: " + auth.HashToken("t") + ", scopes: [admin], namespaces: [w]}]", "scopes"},
		{"no namespaces", "api_keys: [{id: a, sha256: " + auth.HashToken("t") + ", scopes: [read]}]", "namespaces"},
		{"unknown field", "api_keys: [{id: a, token: t}]", "token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.ParseKeys([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
}

func TestOpenAccessOnlyOnLoopback(t *testing.T) {
	cases := []struct {
		name string
		args []string
		ok   bool
	}{
		{"defaults", nil, true},
		{"ipv6 loopback", []string{"--http-addr", "[::1]:8080"}, true},
		{"localhost", []string{"--grpc-addr", "localhost:9090"}, true},
		{"all interfaces", []string{"--http-addr", ":8080"}, false},
		{"pod address", []string{"--grpc-addr", "10.0.0.5:9090"}, false},
		{"no grpc listener", []string{"--grpc-addr", ""}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Load(config.ServeCommand, c.args, env(nil), io.Discard)
			if c.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "keys-file") {
				t.Fatalf("err = %v, want it to say how to configure keys", err)
			}
		})
	}
}

func TestTLSNeedsBothFiles(t *testing.T) {
	_, err := config.Load(config.ServeCommand, []string{"--tls-cert", "cert.pem"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "tls-key") {
		t.Fatalf("err = %v, want one naming tls-key", err)
	}
}
