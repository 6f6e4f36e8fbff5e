package config_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// stringSettingCase is one way of giving a string setting of serve: its
// environment variable's value and the flags, and the value Load should
// give it, or that Load should refuse them.
type stringSettingCase struct {
	name    string
	env     string
	args    []string
	want    string
	wantErr bool
}

// checkStringSetting loads serve's configuration for each case and checks
// the setting that get reads, or that the error names flag.
func checkStringSetting(t *testing.T, flag, envName string, get func(config.Config) string, cases []stringSettingCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(config.ServeCommand, tc.args, env(map[string]string{envName: tc.env}), io.Discard)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), flag) {
					t.Fatalf("Load: err = %v, want one naming %s", err, flag)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := get(cfg); got != tc.want {
				t.Errorf("%s = %q, want %q", flag, got, tc.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c, err := config.Load(config.ServeCommand, nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:8080" || c.Redis.Addrs[0] != "127.0.0.1:6379" || !strings.Contains(c.Postgres.DSN, "127.0.0.1:5432") {
		t.Fatalf("defaults = %+v, want the laptop defaults", c)
	}
	if len(c.Namespaces) != 2 || c.Namespaces[0].Name != "widgets" {
		t.Fatalf("namespaces = %+v, want the built-in widgets", c.Namespaces)
	}
	if len(c.Tables) != 2 || c.Tables[0].Namespace != c.Namespaces[0] || c.Tables[1].Namespace != c.Namespaces[1] ||
		!c.Tables[0].Managed || !c.Tables[1].Managed || c.Tables[0].Storage.AppendOptimized || !c.Tables[1].Storage.AppendOptimized {
		t.Fatalf("tables = %+v, want the built-in widgets' tables, the archive append-optimized", c.Tables)
	}
}

func TestFlagsWinOverEnvironment(t *testing.T) {
	c, err := config.Load(config.ServeCommand,
		[]string{"--http-addr", "127.0.0.1:9999", "--redis-addrs", "a:1, b:2"},
		env(map[string]string{"WARMCACHE_HTTP_ADDR": "127.0.0.1:7777", "WARMCACHE_HOT_TIMEOUT": "20ms", "WARMCACHE_PG_POOLER": "pgbouncer"}),
		io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:9999" {
		t.Errorf("HTTPAddr = %q, want the flag's value", c.HTTP.Addr)
	}
	if c.Tiers.HotTimeout != 20*time.Millisecond || c.Postgres.Pooler != "pgbouncer" {
		t.Errorf("HotTimeout, PGPooler = %v, %q; want the environment's values", c.Tiers.HotTimeout, c.Postgres.Pooler)
	}
	if strings.Join(c.Redis.Addrs, "|") != "a:1|b:2" {
		t.Errorf("RedisAddrs = %q", c.Redis.Addrs)
	}
}

// TestZeroTurnsOff checks that the durations whose zero turns something
// off take 0 from the environment and from a flag.
func TestZeroTurnsOff(t *testing.T) {
	c, err := config.Load(config.ServeCommand, []string{"--write-fold-wait", "0"},
		env(map[string]string{"WARMCACHE_HOT_LANE_SPILL": "0"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tiers.HotLaneSpill != 0 || c.Tiers.WriteFoldWait != 0 {
		t.Errorf("HotLaneSpill, WriteFoldWait = %v, %v; want 0, 0", c.Tiers.HotLaneSpill, c.Tiers.WriteFoldWait)
	}
}

func TestInvalidSettingsNameTheField(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad duration", nil, map[string]string{"WARMCACHE_HOT_TIMEOUT": "soon"}, "WARMCACHE_HOT_TIMEOUT"},
		{"zero duration", nil, map[string]string{"WARMCACHE_HOT_TIMEOUT": "0"}, "WARMCACHE_HOT_TIMEOUT"},
		{"negative duration", []string{"--hot-lane-spill", "-1ms"}, nil, "hot-lane-spill"},
		{"bad number", nil, map[string]string{"WARMCACHE_PG_MAX_CONNS": "-1"}, "WARMCACHE_PG_MAX_CONNS"},
		{"bad exec mode", []string{"--pg-exec-mode", "fast"}, nil, "pg-exec-mode"},
		{"prepared through pgbouncer", []string{"--pg-exec-mode", "cache_statement", "--pg-pooler", "pgbouncer"}, nil, "PgBouncer"},
		{"no redis", []string{"--redis-addrs", ""}, nil, "redis-addrs"},
		{"unknown flag", []string{"--nope"}, nil, "nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Load(config.ServeCommand, c.args, env(c.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
}

func TestNamespacesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.yaml")
	doc := `
namespaces:
  - name: widgets
    table: public.widgets
    key: {column: id, type: bigint}
    value: {layout: packed, column: doc}
    version_column: rev
    ttl: 1m
    negative_ttl: 5s
    ttl_jitter: 0.2
    writable: true
    codec: zstd-dict
  - name: orders
    key: {type: text}
    value:
      layout: columns
      columns: [{name: status, type: text}, {name: total, type: numeric}]
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(config.ServeCommand, []string{"--namespaces", path}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	w, o := c.Namespaces[0], c.Namespaces[1]
	if w.Table != "public.widgets" || w.KeyColumn != "id" || w.ValueColumn != "doc" || w.VersionColumn != "rev" ||
		w.TTL != time.Minute || w.NegativeTTL != 5*time.Second || w.TTLJitter != 0.2 || !w.Writable || c.Tables[0].Managed ||
		w.Codec != warmcache.CodecZstdDict {
		t.Errorf("widgets = %+v", w)
	}
	if o.Table != "orders" || o.KeyType != warmcache.KeyText || o.Layout != warmcache.LayoutColumns || len(o.Columns) != 2 || o.Writable ||
		o.Codec != warmcache.CodecNone {
		t.Errorf("orders = %+v", o)
	}
}

func TestNamespacesBytes(t *testing.T) {
	doc := `namespaces:
  - name: blobs
    key: {type: text}
    value: {layout: bytes, column: body}
  - name: images
    value: {layout: bytes, content_type: "image/PNG; charset=binary"}
  - name: docs
`
	nss, _, err := config.ParseNamespaces([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	b, i, d := nss[0], nss[1], nss[2]
	if b.Layout != warmcache.LayoutBytes || b.ValueColumn != "body" || b.ContentType != "application/octet-stream" || b.MediaType() != "application/octet-stream" {
		t.Errorf("blobs = %+v, want bytes in column body, application/octet-stream", b)
	}
	if i.Layout != warmcache.LayoutBytes || i.ValueColumn != "value" || i.ContentType != "image/png; charset=binary" {
		t.Errorf("images = %+v, want bytes in column value, image/png; charset=binary", i)
	}
	if d.Layout != warmcache.LayoutPacked || d.ContentType != "application/json" {
		t.Errorf("docs = %+v, want packed application/json", d)
	}
}

func TestNamespacesStorage(t *testing.T) {
	doc := `namespaces:
  - name: events
    managed: true
    storage: {partitions: 4, compression: zstd, compress_level: 5, appendoptimized: true, orientation: column, gin_index: true}
  - name: orders
`
	nss, tables, err := config.ParseNamespaces([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(nss) != 2 || len(tables) != 2 || tables[0].Namespace != nss[0] || tables[1].Namespace != nss[1] {
		t.Fatalf("tables = %+v, want one for each namespace in order", tables)
	}
	want := schema.Storage{Partitions: 4, Compression: "zstd", CompressLevel: 5, AppendOptimized: true, Orientation: "column", GINIndex: true}
	if !tables[0].Managed || tables[0].Storage != want {
		t.Errorf("events table = %+v, want managed with %+v", tables[0], want)
	}
	if tables[1].Managed || tables[1].Storage != (schema.Storage{}) {
		t.Errorf("orders table = %+v, want unmanaged with no options", tables[1])
	}
}

func TestBadNamespacesNameTheField(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"key type", `{namespaces: [{name: w, key: {type: int}}]}`, `namespaces[0] "w": key.type`},
		{"layout", `{namespaces: [{name: w, value: {layout: wide}}]}`, "value.layout"},
		{"columns missing", `{namespaces: [{name: w, value: {layout: columns}}]}`, "value.columns"},
		{"sql in a column", `{namespaces: [{name: w, value: {column: "v; drop table x"}}]}`, "value.column"},
		{"table", `{namespaces: [{name: w, table: "a.b.c"}]}`, "table"},
		{"ttl", `{namespaces: [{name: w, ttl: forever}]}`, "ttl"},
		{"jitter", `{namespaces: [{name: w, ttl_jitter: 1.5}]}`, "ttl_jitter"},
		{"content type on json", `{namespaces: [{name: w, value: {content_type: text/plain}}]}`, `value.content_type: only for layout bytes`},
		{"content type", `{namespaces: [{name: w, value: {layout: bytes, content_type: "not a type"}}]}`, `value.content_type: must be a media type`},
		{"columns on bytes", `{namespaces: [{name: w, value: {layout: bytes, columns: [{name: a, type: text}]}}]}`, `value.columns: only for layout columns`},
		{"codec", `{namespaces: [{name: w, codec: brotli}]}`, `namespaces[0] "w": codec: must be none, zstd or zstd-dict`},
		{"name", `{namespaces: [{name: "a/b"}]}`, "name"},
		{"duplicate", `{namespaces: [{name: w}, {name: w}]}`, "declared twice"},
		{"unknown field", `{namespaces: [{name: w, colour: red}]}`, "colour"},
		{"empty", `{}`, "at least one namespace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := config.ParseNamespaces([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
}

// Each command accepts only the flags it uses, and reads only those
// variables.
func TestCommandsTakeOnlyTheirFlags(t *testing.T) {
	cases := []struct {
		cmd  config.Command
		args []string
		ok   bool
	}{
		{config.ServeCommand, []string{"--near-cache-bytes", "1024"}, true},
		{config.ServeCommand, []string{"--dialect", "greenplum"}, false},
		{config.PlanCommand, []string{"--dialect", "greenplum"}, true},
		{config.MigrateCommand, []string{"--redis-addrs", "r:6379"}, false},
		{config.LoadCommand, []string{"--redis-addrs", "r:6379", "--max-body-bytes", "10"}, true},
		{config.LoadCommand, []string{"--max-inflight", "10"}, false},
		{config.InvalidateCommand, []string{"--hot-timeout", "1s"}, true},
		{config.AdviseCommand, []string{"--pg-pooler", "pgbouncer"}, true},
		{config.AdviseCommand, []string{"--hot-timeout", "1s"}, false},
	}
	for _, c := range cases {
		t.Run(string(c.cmd)+" "+c.args[0], func(t *testing.T) {
			_, err := config.Load(c.cmd, c.args, env(nil), io.Discard)
			if (err == nil) != c.ok {
				t.Fatalf("Load = %v, want accepted %v", err, c.ok)
			}
		})
	}
	// A variable that migrate does not read cannot fail it.
	if _, err := config.Load(config.MigrateCommand, nil, env(map[string]string{"WARMCACHE_HOT_TIMEOUT": "soon"}), io.Discard); err != nil {
		t.Errorf("migrate read WARMCACHE_HOT_TIMEOUT: %v", err)
	}
	if _, err := config.Load("nope", nil, env(nil), io.Discard); err == nil {
		t.Error("Load accepted an unknown command")
	}
}

// The exec mode and the pooler are parsed once, from a flag or a variable.
func TestExecModeAndPoolerAreTyped(t *testing.T) {
	c, err := config.Load(config.DoctorCommand, []string{"--pg-exec-mode", "simple_protocol"},
		env(map[string]string{"WARMCACHE_PG_POOLER": "pgbouncer"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.ExecMode != pgstore.ExecModeSimpleProtocol || c.Postgres.Pooler != pgstore.PoolerPgBouncer {
		t.Errorf("ExecMode, Pooler = %q, %q", c.Postgres.ExecMode, c.Postgres.Pooler)
	}
	if _, err := config.Load(config.DoctorCommand, nil, env(map[string]string{"WARMCACHE_PG_POOLER": "pgpool"}), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "WARMCACHE_PG_POOLER") {
		t.Errorf("an unknown pooler: err = %v, want one naming WARMCACHE_PG_POOLER", err)
	}
	d := config.Defaults()
	if d.Postgres.ExecMode != pgstore.ExecModeAuto || d.Postgres.Pooler != pgstore.PoolerNone || d.Postgres.MaxConns != 8 {
		t.Errorf("defaults = %+v", d.Postgres)
	}
}
