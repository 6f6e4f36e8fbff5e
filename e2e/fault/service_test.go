package fault_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// serviceEnv is the configuration of a service under test, as the
// WARMCACHE_* environment variables that `warmcache serve` reads.
type serviceEnv map[string]string

// decorators wrap the real tiers of a service under test, to observe them or
// to hold a call open. A nil field leaves its tier as it is.
type decorators struct {
	hot  func(warmcache.Hot) warmcache.Hot
	warm func(warmcache.Warm) warmcache.Warm
}

// service is the gateway that `warmcache serve` builds from the same
// configuration, its REST handler served by an httptest.Server.
type service struct {
	cfg    config.Config
	url    string
	client *http.Client
	reg    *prometheus.Registry
	stop   func() // closes the server and the tiers' clients; safe to call twice
}

// startService builds and serves a service for env. Everything is closed
// when the test ends; the service's warnings are shown if the test fails.
func startService(t testing.TB, env serviceEnv, d decorators) *service {
	t.Helper()
	// Unless env sets it, freshness is off: these tests are about the
	// read and write paths, not about writes that bypass the service.
	cfg := harness.Config(t, env)
	logs := &testproc.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service log (last 8 KiB):\n%s", logs.TailBytes(8<<10))
		}
	})
	g := harness.Open(t, cfg, harness.Options{Logger: log, Hot: d.hot, Warm: d.warm,
		// The stampede tests count every scan of the service's life.
		SkipDoctor: true})
	var srv *httptest.Server
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if srv != nil {
				srv.Close()
			}
			_ = g.Close()
		})
	}
	t.Cleanup(stop)
	srv = httptest.NewServer(g.Handler())
	transport := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}
	t.Cleanup(transport.CloseIdleConnections)
	return &service{
		cfg:    cfg,
		url:    srv.URL,
		client: &http.Client{Transport: transport, Timeout: 5 * time.Second},
		reg:    g.Registry(),
		stop:   stop,
	}
}

// redisPrefix returns a Redis key prefix no other test uses.
func redisPrefix(t testing.TB) string {
	t.Helper()
	return "wc-fault-" + testenv.RandomSuffix(t) + ":"
}

// reply is the outcome of one request.
type reply struct {
	status int // zero when no answer came
	header http.Header
	body   []byte
	start  time.Time
	took   time.Duration
	err    error
}

// do sends one request and reads the whole answer. It never fails the test,
// so that it can run on any goroutine.
func (s *service) do(ctx context.Context, method, path string, body []byte) reply {
	r := reply{start: time.Now()}
	defer func() { r.took = time.Since(r.start) }()
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, bytes.NewReader(body))
	if err != nil {
		r.err = err
		r.took = time.Since(r.start)
		return r
	}
	res, err := s.client.Do(req)
	if err != nil {
		r.err = err
		r.took = time.Since(r.start)
		return r
	}
	defer res.Body.Close()
	r.body, r.err = io.ReadAll(res.Body)
	r.status, r.header = res.StatusCode, res.Header
	r.took = time.Since(r.start)
	return r
}

// etagVersion returns the version an ETag header carries.
func etagVersion(h http.Header) (int64, error) {
	return strconv.ParseInt(strings.Trim(h.Get("ETag"), `"`), 10, 64)
}

// migrateAndSeed creates the default namespaces' tables on the database at
// dsn, which must be a direct connection, and inserts widgets 1..n, each at
// a fresh version.
func migrateAndSeed(t testing.TB, dsn string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	_, tables := config.DefaultNamespaces()
	m, err := schema.OpenMigrator(ctx, conn, tables, nil)
	if err != nil {
		t.Fatalf("migrator: %v", err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO widgets (key, value, version)
		SELECT i, jsonb_build_object('widget', jsonb_build_object('id', i, 'color', 'teal')), nextval('warmcache_version_seq')
		FROM generate_series(1, $1::int) AS i`, n)
	if err != nil {
		t.Fatalf("seed widgets: %v", err)
	}
}

// connect opens a connection that the test uses to look at the warehouse
// itself; it is closed when the test ends.
func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// eventually polls cond every 10ms until it holds, and fails the test when it
// does not within limit. It returns how long it waited.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return testproc.Eventually(t, limit, what, cond)
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// widgetPath is the REST path of widget key.
func widgetPath(key string) string { return fmt.Sprintf("/v1/kv/widgets/%s", key) }
