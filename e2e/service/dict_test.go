package service_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/testenv"
)

// headerLen is the length of the header of every value the hot tier stores
// (see internal/rediscache/format.go).
const headerLen = 35

// dictNamespaces serves the seeded widgets table with codec zstd-dict.
const dictNamespaces = `
namespaces:
  - name: widgets
    key: {column: key, type: bigint}
    value: {layout: packed, column: value}
    managed: true
    codec: zstd-dict
`

func TestDictTrainAndServe(t *testing.T) {
	env := seededEnv(t, 300)
	// The seed's documents are tiny; make them the local stack's widget
	// documents, which compress.
	conn, err := pgx.Connect(context.Background(), env["WARMCACHE_POSTGRES_DSN"])
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(context.Background(), `UPDATE widgets SET value = jsonb_set('{"widget": {"debug": "on", "id": "",
		"window": {"title": "Sample Konfabulator Widget", "name": "main_window", "width": 500, "height": 500},
		"image": {"src": "Images/Sun.png", "name": "sun1", "hOffset": 250, "vOffset": 250, "alignment": "center"},
		"text": {"data": "Click Here", "size": 36, "style": "bold", "name": "text1", "hOffset": 250, "vOffset": 100,
		"alignment": "center", "onMouseUp": "sun1.opacity = (sun1.opacity / 100) * 90;"}}}'::jsonb,
		'{widget,id}', to_jsonb(key::text))`)
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "namespaces.yaml")
	if err := os.WriteFile(path, []byte(dictNamespaces), 0o600); err != nil {
		t.Fatal(err)
	}
	env["WARMCACHE_NAMESPACES_FILE"] = path
	rdb := redis.NewClient(&redis.Options{Addr: env["WARMCACHE_REDIS_ADDRS"]})
	t.Cleanup(func() { _ = rdb.Close() })
	stored := func(key string) []byte {
		t.Helper()
		b, err := rdb.Get(context.Background(), env["WARMCACHE_REDIS_PREFIX"]+"widgets:"+key).Bytes()
		if err != nil {
			t.Fatalf("redis get %s: %v", key, err)
		}
		t.Cleanup(func() { rdb.Del(context.Background(), env["WARMCACHE_REDIS_PREFIX"]+"widgets:"+key) })
		return b
	}
	dictCmd := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(context.Background(), append([]string{"dict"}, args...), env, &out, &errOut); err != nil {
			t.Fatalf("dict %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return out.String()
	}

	// Without a dictionary, the namespace compresses with plain zstd.
	before := startServing(t, env, 3)
	if r := call(t, "GET", before.http+"/v1/kv/widgets/7", ""); r.status != 200 {
		t.Fatalf("GET before training = %d %s", r.status, r.body)
	}
	if !strings.Contains(before.log.String(), "no dictionary") {
		t.Errorf("serve did not warn about the missing dictionary; log:\n%s", before.log)
	}
	if got := stored("7")[0]; got != '2' {
		t.Errorf("value stored in format %q before training, want '2' (plain zstd)", got)
	}

	if out := dictCmd("list"); !strings.Contains(out, "no dictionaries") {
		t.Errorf("dict list before training = %q", out)
	}
	out := dictCmd("train", "widgets")
	m := regexp.MustCompile(`dictionary (\d+) for namespace widgets: \d+ bytes, trained on \d+ values`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "zstd-dict") {
		t.Fatalf("dict train printed %q", out)
	}
	id, _ := strconv.ParseUint(m[1], 10, 32)
	if list := dictCmd("list"); !strings.Contains(list, m[1]) || !strings.Contains(list, "encodes") {
		t.Errorf("dict list after training = %q, want dictionary %s marked as encoding", list, m[1])
	}

	// A server started after training encodes with the dictionary, and
	// still reads the value the first one compressed without it.
	after := startServing(t, env, 3)
	first := call(t, "GET", after.http+"/v1/kv/widgets/8", "")
	second := call(t, "GET", after.http+"/v1/kv/widgets/8", "")
	if first.status != 200 || second.status != 200 || first.body != second.body || second.header.Get("X-Cache") != "hit" {
		t.Fatalf("GET twice = %d %q, then %d %q (X-Cache %q); want the same body, then a hit",
			first.status, first.body, second.status, second.body, second.header.Get("X-Cache"))
	}
	if !strings.Contains(first.body, `"8"`) {
		t.Errorf("body %q is not widget 8", first.body)
	}
	b := stored("8")
	if b[0] != '3' || binary.BigEndian.Uint32(b[headerLen:]) != uint32(id) {
		t.Errorf("value stored as format %q with dictionary %d, want format '3' with %d", b[0], binary.BigEndian.Uint32(b[headerLen:]), id)
	}
	if r := call(t, "GET", after.http+"/v1/kv/widgets/7", ""); r.status != 200 || r.header.Get("X-Cache") != "hit" || !strings.Contains(r.body, `"7"`) {
		t.Errorf("GET of the zstd value = %d %q (X-Cache %q), want a hit on widget 7", r.status, r.body, r.header.Get("X-Cache"))
	}
}

func TestDictTrainRefuses(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	env := map[string]string{"WARMCACHE_POSTGRES_DSN": dsn}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no action", nil, "want train <namespace> or list"},
		{"unknown action", []string{"compact"}, "unknown action"},
		{"no namespace", []string{"train"}, "want a namespace"},
		{"unknown namespace", []string{"train", "gadgets"}, "unknown namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), append([]string{"dict"}, tt.args...), env, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("dict %q = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
	t.Run("too few values", func(t *testing.T) {
		migrateAndSeed(t, dsn, 5)
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"dict", "train", "widgets"}, env, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), "has 5 values") {
			t.Errorf("dict train on 5 rows = %v, want an error naming the 5 values", err)
		}
	})
}
