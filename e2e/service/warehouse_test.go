package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/testenv"
)

// TestQueryAndLoadOverHTTP runs _query and _load against the real stack,
// directly and through PgBouncer.
func TestQueryAndLoadOverHTTP(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	for _, pgbouncer := range []bool{false, true} {
		t.Run(fmt.Sprintf("pgbouncer=%v", pgbouncer), func(t *testing.T) {
			dsn := testenv.NewDatabase(t)
			migrateAndSeed(t, dsn, 250)
			env := map[string]string{
				"WARMCACHE_POSTGRES_DSN": dsn,
				"WARMCACHE_REDIS_ADDRS":  redisAddr,
				"WARMCACHE_REDIS_PREFIX": "wh-" + testenv.RandomSuffix(t) + ":",
			}
			if pgbouncer {
				env["WARMCACHE_POSTGRES_DSN"] = testenv.PgBouncerDSN(t, testenv.DatabaseName(t, dsn))
				env["WARMCACHE_PG_POOLER"] = "pgbouncer"
			}
			base := startServer(t, env)
			kv := base + "/v1/kv/widgets/"

			t.Run("query pages", func(t *testing.T) {
				var keys []int64
				after := ""
				for pages := 0; pages < 10; pages++ {
					body := `{"match":{"widget":{"debug":"on"}},"limit":100`
					if after != "" {
						body += `,"after":"` + after + `"`
					}
					r := call(t, "POST", kv+"_query", body+"}")
					var page struct {
						Items []struct {
							Key     int64           `json:"key"`
							Value   json.RawMessage `json:"value"`
							Version int64           `json:"version"`
						} `json:"items"`
						Next string `json:"next"`
					}
					if err := json.Unmarshal([]byte(r.body), &page); err != nil || r.status != 200 || r.header.Get("X-Cache") != "bypass" {
						t.Fatalf("_query = %d %q %s (%v)", r.status, r.header.Get("X-Cache"), r.body, err)
					}
					for _, it := range page.Items {
						keys = append(keys, it.Key)
					}
					if page.Next == "" {
						break
					}
					after = page.Next
				}
				if len(keys) != 250 || keys[0] != 1 || keys[249] != 250 {
					t.Fatalf("_query pages gave %d keys (%v...), want 1..250", len(keys), keys[:min(len(keys), 3)])
				}
				r := call(t, "POST", kv+"_query", `{"match":{"widget":{"id":"42"}}}`)
				if r.status != 200 || !strings.Contains(r.body, `"key":42,`) || strings.Contains(r.body, `"next"`) {
					t.Fatalf("_query for one id = %d %s", r.status, r.body)
				}
				for _, bad := range []struct{ body, code string }{
					{`{"match":[1]}`, "invalid_value"},
					{`{"match":{},"limit":100000}`, "too_large"},
					{`{"match":{},"after":"bogus"}`, "invalid_value"},
					{`{"match":{},"extra":1}`, "invalid_request"},
				} {
					if r := call(t, "POST", kv+"_query", bad.body); errorCode(t, r) != bad.code {
						t.Errorf("_query %s = %d %s, want %s", bad.body, r.status, r.body, bad.code)
					}
				}
			})

			t.Run("load refreshes the hot tier", func(t *testing.T) {
				if r := call(t, "GET", kv+"7", ""); r.status != 200 { // cached now
					t.Fatalf("GET 7 = %d %s", r.status, r.body)
				}
				body := `{"key":7,"value":{"widget":{"id":"7","debug":"loaded"}}}` + "\n" +
					`{"key":"1000","value":{"widget":{"id":"1000"}}}` + "\n" +
					`{"key":8,"value":{"widget":{"debug":"on","id":"8"}}}` + "\n"
				r := call(t, "POST", kv+"_load", body, "Content-Type", "application/x-ndjson")
				var res loadResult
				if err := json.Unmarshal([]byte(r.body), &res); err != nil || r.status != 200 {
					t.Fatalf("_load = %d %s (%v)", r.status, r.body, err)
				}
				if res.Lines != 3 || res.Inserted != 1 || res.Updated != 1 || res.Unchanged != 1 || res.Refreshed != 2 {
					t.Fatalf("_load = %s, want 3 lines: 1 inserted, 1 updated, 1 unchanged, 2 refreshed", r.body)
				}
				r = call(t, "GET", kv+"7", "")
				if r.status != 200 || !strings.Contains(r.body, `"loaded"`) || r.header.Get("X-Cache") != "hit" {
					t.Fatalf("GET 7 after the load = %d %q %s, want the loaded value from the hot tier", r.status, r.header.Get("X-Cache"), r.body)
				}
			})

			t.Run("load with bad lines loads nothing", func(t *testing.T) {
				body := `{"key":9,"value":{"changed":true}}` + "\n" + `{"key":"x","value":{}}` + "\n" + `{"key":11,"value":` + "\n"
				r := call(t, "POST", kv+"_load", body)
				if r.status != 400 || errorCode(t, r) != "invalid_value" || !strings.Contains(r.body, "line 2") || !strings.Contains(r.body, "line 3") {
					t.Fatalf("_load with bad lines = %d %s, want 400 naming lines 2 and 3", r.status, r.body)
				}
				if r := call(t, "GET", kv+"9", ""); strings.Contains(r.body, "changed") {
					t.Fatalf("key 9 = %s after a failed load, want the old value", r.body)
				}
			})

			t.Run("load CSV", func(t *testing.T) {
				r := call(t, "POST", kv+"_load", "key,value\n2001,\"{\"\"a\"\": 1}\"\n", "Content-Type", "text/csv")
				if r.status != 200 || !strings.Contains(r.body, `"inserted":1`) {
					t.Fatalf("CSV _load = %d %s", r.status, r.body)
				}
				if r := call(t, "GET", kv+"2001", ""); r.status != 200 || r.body != `{"a": 1}` {
					t.Fatalf("GET 2001 = %d %s", r.status, r.body)
				}
			})
		})
	}
}

