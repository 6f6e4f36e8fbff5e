package service_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/testenv"
)

// served are the addresses of a served server (harness.Served), what it
// printed and its log.
type served struct {
	http, grpc             string // http://host:port or https://, host:port
	httpSocket, grpcSocket string // socket paths
	daprHTTP, daprGRPC     string // the Dapr state API: http://host:port, host:port
	lines                  []string
	log                    *harness.Log
}

// startServing runs `warmcache serve` with args (always on free TCP ports)
// and env in-process (harness.Serve): want is how many "warmcache: " lines
// it prints at start (one per endpoint, then a notice when no keys are
// configured). The server must stop cleanly when the test ends.
func startServing(t *testing.T, env map[string]string, want int, args ...string) served {
	t.Helper()
	s := harness.Serve(t, env, want, args...)
	return served{http: s.HTTP, grpc: s.GRPC, httpSocket: s.HTTPSocket, grpcSocket: s.GRPCSocket,
		daprHTTP: s.DaprHTTP, daprGRPC: s.DaprGRPC, lines: s.Lines, log: s.Log}
}

// seededEnv migrates and seeds a fresh database with widgets 1..n and
// returns the server environment for it, with its own Redis prefix. Like
// startServer, it gives Redis calls a deadline that a machine busy with the
// rest of the suite cannot miss, since tests assert that fills land.
func seededEnv(t *testing.T, n int) map[string]string {
	t.Helper()
	redisAddr := testenv.RedisAddr(t)
	dsn := testenv.NewDatabase(t)
	migrateAndSeed(t, dsn, n)
	return map[string]string{
		"WARMCACHE_POSTGRES_DSN": dsn,
		"WARMCACHE_REDIS_ADDRS":  redisAddr,
		"WARMCACHE_REDIS_PREFIX": "sidecar-" + testenv.RandomSuffix(t) + ":",
		"WARMCACHE_HOT_TIMEOUT":  "1s",
	}
}

func dialGRPC(t *testing.T, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func withKey(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: code %s (%v), want %s", what, got, err, want)
	}
}

