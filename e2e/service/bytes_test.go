package service_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

// bytesNamespaces declares two bytes namespaces, a heap table and, on
// Greenplum, an append-optimized column table with zstd, and a JSON one.
const bytesNamespaces = `namespaces:
  - name: blobs
    key: {type: text}
    value: {layout: bytes, column: body, content_type: image/png}
    writable: true
    managed: true
  - name: blobs_ao
    key: {type: text}
    value: {layout: bytes}
    writable: true
    managed: true
    storage: {appendoptimized: true, orientation: column, compression: zstd}
  - name: docs
    key: {type: text}
    writable: true
    managed: true
`

// surfaceValues are each byte 0x00-0xFF and 1 MiB of random bytes (the
// value bound).
func surfaceValues() map[string][]byte {
	all := tiertest.OpaqueValues()
	return map[string][]byte{"every-byte": all["every-byte"], "1MiB": all["1MiB"]}
}

// bytesSurface writes and reads one bytes namespace's values on one
// surface of the server.
type bytesSurface struct {
	name  string
	write func(t *testing.T, ns, key string, v []byte)
	// read returns the value and the content type it came with.
	read func(t *testing.T, ns, key string) ([]byte, string)
}

// TestBytesEverySurface writes each byte value through each surface (REST,
// gRPC, Dapr over gRPC with the Go SDK) and reads it back through every
// surface (those and Dapr over HTTP) on the real server, on PostgreSQL and
// Greenplum, with Redis in front: each read answers the bytes as written
// and the namespace's content type. A JSON namespace still refuses bytes
// that are not JSON.
func TestBytesEverySurface(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "namespaces.yaml")
			if err := os.WriteFile(file, []byte(bytesNamespaces), 0o600); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"WARMCACHE_POSTGRES_DSN": w.NewDatabase(t), "WARMCACHE_NAMESPACES_FILE": file}
			var out, errOut bytes.Buffer
			if err := run(context.Background(), []string{"migrate", "up"}, env, &out, &errOut); err != nil {
				t.Fatalf("migrate up: %v\n%s%s", err, out.String(), errOut.String())
			}
			env["WARMCACHE_PG_MAX_CONNS"] = "4"
			env["WARMCACHE_REDIS_ADDRS"] = redisAddr
			env["WARMCACHE_REDIS_PREFIX"] = "bytes-" + testenv.RandomSuffix(t) + ":"
			env["WARMCACHE_HOT_TIMEOUT"] = "1s"
			s := startServing(t, env, 5, "--dapr-http-addr", "127.0.0.1:0", "--dapr-grpc-addr", "127.0.0.1:0")
			want := map[string]string{"blobs": "image/png", "blobs_ao": "application/octet-stream"}
			surfaces := bytesSurfaces(t, s, want)
			for ns, contentType := range want {
				for name, v := range surfaceValues() {
					for _, writer := range surfaces {
						if writer.write == nil {
							continue
						}
						key := writer.name + "-" + name
						writer.write(t, ns, key, v)
						for _, reader := range surfaces {
							got, ct := reader.read(t, ns, key)
							if !bytes.Equal(got, v) || ct != contentType {
								t.Fatalf("%s: %s written over %s, read over %s: %d bytes, %q; want the %d written, %q",
									ns, name, writer.name, reader.name, len(got), ct, len(v), contentType)
							}
						}
					}
				}
			}

			r := call(t, "PUT", s.http+"/v1/kv/docs/a", "\x00\xff not json")
			if r.status != http.StatusBadRequest || errorCode(t, r) != "invalid_value" {
				t.Fatalf("PUT of bytes into a JSON namespace = %d %s, want 400 invalid_value", r.status, r.body)
			}
			c := warmcachev1.NewCacheClient(dialGRPC(t, s.grpc))
			_, err := c.Put(context.Background(), &warmcachev1.PutRequest{Namespace: "docs", Key: "a", Value: []byte{0x01}})
			wantCode(t, "gRPC Put of bytes into a JSON namespace", err, codes.InvalidArgument)
			err = daprClient(t, s.daprGRPC).SaveState(context.Background(), "docs", "a", []byte{0x01}, nil)
			wantStatus(t, "Dapr save of bytes into a JSON namespace", err, codes.InvalidArgument, "JSON")
			r = call(t, "POST", s.http+"/v1/kv/blobs/_query", `{"match":{"a":1}}`)
			if r.status != http.StatusBadRequest || errorCode(t, r) != "invalid_value" {
				t.Fatalf("_query of a bytes namespace = %d %s, want 400 invalid_value", r.status, r.body)
			}
		})
	}
}

