package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/testenv"
)

// laneNamespaces are the built-in namespaces: widgets is a heap table, and
// widgets_archive is append-optimized (zstd, row) on Greenplum.
var laneNamespaces = []string{"widgets", "widgets_archive"}

// TestServiceLane runs the REST and gRPC contract, read-your-writes across
// pool connections and a cold-key stampede through the whole service, on
// PostgreSQL and on Greenplum, for a heap and an append-optimized
// namespace. On Greenplum, updates and deletes of the append-optimized
// namespace used to answer 503 (DELETE ... RETURNING, 0A000), and a GET
// right after a PUT could return the older value (a version sequence with
// CACHE 20 hands each session its own block).
func TestServiceLane(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			dsn := w.NewDatabase(t)
			migrateAndSeed(t, dsn, 200)
			conn, err := pgx.Connect(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			_, err = conn.Exec(context.Background(), `INSERT INTO widgets_archive SELECT key, value, version FROM widgets`)
			conn.Close(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s := startServing(t, map[string]string{
				"WARMCACHE_POSTGRES_DSN": dsn,
				"WARMCACHE_PG_MAX_CONNS": "4",
				"WARMCACHE_REDIS_ADDRS":  redisAddr,
				"WARMCACHE_REDIS_PREFIX": "lane-" + testenv.RandomSuffix(t) + ":",
				"WARMCACHE_HOT_TIMEOUT":  "1s",
				// The stampede counts the SQL queries its GETs cause; the
				// consistency monitor's audits of the earlier writes, a
				// second after each, read the warehouse too.
				"WARMCACHE_CONSISTENCY_SAMPLES": "0",
			}, 2)
			for _, ns := range laneNamespaces {
				t.Run(ns, func(t *testing.T) {
					t.Run("rest", func(t *testing.T) { checkREST(t, s.http, ns) })
					t.Run("grpc", func(t *testing.T) { checkGRPC(t, s.grpc, ns) })
					t.Run("read your writes", func(t *testing.T) { checkReadYourWrites(t, s.http, ns) })
					t.Run("stampede", func(t *testing.T) { checkStampede(t, s.http, ns) })
				})
			}
		})
	}
}

