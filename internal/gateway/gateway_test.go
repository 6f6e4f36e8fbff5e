package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/config"
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

	pr, pw := io.Pipe()
	g, err := gateway.Open(ctx, cfg, gateway.Options{Stdout: pw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- g.Serve(serveCtx)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no listener announced: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "warmcache: serving HTTP on ")
	if !ok {
		t.Fatalf("first line %q does not announce the REST listener", line)
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