type loadResult struct {
	Lines, Inserted, Updated, Unchanged, Refreshed int64
}

func TestLoadCommand(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	migrateAndSeed(t, dsn, 10)
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN": dsn,
		"WARMCACHE_REDIS_ADDRS":  testenv.RedisAddr(t),
		"WARMCACHE_REDIS_PREFIX": "ld-" + testenv.RandomSuffix(t) + ":",
	}
	dir := t.TempDir()
	var lines strings.Builder
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&lines, `{"key":%d,"value":{"n":%d}}`+"\n", i, i)
	}
	good := filepath.Join(dir, "good.ndjson")
	if err := os.WriteFile(good, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"load", "widgets", good, "--progress", "on"}, env, &out, &errOut); err != nil {
		t.Fatalf("load: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "500 lines, 490 inserted, 10 updated, 0 unchanged") || !strings.Contains(out.String(), "rows/s") {
		t.Fatalf("load printed %q", out.String())
	}
	if !strings.Contains(errOut.String(), "\r") && !strings.Contains(errOut.String(), "rows") {
		t.Logf("no progress line drawn (the load ended before the first tick): %q", errOut.String())
	}

	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("key,value\n1,{}\n2,{\n3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	err := run(context.Background(), []string{"load", "widgets", bad}, env, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "nothing was loaded") ||
		!strings.Contains(errOut.String(), "line 3:") || !strings.Contains(errOut.String(), "line 4:") {
		t.Fatalf("load of a bad file = %v; stderr:\n%s", err, errOut.String())
	}
}

// TestDoctorCommand runs the doctor on the migrated widgets (no problem),
// then with a namespace whose table has no index on its key (a problem).
func TestDoctorCommand(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	migrateAndSeed(t, dsn, 2000)
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN": dsn,
		"WARMCACHE_REDIS_ADDRS":  testenv.RedisAddr(t),
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"doctor"}, env, &out, &errOut); err != nil {
		t.Fatalf("doctor: %v\n%s%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{"redis      ok", "warehouse  ok", "namespace widgets (table widgets, 8 hash partitions)",
		"reads 1 of 8 partitions", "no problems found"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out.String())
		}
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE legacy (id bigint NOT NULL, doc jsonb NOT NULL, version bigint NOT NULL);
INSERT INTO legacy SELECT g, '{}', g FROM generate_series(1, 3000) g; ANALYZE legacy;`); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "namespaces.yaml")
	err = os.WriteFile(file, []byte(`namespaces:
  - name: legacy
    key: {column: id, type: bigint}
    value: {layout: packed, column: doc}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	err = run(ctx, []string{"doctor", "--namespaces", file}, env, &out, &errOut)
	if err == nil || !strings.Contains(out.String(), `warn  the lookup reads legacy sequentially: there is no usable index on "id"`) ||
		!strings.Contains(out.String(), "plan of the 6th execution:") {
		t.Fatalf("doctor on a table without an index = %v:\n%s", err, out.String())
	}
}

func TestAdviseCommand(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	migrateAndSeed(t, dsn, 400)
	var out, errOut bytes.Buffer
	jsonFile := filepath.Join(t.TempDir(), "report.json")
	err := run(context.Background(), []string{"advise", "widgets", "--sample", "300", "--lookups", "50", "--json", jsonFile},
		map[string]string{"WARMCACHE_POSTGRES_DSN": dsn}, &out, &errOut)
	if err != nil {
		t.Fatalf("advise: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"warmcache advise widgets: postgres, 300 sampled rows", "packed jsonb, TOAST lz4", "current", "recommended:", "migration:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("advise output lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(jsonFile)
	var doc struct {
		Results []struct{ Name string } `json:"results"`
	}
	if err != nil || json.Unmarshal(b, &doc) != nil || len(doc.Results) != 7 {
		t.Fatalf("JSON report %s (%v)", b, err)
	}
}