// checkREST runs the REST contract on namespace ns of the server at base.
func checkREST(t *testing.T, base, ns string) {
	kv := base + "/v1/kv/" + ns + "/"
	r := call(t, "GET", kv+"42", "")
	if r.status != 200 || r.header.Get("X-Cache") != "miss" || !strings.Contains(r.body, `"id": "42"`) {
		t.Fatalf("first GET = %d %q %s, want 200 miss with id 42", r.status, r.header.Get("X-Cache"), r.body)
	}
	etag := r.header.Get("ETag")
	if r = call(t, "GET", kv+"42", ""); r.status != 200 || r.header.Get("X-Cache") != "hit" || r.header.Get("ETag") != etag {
		t.Fatalf("second GET = %d %q %q, want 200 hit with ETag %s", r.status, r.header.Get("X-Cache"), r.header.Get("ETag"), etag)
	}
	r = call(t, "PUT", kv+"42", `{"widget": {"id": "42", "debug": "off"}}`)
	if r.status != 200 || r.header.Get("ETag") == "" || r.header.Get("ETag") == etag {
		t.Fatalf("PUT of an existing key = %d %s ETag %q (old %s), want 200 with a new ETag", r.status, r.body, r.header.Get("ETag"), etag)
	}
	newTag := r.header.Get("ETag")
	if r = call(t, "GET", kv+"42", ""); r.status != 200 || !strings.Contains(r.body, `"off"`) || r.header.Get("ETag") != newTag {
		t.Fatalf("GET after PUT = %d %s ETag %q, want the new value at %s", r.status, r.body, r.header.Get("ETag"), newTag)
	}
	if r = call(t, "PUT", kv+"42", `{}`, "If-Match", etag); r.status != 412 || errorCode(t, r) != "precondition_failed" {
		t.Fatalf("PUT with a stale If-Match = %d %s, want 412", r.status, r.body)
	}
	if r = call(t, "PUT", kv+"42", `{"v": 3}`, "If-Match", newTag); r.status != 200 {
		t.Fatalf("PUT with the current If-Match = %d %s, want 200", r.status, r.body)
	}
	current := r.header.Get("ETag")
	if r = call(t, "DELETE", kv+"42", "", "If-Match", newTag); r.status != 412 {
		t.Fatalf("DELETE with a stale If-Match = %d %s, want 412", r.status, r.body)
	}
	if r = call(t, "DELETE", kv+"42", "", "If-Match", current); r.status != 204 {
		t.Fatalf("DELETE with the current If-Match = %d %s, want 204", r.status, r.body)
	}
	if r = call(t, "GET", kv+"42", ""); r.status != 404 || errorCode(t, r) != "not_found" {
		t.Fatalf("GET after DELETE = %d %s, want 404 not_found", r.status, r.body)
	}
	if r = call(t, "DELETE", kv+"42", ""); r.status != 404 {
		t.Fatalf("second DELETE = %d %s, want 404", r.status, r.body)
	}
	if r = call(t, "PUT", kv+"42", `{"widget": {"id": "42", "debug": "again"}}`); r.status != 200 {
		t.Fatalf("PUT after DELETE = %d %s, want 200", r.status, r.body)
	}
	if r = call(t, "GET", kv+"42", ""); r.status != 200 || !strings.Contains(r.body, "again") {
		t.Fatalf("GET after PUT after DELETE = %d %s", r.status, r.body)
	}

	r = call(t, "POST", kv+"_mget", `{"keys":[1,"2",999999999]}`)
	var mget struct {
		Items   map[string]json.RawMessage `json:"items"`
		Missing []string                   `json:"missing"`
	}
	if err := json.Unmarshal([]byte(r.body), &mget); err != nil || r.status != 200 ||
		len(mget.Items) != 2 || mget.Items["1"] == nil || mget.Items["2"] == nil || len(mget.Missing) != 1 || mget.Missing[0] != "999999999" {
		t.Fatalf("_mget = %d %s (%v), want items 1 and 2 and missing 999999999", r.status, r.body, err)
	}

	r = call(t, "POST", kv+"_query", `{"match":{"widget":{"id":"17"}}}`)
	if r.status != 200 || !strings.Contains(r.body, `"key":17,`) || strings.Count(r.body, `"key":`) != 1 {
		t.Fatalf("_query for one id = %d %s", r.status, r.body)
	}

	body := `{"key":7,"value":{"loaded":true}}` + "\n" + `{"key":5001,"value":{"new":true}}` + "\n" +
		`{"key":8,"value":` + call(t, "GET", kv+"8", "").body + "}\n"
	r = call(t, "POST", kv+"_load", body)
	var res loadResult
	if err := json.Unmarshal([]byte(r.body), &res); err != nil || r.status != 200 {
		t.Fatalf("_load = %d %s (%v)", r.status, r.body, err)
	}
	if res.Lines != 3 || res.Inserted != 1 || res.Updated != 1 || res.Unchanged != 1 {
		t.Fatalf("_load = %s, want 3 lines: 1 inserted, 1 updated, 1 unchanged", r.body)
	}
	if r = call(t, "GET", kv+"7", ""); r.status != 200 || !strings.Contains(r.body, `"loaded"`) {
		t.Fatalf("GET 7 after the load = %d %s, want the loaded value", r.status, r.body)
	}
}