// bytesSurfaces returns the surfaces of server s; want is the content type
// of each namespace.
func bytesSurfaces(t *testing.T, s served, want map[string]string) []bytesSurface {
	ctx := context.Background()
	c := warmcachev1.NewCacheClient(dialGRPC(t, s.grpc))
	d := daprClient(t, s.daprGRPC)
	httpc := &http.Client{Timeout: 30 * time.Second}
	do := func(t *testing.T, method, url string, body []byte, header ...string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	return []bytesSurface{
		{
			name: "rest",
			write: func(t *testing.T, ns, key string, v []byte) {
				resp, body := do(t, "PUT", s.http+"/v1/kv/"+ns+"/"+key, v, "Content-Type", "application/octet-stream")
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("REST PUT %s/%s = %d %.200s", ns, key, resp.StatusCode, body)
				}
			},
			read: func(t *testing.T, ns, key string) ([]byte, string) {
				resp, body := do(t, "GET", s.http+"/v1/kv/"+ns+"/"+key, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("REST GET %s/%s = %d %.200s", ns, key, resp.StatusCode, body)
				}
				return body, resp.Header.Get("Content-Type")
			},
		},
		{
			name: "rest _mget",
			read: func(t *testing.T, ns, key string) ([]byte, string) {
				resp, body := do(t, "POST", s.http+"/v1/kv/"+ns+"/_mget", fmt.Appendf(nil, `{"keys":[%q]}`, key), "Content-Type", "application/json")
				var got struct {
					Items map[string]string `json:"items"`
				}
				if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("REST _mget %s/%s = %d %.200s (%v)", ns, key, resp.StatusCode, body, err)
				}
				b, err := base64.StdEncoding.DecodeString(got.Items[key])
				if err != nil {
					t.Fatalf("REST _mget %s/%s: %v", ns, key, err)
				}
				// _mget answers JSON, with no type per value.
				return b, want[ns]
			},
		},
		{
			name: "grpc",
			write: func(t *testing.T, ns, key string, v []byte) {
				if _, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: ns, Key: key, Value: v}); err != nil {
					t.Fatalf("gRPC Put %s/%s: %v", ns, key, err)
				}
			},
			read: func(t *testing.T, ns, key string) ([]byte, string) {
				got, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: ns, Key: key})
				if err != nil {
					t.Fatalf("gRPC Get %s/%s: %v", ns, key, err)
				}
				return got.GetItem().GetValue(), got.GetContentType()
			},
		},
		{
			name: "dapr-grpc",
			write: func(t *testing.T, ns, key string, v []byte) {
				if err := d.SaveState(ctx, ns, key, v, map[string]string{"contentType": "application/octet-stream"}); err != nil {
					t.Fatalf("Dapr SaveState %s/%s: %v", ns, key, err)
				}
			},
			read: func(t *testing.T, ns, key string) ([]byte, string) {
				it, err := d.GetState(ctx, ns, key, nil)
				if err != nil {
					t.Fatalf("Dapr GetState %s/%s: %v", ns, key, err)
				}
				return it.Value, it.Metadata["contentType"]
			},
		},
		{
			name: "dapr-http",
			read: func(t *testing.T, ns, key string) ([]byte, string) {
				resp, body := do(t, "GET", s.daprHTTP+"/v1.0/state/"+ns+"/"+key, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("Dapr HTTP GET %s/%s = %d %.200s", ns, key, resp.StatusCode, body)
				}
				return body, resp.Header.Get("Content-Type")
			},
		},
	}
}
