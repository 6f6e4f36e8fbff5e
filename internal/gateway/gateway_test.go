package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/endpoint"
	"github.com/warmcache/warmcache/internal/gateway"
	"github.com/warmcache/warmcache/internal/testenv"
)

// testConfig is the configuration of a gateway over a fresh, migrated
// database and a Redis prefix of its own, listening on free ports.
func testConfig(t *testing.T) config.Config {
	t.Helper()
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN": testenv.NewDatabase(t),
		"WARMCACHE_REDIS_ADDRS":  testenv.RedisAddr(t),
		"WARMCACHE_REDIS_PREFIX": "gw-" + testenv.RandomSuffix(t) + ":",
		"WARMCACHE_HTTP_ADDR":    "127.0.0.1:0",
		"WARMCACHE_GRPC_ADDR":    "127.0.0.1:0",
		"WARMCACHE_HOT_TIMEOUT":  "1s",
		// Change capture would leave a replication slot in the database.
		"WARMCACHE_FRESHNESS": "off",
	}
	cfg, err := config.Load(config.ServeCommand, nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := gateway.OpenMigrator(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	defer m.Close(ctx)
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	return cfg
}

// A Server serves what a Command writes, on the listener it announces, and
// Serve returns nil once its context ends.
func TestServerServesWhatACommandWrote(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()

	cmd, err := gateway.Open(ctx, cfg, gateway.Options{Role: gateway.Command})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Handler() != nil {
		t.Error("a Command has a REST handler")
	}
	if err := cmd.Serve(ctx); err == nil {
		t.Error("a Command served")
	}
	if _, err := cmd.Service().Put(ctx, "widgets", "7", []byte(`{"widget":{"id":"7"}}`), nil); err != nil {
		t.Fatalf("put through the Command: %v", err)
	}
	if err := cmd.Close(); err != nil {
		t.Fatalf("close the Command: %v", err)
	}

	var stdout strings.Builder
	g, err := gateway.Open(ctx, cfg, gateway.Options{Stdout: &stdout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	if g.Endpoints() != nil {
		t.Errorf("endpoints %v before Serve", g.Endpoints())
	}
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- g.Serve(serveCtx) }()
	select {
	case <-g.Listening():
	case err := <-served:
		t.Fatalf("Serve returned %v before listening", err)
	}
	// REST and gRPC on TCP, as configured, each printed as its line, and
	// then the notice of open access.
	eps := g.Endpoints()
	if len(eps) != 2 || eps[0].Transport != endpoint.REST || eps[1].Transport != endpoint.GRPC {
		t.Fatalf("endpoints %+v; want REST and gRPC", eps)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 || lines[0] != eps[0].Line() || lines[1] != eps[1].Line() || !strings.Contains(lines[2], "no API keys") {
		t.Fatalf("printed %q; want the endpoints' lines and the notice", lines)
	}
	url := eps[0].URL()
	if !strings.HasPrefix(url, "http://127.0.0.1:") || strings.HasSuffix(url, ":0") {
		t.Fatalf("REST endpoint %q; want the port the system chose", url)
	}
	res, err := http.Get(url + "/v1/kv/widgets/7")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"7"`) {
		t.Errorf("GET widgets/7 = %d %s; want 200 with the value the Command wrote", res.StatusCode, body)
	}

	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve returned %v after its context ended", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30s of its context ending")
	}
}
