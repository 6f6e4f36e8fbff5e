package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/testenv"
)

// warmcacheBin is the warmcache binary that TestMain builds, for the
// subcommands other than serve.
var warmcacheBin string

func TestMain(m *testing.M) { harness.Main(m, "service", &warmcacheBin) }

// startServer runs `warmcache serve` in-process on a free port with env
// (harness.Serve) and returns its base URL. The server is shut down, and
// must return nil, when the test ends.
func startServer(t *testing.T, env map[string]string) string {
	t.Helper()
	// Tests assert that a read's fill reaches Redis, so the fill must not
	// miss a 50ms deadline on a machine busy with the rest of the suite.
	if env["WARMCACHE_HOT_TIMEOUT"] == "" {
		withTimeout := map[string]string{"WARMCACHE_HOT_TIMEOUT": "1s"}
		for k, v := range env {
			withTimeout[k] = v
		}
		env = withTimeout
	}
	s := harness.Serve(t, env, 1)
	if s.HTTP == "" {
		t.Fatalf("unexpected first line %q", s.Lines)
	}
	return s.HTTP
}

// run runs the warmcache binary with args and the environment env
// (harness.Run): WARMCACHE_FRESHNESS is off unless env sets it.
func run(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	return harness.Run(ctx, warmcacheBin, args, env, stdout, stderr)
}

// migrateAndSeed applies the migrations to dsn and inserts widgets 1..n.
func migrateAndSeed(t *testing.T, dsn string, n int) {
	t.Helper()
	harness.MigrateAndSeed(t, warmcacheBin, dsn, n)
}

type response struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, method, url, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res.StatusCode, res.Header, string(b)}
}

// errorCode checks the JSON error shape and returns its code.
func errorCode(t *testing.T, r response) string {
	t.Helper()
	var doc struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &doc); err != nil || doc.Error.Code == "" || doc.Error.Message == "" {
		t.Fatalf("status %d body %q is not the JSON error shape", r.status, r.body)
	}
	return doc.Error.Code
}

