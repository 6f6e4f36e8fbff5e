package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/warmcache/warmcache/internal/auth"
)

// The YAML shape of a keys file. Unknown fields are refused.
type keysDoc struct {
	APIKeys []apiKeyDoc `yaml:"api_keys"`
}

type apiKeyDoc struct {
	ID         string   `yaml:"id"`
	SHA256     string   `yaml:"sha256"`
	Scopes     []string `yaml:"scopes"`
	Namespaces []string `yaml:"namespaces"`
	Rate       float64  `yaml:"rate"`
	Burst      int      `yaml:"burst"`
}

// LoadKeysFile reads and parses a keys file.
func LoadKeysFile(path string) ([]auth.Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: keys file: %w", err)
	}
	keys, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return keys, nil
}

// ParseKeys decodes a keys document:
//
//	api_keys:
//	  - id: orders-app            # named in logs, never secret
//	    sha256: 9f86d0...         # printf %s "$TOKEN" | sha256sum
//	    scopes: [read, write]
//	    namespaces: [widgets]     # or ["*"]
//	    rate: 100                 # requests per second; 0 or absent: no limit
//	    burst: 200                # absent: the rate, rounded up
//
// Every error names the key and the field. An empty list is allowed and
// means no keys.
func ParseKeys(b []byte) ([]auth.Key, error) {
	var doc keysDoc
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var keys []auth.Key
	var errs []error
	for i, d := range doc.APIKeys {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("api_keys[%d] %q: %s", i, d.ID, fmt.Sprintf(format, args...)))
		}
		k := auth.Key{ID: d.ID, Namespaces: d.Namespaces, Rate: d.Rate, Burst: d.Burst}
		h, err := auth.ParseHash(d.SHA256)
		if err != nil {
			bad("sha256: %v", err)
		}
		k.Hash = h
		for _, s := range d.Scopes {
			scope, err := auth.ParseScope(s)
			if err != nil {
				bad("scopes: %v", err)
			}
			k.Scopes |= scope
		}
		keys = append(keys, k)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// The keyring checks the rest (ids, duplicates, empty lists).
	if _, err := auth.NewKeyring(keys, auth.Options{}); err != nil {
		return nil, errors.Unwrap(err)
	}
	return keys, nil
}

// isLoopback reports whether a listen address binds to loopback only. An
// empty host (all interfaces) is not loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkOpenAccess refuses to serve without keys on a listener that other
// machines can reach.
func (c *Config) checkOpenAccess() error {
	if len(c.Access.Keys) > 0 {
		return nil
	}
	var errs []error
	for _, l := range []struct{ flag, addr string }{
		{"http-addr", c.HTTP.Addr}, {"grpc-addr", c.GRPC.Addr}, {"dapr-http-addr", c.Dapr.HTTPAddr}, {"dapr-grpc-addr", c.Dapr.GRPCAddr},
	} {
		if l.addr != "" && !isLoopback(l.addr) {
			errs = append(errs, fmt.Errorf("%s: %q is not a loopback address, and no API keys are configured: "+
				"without keys warmcache serves only on loopback (127.0.0.1, ::1) or a unix socket; "+
				"set --keys-file (WARMCACHE_KEYS_FILE) to serve on other addresses", l.flag, l.addr))
		}
	}
	return errors.Join(errs...)
}