// checkGRPC runs the gRPC contract on namespace ns.
func checkGRPC(t *testing.T, target, ns string) {
	ctx := context.Background()
	c := warmcachev1.NewCacheClient(dialGRPC(t, target))
	got, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: ns, Key: "43"})
	if err != nil || !bytes.Contains(got.Item.Value, []byte(`"id": "43"`)) || got.Item.Version == 0 {
		t.Fatalf("Get = %v, %v; want id 43", got, err)
	}
	put, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: ns, Key: "43", Value: []byte(`{"v": 1}`), ExpectedVersion: &got.Item.Version})
	if err != nil || put.Item.Version <= got.Item.Version {
		t.Fatalf("Put at the current version = %v, %v; want a newer version", put, err)
	}
	_, err = c.Put(ctx, &warmcachev1.PutRequest{Namespace: ns, Key: "43", Value: []byte(`{"v": 2}`), ExpectedVersion: &got.Item.Version})
	wantCode(t, "Put at a stale version", err, codes.FailedPrecondition)
	after, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: ns, Key: "43"})
	if err != nil || string(after.Item.Value) != `{"v": 1}` || after.Item.Version != put.Item.Version {
		t.Fatalf("Get after Put = %v, %v; want {\"v\": 1} at version %d", after, err, put.Item.Version)
	}
	if _, err := c.Delete(ctx, &warmcachev1.DeleteRequest{Namespace: ns, Key: "43"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = c.Get(ctx, &warmcachev1.GetRequest{Namespace: ns, Key: "43"})
	wantCode(t, "Get after Delete", err, codes.NotFound)
	_, err = c.Delete(ctx, &warmcachev1.DeleteRequest{Namespace: ns, Key: "43"})
	wantCode(t, "second Delete", err, codes.NotFound)

	mget, err := c.MGet(ctx, &warmcachev1.MGetRequest{Namespace: ns, Keys: []string{"3", "4", "999999999"}})
	if err != nil || len(mget.Items) != 2 || len(mget.Missing) != 1 {
		t.Fatalf("MGet = %v, %v; want 2 items and 1 missing", mget, err)
	}
	stream, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&warmcachev1.LoadRequest{Namespace: ns, Records: []*warmcachev1.LoadRecord{
		{Key: "6001", Value: []byte(`{"widget":{"id":"6001","color":"teal"}}`)},
		{Key: "3", Value: []byte(`{"widget":{"id":"3","color":"teal"}}`)},
	}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.CloseAndRecv()
	if err != nil || res.Records != 2 || res.Inserted != 1 || res.Updated != 1 {
		t.Fatalf("Load = %v, %v; want 2 records, 1 inserted, 1 updated", res, err)
	}
	q, err := c.Query(ctx, &warmcachev1.QueryRequest{Namespace: ns, Match: []byte(`{"widget":{"color":"teal"}}`), Limit: 10})
	if err != nil || len(q.Items) != 2 {
		t.Fatalf("Query = %v, %v; want keys 3 and 6001", q, err)
	}
}

// checkReadYourWrites writes one key 40 times, each PUT followed by a GET,
// while other writers keep the pool's connections busy with other keys, so
// that consecutive writes draw their versions on different connections.
// Every ETag must be newer than the one before, and every GET must return
// the value just written.
func checkReadYourWrites(t *testing.T, base, ns string) {
	kv := base + "/v1/kv/" + ns + "/"
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Errors show in the checked writes; this one only keeps
				// connections busy.
				req, err := http.NewRequest("PUT", kv+strconv.Itoa(100+w), strings.NewReader(fmt.Sprintf(`{"n": %d}`, i)))
				if err != nil {
					return
				}
				if res, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	var last int64
	for round := range 40 {
		r := call(t, "PUT", kv+"77", fmt.Sprintf(`{"round": %d}`, round))
		if r.status != 200 {
			t.Fatalf("round %d: PUT = %d %s", round, r.status, r.body)
		}
		v, err := strconv.ParseInt(strings.Trim(r.header.Get("ETag"), `"`), 10, 64)
		if err != nil || v <= last {
			t.Fatalf("round %d: ETag %s after %d, want a newer version", round, r.header.Get("ETag"), last)
		}
		last = v
		g := call(t, "GET", kv+"77", "")
		if g.status != 200 || g.body != fmt.Sprintf(`{"round": %d}`, round) || g.header.Get("ETag") != r.header.Get("ETag") {
			t.Fatalf("round %d: GET after PUT = %d %s ETag %s (X-Cache %s), want the value just written at %s",
				round, g.status, g.body, g.header.Get("ETag"), g.header.Get("X-Cache"), r.header.Get("ETag"))
		}
	}
}

// checkStampede sends 32 concurrent GETs for one cold key: they must share
// one SQL query.
func checkStampede(t *testing.T, base, ns string) {
	kv := base + "/v1/kv/" + ns + "/"
	before := sqlQueries(t, base)
	var wg sync.WaitGroup
	statuses := make([]int, 32)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Get(kv + "150")
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			statuses[i] = res.StatusCode
		}()
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 200 {
			t.Fatalf("GET %d = %d, want 200", i, s)
		}
	}
	if after := sqlQueries(t, base); after-before != 1 {
		t.Fatalf("32 concurrent GETs of a cold key ran %v SQL queries, want 1", after-before)
	}
}