func TestEndToEnd(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	paths := []struct {
		name   string
		dsn    func(t *testing.T, direct string) string
		pooler string
	}{
		{"direct", func(_ *testing.T, direct string) string { return direct }, "none"},
		{"pgbouncer", func(t *testing.T, direct string) string {
			return testenv.PgBouncerDSN(t, testenv.DatabaseName(t, direct))
		}, "pgbouncer"},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			dsn := testenv.NewDatabase(t)
			migrateAndSeed(t, dsn, 100)
			base := startServer(t, map[string]string{
				"WARMCACHE_POSTGRES_DSN": p.dsn(t, dsn),
				"WARMCACHE_PG_POOLER":    p.pooler,
				"WARMCACHE_REDIS_ADDRS":  redisAddr,
				"WARMCACHE_REDIS_PREFIX": "e2e-" + testenv.RandomSuffix(t) + ":",
				// The test counts the SQL queries that requests cause; the
				// consistency monitor's audits read the warehouse too.
				"WARMCACHE_CONSISTENCY_SAMPLES": "0",
			})
			checkREST(t, base, "widgets")
			// checkREST deletes under If-Match; a DELETE without one
			// removes the key as well.
			if r := call(t, "DELETE", base+"/v1/kv/widgets/9", ""); r.status != 204 {
				t.Fatalf("DELETE = %d %s, want 204", r.status, r.body)
			}
			if r := call(t, "GET", base+"/v1/kv/widgets/9", ""); r.status != 404 || errorCode(t, r) != "not_found" {
				t.Fatalf("GET after DELETE = %d %s, want 404 not_found", r.status, r.body)
			}

			bad := []struct {
				name, method, path, body string
				status                   int
				code                     string
			}{
				{"unknown namespace", "GET", "/v1/kv/nope/1", "", 404, "unknown_namespace"},
				{"non-numeric key", "GET", "/v1/kv/widgets/abc", "", 400, "invalid_key"},
				{"key out of range", "GET", "/v1/kv/widgets/99999999999999999999", "", 400, "invalid_key"},
				{"invalid JSON body", "PUT", "/v1/kv/widgets/7", `{"a":`, 400, "invalid_value"},
				{"empty body", "PUT", "/v1/kv/widgets/7", ``, 400, "invalid_value"},
				{"oversize body", "PUT", "/v1/kv/widgets/7", `"` + strings.Repeat("x", 2<<20) + `"`, 413, "too_large"},
				{"method not allowed", "PATCH", "/v1/kv/widgets/7", `{}`, 405, "method_not_allowed"},
				{"mget not JSON", "POST", "/v1/kv/widgets/_mget", `keys`, 400, "invalid_request"},
				{"mget unknown field", "POST", "/v1/kv/widgets/_mget", `{"kees":[1]}`, 400, "invalid_request"},
				{"mget bad key", "POST", "/v1/kv/widgets/_mget", `{"keys":[1.5]}`, 400, "invalid_request"},
				{"mget too many keys", "POST", "/v1/kv/widgets/_mget", `{"keys":[` + strings.Repeat("1,", 1000) + `1]}`, 413, "too_large"},
				{"bad If-Match", "PUT", "/v1/kv/widgets/7", `{}`, 400, "invalid_request"},
				{"no route", "GET", "/v2/everything", "", 404, "no_route"},
			}
			sqlBefore := sqlQueries(t, base)
			for _, b := range bad {
				t.Run(b.name, func(t *testing.T) {
					var hdr []string
					if b.name == "bad If-Match" {
						hdr = []string{"If-Match", "yesterday"}
					}
					r := call(t, b.method, base+b.path, b.body, hdr...)
					if r.status != b.status || errorCode(t, r) != b.code {
						t.Fatalf("%s %s = %d %s, want %d %s", b.method, b.path, r.status, r.body, b.status, b.code)
					}
				})
			}

			if after := sqlQueries(t, base); after != sqlBefore {
				t.Errorf("bad requests reached SQL: %v queries before, %v after", sqlBefore, after)
			}

			if r := call(t, "GET", base+"/readyz", ""); r.status != 200 {
				t.Fatalf("/readyz = %d %s", r.status, r.body)
			}
			r := call(t, "GET", base+"/metrics", "")
			for _, series := range []string{"warmcache_http_request_duration_seconds", "warmcache_lookups_total", "warmcache_sql_queries_total", "warmcache_sql_pool_connections"} {
				if !strings.Contains(r.body, series) {
					t.Errorf("/metrics lacks %s", series)
				}
			}
			if strings.Contains(r.body, `key="42"`) {
				t.Error("/metrics has a per-key label")
			}
		})
	}
}

// sqlQueries sums warmcache_sql_queries_total from /metrics.
func sqlQueries(t *testing.T, base string) float64 {
	t.Helper()
	sum := metricSum(t, base, "warmcache_sql_queries_total{")
	if sum == 0 {
		t.Fatal("no warmcache_sql_queries_total samples in /metrics")
	}
	return sum
}

// metricSum sums the samples of /metrics whose lines start with prefix.
func metricSum(t *testing.T, base, prefix string) float64 {
	t.Helper()
	r := call(t, "GET", base+"/metrics", "")
	var sum float64
	for _, line := range strings.Split(r.body, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestMigratePlanDetectsDialect prints the plan without --dialect: it is
// the DDL of the DSN's server on PostgreSQL and Greenplum, and PostgreSQL's
// when the server does not answer.
func TestMigratePlanDetectsDialect(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			env := map[string]string{"WARMCACHE_POSTGRES_DSN": w.Server(t)}
			if err := run(context.Background(), []string{"migrate", "plan"}, env, &out, &errOut); err != nil {
				t.Fatalf("migrate plan: %v\n%s", err, errOut.String())
			}
			want := "-- warmcache migrations for " + w.Name + " (dialect from the server of the DSN)"
			if !strings.HasPrefix(out.String(), want) || strings.Contains(out.String(), "DISTRIBUTED BY") != w.Greenplum {
				t.Fatalf("plan does not start with %q or has the wrong DDL:\n%s", want, out.String())
			}
		})
	}
	var out, errOut bytes.Buffer
	env := map[string]string{"WARMCACHE_POSTGRES_DSN": "postgres://nobody@127.0.0.1:1/none"}
	if err := run(context.Background(), []string{"migrate", "plan"}, env, &out, &errOut); err != nil {
		t.Fatalf("migrate plan: %v\n%s", err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "-- warmcache migrations for postgres (dialect from the default: the server of the DSN did not answer") {
		t.Fatalf("plan with an unreachable DSN:\n%s", out.String())
	}
}