func TestGRPCEndToEnd(t *testing.T) {
	s := startServing(t, seededEnv(t, 100), 2)
	ctx := context.Background()
	conn := dialGRPC(t, s.grpc)
	c := warmcachev1.NewCacheClient(conn)

	got, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: "42"})
	if err != nil || got.Item.Source != "miss" || !bytes.Contains(got.Item.Value, []byte(`"id": "42"`)) || got.Item.Version == 0 {
		t.Fatalf("first Get = %v, %v; want a miss with id 42", got, err)
	}
	again, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: "42"})
	if err != nil || again.Item.Source != "hit" || again.Item.Version != got.Item.Version {
		t.Fatalf("second Get = %v, %v; want a hit at version %d", again, err, got.Item.Version)
	}

	put, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "42", Value: []byte(`{"v": 1}`), ExpectedVersion: &got.Item.Version})
	if err != nil || put.Item.Version <= got.Item.Version {
		t.Fatalf("Put at the current version = %v, %v; want a newer version", put, err)
	}
	_, err = c.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "42", Value: []byte(`{"v": 2}`), ExpectedVersion: &got.Item.Version})
	wantCode(t, "Put at a stale version", err, codes.FailedPrecondition)
	after, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: "42"})
	if err != nil || string(after.Item.Value) != `{"v": 1}` || after.Item.Version != put.Item.Version {
		t.Fatalf("Get after Put = %v, %v; want {\"v\": 1} at version %d", after, err, put.Item.Version)
	}

	if _, err := c.Delete(ctx, &warmcachev1.DeleteRequest{Namespace: "widgets", Key: "42"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = c.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: "42"})
	wantCode(t, "Get after Delete", err, codes.NotFound)
	_, err = c.Delete(ctx, &warmcachev1.DeleteRequest{Namespace: "widgets", Key: "42"})
	wantCode(t, "second Delete", err, codes.NotFound)

	mget, err := c.MGet(ctx, &warmcachev1.MGetRequest{Namespace: "widgets", Keys: []string{"1", "2", "999999999"}})
	if err != nil || len(mget.Items) != 2 || mget.Items[0].Key != "1" || mget.Items[1].Key != "2" ||
		len(mget.Missing) != 1 || mget.Missing[0] != "999999999" {
		t.Fatalf("MGet = %v, %v; want items 1 and 2 and missing 999999999", mget, err)
	}

	errCases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"unknown namespace", func() error {
			_, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: "nope", Key: "1"})
			return err
		}, codes.NotFound},
		{"invalid key", func() error {
			_, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: "abc"})
			return err
		}, codes.InvalidArgument},
		{"invalid value", func() error {
			_, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "7", Value: []byte(`{"a":`)})
			return err
		}, codes.InvalidArgument},
		{"too many keys", func() error {
			keys := make([]string, 1001)
			for i := range keys {
				keys[i] = fmt.Sprint(i + 1)
			}
			_, err := c.MGet(ctx, &warmcachev1.MGetRequest{Namespace: "widgets", Keys: keys})
			return err
		}, codes.ResourceExhausted},
		{"query match not an object", func() error {
			_, err := c.Query(ctx, &warmcachev1.QueryRequest{Namespace: "widgets", Match: []byte(`[1]`)})
			return err
		}, codes.InvalidArgument},
	}
	for _, ec := range errCases {
		t.Run(ec.name, func(t *testing.T) { wantCode(t, ec.name, ec.call(), ec.want) })
	}

	t.Run("load stream", func(t *testing.T) {
		stream, err := c.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		msgs := []*warmcachev1.LoadRequest{
			{Namespace: "widgets", Records: []*warmcachev1.LoadRecord{
				{Key: "1001", Value: []byte(`{"widget":{"id":"1001","color":"teal"}}`)},
				{Key: "1002", Value: []byte(`{"widget":{"id":"1002","color":"teal"}}`)},
			}},
			{Records: []*warmcachev1.LoadRecord{
				{Key: "1", Value: []byte(`{"widget":{"id":"1","color":"teal"}}`)},
			}},
		}
		for _, m := range msgs {
			if err := stream.Send(m); err != nil {
				t.Fatal(err)
			}
		}
		res, err := stream.CloseAndRecv()
		if err != nil || res.Records != 3 || res.Inserted != 2 || res.Updated != 1 {
			t.Fatalf("Load = %v, %v; want 3 records, 2 inserted, 1 updated", res, err)
		}
		got, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: "1"})
		if err != nil || !bytes.Contains(got.Item.Value, []byte("teal")) {
			t.Fatalf("Get after Load = %v, %v; want the loaded value", got, err)
		}

		bad, err := c.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := bad.Send(&warmcachev1.LoadRequest{Namespace: "widgets", Records: []*warmcachev1.LoadRecord{
			{Key: "1003", Value: []byte(`{}`)}, {Key: "x", Value: []byte(`{}`)},
		}}); err != nil {
			t.Fatal(err)
		}
		_, err = bad.CloseAndRecv()
		wantCode(t, "Load with a bad key", err, codes.InvalidArgument)
		_, err = c.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: "1003"})
		wantCode(t, "Get of a key from the failed load", err, codes.NotFound)
	})

	t.Run("query", func(t *testing.T) {
		var keys []string
		next := ""
		for page := 0; page < 3; page++ {
			res, err := c.Query(ctx, &warmcachev1.QueryRequest{Namespace: "widgets", Match: []byte(`{"widget":{"color":"teal"}}`), Limit: 2, After: next})
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range res.Items {
				keys = append(keys, it.Key)
			}
			if next = res.Next; next == "" {
				break
			}
		}
		sort.Strings(keys)
		if strings.Join(keys, ",") != "1,1001,1002" {
			t.Fatalf("Query pages = %v, want keys 1, 1001 and 1002", keys)
		}
	})

	t.Run("health", func(t *testing.T) {
		h := healthpb.NewHealthClient(conn)
		for _, name := range []string{"", "warmcache.v1.Cache"} {
			res, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("Check(%q) = %v, %v; want SERVING", name, res, err)
			}
		}
		_, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "other"})
		wantCode(t, "Check of an unknown service", err, codes.NotFound)
	})

	t.Run("reflection", func(t *testing.T) {
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
		}); err != nil {
			t.Fatal(err)
		}
		res, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, svc := range res.GetListServicesResponse().GetService() {
			names = append(names, svc.GetName())
		}
		sort.Strings(names)
		if got := strings.Join(names, " "); !strings.Contains(got, "grpc.health.v1.Health") || !strings.Contains(got, "warmcache.v1.Cache") {
			t.Fatalf("reflection lists %q, want the health and Cache services", got)
		}
		_ = stream.CloseSend()
	})

	t.Run("metrics", func(t *testing.T) {
		r := call(t, "GET", s.http+"/metrics", "")
		for _, want := range []string{
			`warmcache_grpc_request_duration_seconds_count{code="OK",method="/warmcache.v1.Cache/Get"}`,
			`warmcache_grpc_request_duration_seconds_count{code="NotFound",method="/warmcache.v1.Cache/Get"}`,
			`warmcache_grpc_request_duration_seconds_count{code="OK",method="/warmcache.v1.Cache/Load"}`,
		} {
			if !strings.Contains(r.body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// keyFixture is a keys file and the tokens of its keys.
type keyFixture struct {
	path   string
	tokens map[string]string // by key id
}

func writeKeys(t *testing.T) keyFixture {
	t.Helper()
	f := keyFixture{tokens: map[string]string{}}
	keys := []harness.APIKey{
		{ID: "reader", Scopes: "[read]", Namespaces: "[widgets]"},
		{ID: "writer", Scopes: "[read, write]", Namespaces: "[widgets]"},
		{ID: "archivist", Scopes: "[read, write]", Namespaces: "[widgets_archive]"},
		{ID: "limited", Scopes: "[read]", Namespaces: "[widgets]", Extra: "rate: 0.001\nburst: 2"},
	}
	for i, k := range keys {
		f.tokens[k.ID] = k.ID + "-" + testenv.RandomSuffix(t) + testenv.RandomSuffix(t)
		keys[i].Token = f.tokens[k.ID]
	}
	f.path = harness.WriteFile(t, "keys.yaml", harness.KeysYAML(keys...))
	return f
}

func TestAuthMatrix(t *testing.T) {
	keys := writeKeys(t)
	env := seededEnv(t, 10)
	env["WARMCACHE_KEYS_FILE"] = keys.path
	s := startServing(t, env, 2)
	for _, line := range s.lines {
		if strings.Contains(line, "no API keys") {
			t.Fatalf("printed %q with keys configured", line)
		}
	}
	ctx := context.Background()
	c := warmcachev1.NewCacheClient(dialGRPC(t, s.grpc))
	kv := s.http + "/v1/kv/"

	cases := []struct {
		name     string
		token    string
		write    bool
		ns       string
		status   int
		code     string
		grpcCode codes.Code
	}{
		{"no key", "", false, "widgets", 401, "unauthenticated", codes.Unauthenticated},
		{"wrong key", "not-a-key", false, "widgets", 401, "unauthenticated", codes.Unauthenticated},
		{"hash as key", auth.HashToken(keys.tokens["reader"]), false, "widgets", 401, "unauthenticated", codes.Unauthenticated},
		{"read-only key writing", keys.tokens["reader"], true, "widgets", 403, "forbidden", codes.PermissionDenied},
		{"key for another namespace", keys.tokens["archivist"], false, "widgets", 403, "forbidden", codes.PermissionDenied},
		{"key for an unknown namespace", keys.tokens["writer"], false, "nope", 403, "forbidden", codes.PermissionDenied},
		{"valid key reading", keys.tokens["reader"], false, "widgets", 200, "", codes.OK},
		{"valid key writing", keys.tokens["writer"], true, "widgets", 200, "", codes.OK},
	}
	for _, tc := range cases {
		t.Run("rest/"+tc.name, func(t *testing.T) {
			method, body := "GET", ""
			if tc.write {
				method, body = "PUT", `{"by":"rest"}`
			}
			var hdr []string
			if tc.token != "" {
				hdr = []string{"Authorization", "Bearer " + tc.token}
			}
			r := call(t, method, kv+tc.ns+"/3", body, hdr...)
			if r.status != tc.status || (tc.code != "" && errorCode(t, r) != tc.code) {
				t.Fatalf("%s = %d %s, want %d %s", method, r.status, r.body, tc.status, tc.code)
			}
			if tc.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if tc.status >= 400 && (strings.Contains(r.body, "reader") || strings.Contains(r.body, "archivist") || strings.Contains(r.body, "writer")) {
				t.Errorf("error %s names a key", r.body)
			}
		})
		t.Run("grpc/"+tc.name, func(t *testing.T) {
			kctx := withKey(ctx, tc.token)
			var err error
			if tc.write {
				_, err = c.Put(kctx, &warmcachev1.PutRequest{Namespace: tc.ns, Key: "3", Value: []byte(`{"by":"grpc"}`)})
			} else {
				_, err = c.Get(kctx, &warmcachev1.GetRequest{Namespace: tc.ns, Key: "3"})
			}
			wantCode(t, "call", err, tc.grpcCode)
		})
	}

	t.Run("reads need only read scope", func(t *testing.T) {
		hdr := []string{"Authorization", "Bearer " + keys.tokens["reader"]}
		if r := call(t, "POST", kv+"widgets/_mget", `{"keys":[1]}`, hdr...); r.status != 200 {
			t.Fatalf("_mget with a read key = %d %s", r.status, r.body)
		}
		if r := call(t, "POST", kv+"widgets/_query", `{"match":{"widget":{"debug":"on"}},"limit":2}`, hdr...); r.status != 200 {
			t.Fatalf("_query with a read key = %d %s", r.status, r.body)
		}
		if r := call(t, "POST", kv+"widgets/_load", `{"key":1,"value":{}}`, hdr...); r.status != 403 {
			t.Fatalf("_load with a read key = %d %s, want 403", r.status, r.body)
		}
		if r := call(t, "DELETE", kv+"widgets/1", "", hdr...); r.status != 403 {
			t.Fatalf("DELETE with a read key = %d %s, want 403", r.status, r.body)
		}
	})

	t.Run("probes need no key", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
			if r := call(t, "GET", s.http+p, ""); r.status != 200 {
				t.Errorf("%s = %d without a key", p, r.status)
			}
		}
	})

	t.Run("rate limit", func(t *testing.T) {
		token := keys.tokens["limited"]
		hdr := []string{"Authorization", "Bearer " + token}
		if r := call(t, "GET", kv+"widgets/1", "", hdr...); r.status != 200 {
			t.Fatalf("first request = %d %s", r.status, r.body)
		}
		if _, err := c.Get(withKey(ctx, token), &warmcachev1.GetRequest{Namespace: "widgets", Key: "1"}); err != nil {
			t.Fatalf("second request (gRPC): %v", err)
		}
		r := call(t, "GET", kv+"widgets/1", "", hdr...)
		if r.status != 429 || errorCode(t, r) != "rate_limited" || r.header.Get("Retry-After") == "" {
			t.Fatalf("third request = %d %s Retry-After %q, want 429 rate_limited with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
		}
		_, err := c.Get(withKey(ctx, token), &warmcachev1.GetRequest{Namespace: "widgets", Key: "1"})
		wantCode(t, "fourth request (gRPC)", err, codes.ResourceExhausted)
		var retry *errdetails.RetryInfo
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				retry = ri
			}
		}
		if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 {
			t.Fatalf("ResourceExhausted without a RetryInfo delay: %v", status.Convert(err).Details())
		}
		if r := call(t, "GET", kv+"widgets/1", "", "Authorization", "Bearer "+keys.tokens["reader"]); r.status != 200 {
			t.Fatalf("another key after the limit = %d, want 200", r.status)
		}
	})

	t.Run("audit log", func(t *testing.T) {
		log := s.log.String()
		for _, token := range keys.tokens {
			if strings.Contains(log, token) {
				t.Fatalf("the log contains a token:\n%s", log)
			}
		}
		var writes []map[string]any
		for _, line := range strings.Split(log, "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["audit"] == "write" {
				writes = append(writes, rec)
			}
		}
		want := map[string]bool{"http/put/writer/ok": false, "grpc/put/writer/ok": false}
		for _, w := range writes {
			want[fmt.Sprintf("%s/%s/%s/%s", w["transport"], w["op"], w["key_id"], w["result"])] = true
			if w["namespace"] != "widgets" || w["key"] != "3" {
				t.Errorf("audit record %v, want namespace widgets and key 3", w)
			}
		}
		for k, seen := range want {
			if !seen {
				t.Errorf("no audit record %s among %v", k, writes)
			}
		}
	})
}

func TestUnixSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "wc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	httpSock, grpcSock := filepath.Join(dir, "http.sock"), filepath.Join(dir, "grpc.sock")
	// A socket file left behind by an earlier process is replaced.
	stale, err := net.Listen("unix", httpSock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	s := startServing(t, seededEnv(t, 10), 4, "--http-socket", httpSock, "--grpc-socket", grpcSock)
	if s.httpSocket != httpSock || s.grpcSocket != grpcSock {
		t.Fatalf("printed %q, want both sockets", s.lines)
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", httpSock)
		},
	}}
	t.Cleanup(client.CloseIdleConnections)
	res, err := client.Get("http://warmcache/v1/kv/widgets/7")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Contains(body, []byte(`"id": "7"`)) {
		t.Fatalf("GET over the socket = %d %s", res.StatusCode, body)
	}

	c := warmcachev1.NewCacheClient(dialGRPC(t, "unix://"+grpcSock))
	got, err := c.Get(context.Background(), &warmcachev1.GetRequest{Namespace: "widgets", Key: "7"})
	if err != nil || got.Item.Source != "hit" {
		t.Fatalf("gRPC Get over the socket = %v, %v; want a hit after the REST read", got, err)
	}
	fi, err := os.Stat(grpcSock)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode = %v, %v; want 0660", fi.Mode(), err)
	}
}

func TestOpenAccessSaysSoAtStart(t *testing.T) {
	s := startServing(t, seededEnv(t, 1), 3)
	// The notice follows the listener lines, on stdout and in the log.
	if len(s.lines) != 3 || !strings.Contains(s.lines[2], "no API keys configured") ||
		!strings.Contains(s.log.String(), "no API keys configured") {
		t.Fatalf("printed %q, want a notice of unauthenticated serving; log:\n%s", s.lines, s.log)
	}
}

func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSignedCert(t)
	keys := writeKeys(t)
	env := seededEnv(t, 5)
	env["WARMCACHE_KEYS_FILE"] = keys.path
	s := startServing(t, env, 2, "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(s.http, "https://") {
		t.Fatalf("HTTP listener %q, want https", s.http)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(client.CloseIdleConnections)
	req, _ := http.NewRequest("GET", s.http+"/v1/kv/widgets/5", nil)
	req.Header.Set("Authorization", "Bearer "+keys.tokens["reader"])
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET over TLS = %d", res.StatusCode)
	}

	conn := dialGRPC(t, s.grpc, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(pool, "")))
	got, err := warmcachev1.NewCacheClient(conn).Get(withKey(context.Background(), keys.tokens["reader"]), &warmcachev1.GetRequest{Namespace: "widgets", Key: "5"})
	if err != nil || got.Item.Key != "5" {
		t.Fatalf("gRPC Get over TLS = %v, %v", got, err)
	}
	plain := warmcachev1.NewCacheClient(dialGRPC(t, s.grpc))
	_, err = plain.Get(context.Background(), &warmcachev1.GetRequest{Namespace: "widgets", Key: "5"})
	if err == nil {
		t.Fatal("a plaintext gRPC call to the TLS listener succeeded")
	}
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key, and
// returns their paths and a pool that trusts the certificate.
func selfSignedCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "warmcache test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
