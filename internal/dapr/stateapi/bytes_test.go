package stateapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonv1 "github.com/dapr/dapr/pkg/proto/common/v1"
	runtimev1 "github.com/dapr/dapr/pkg/proto/runtime/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/warmcache/warmcache/internal/dapr/stateapi"
	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

// surfaces are both Dapr transports over one service on the in-memory
// tiers, with a bytes namespace "blobs" (content type image/png) and a
// JSON namespace "docs".
type surfaces struct {
	http http.Handler
	grpc runtimev1.DaprClient
}

func newSurfaces(t *testing.T) *surfaces {
	t.Helper()
	blobs := &warmcache.Namespace{Name: "blobs", Table: "blobs", KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutBytes, ValueColumn: "value", VersionColumn: "version", Writable: true, ContentType: "image/png"}
	docs := &warmcache.Namespace{Name: "docs", Table: "docs", KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true}
	log := slog.New(slog.DiscardHandler)
	svc, err := warmcache.NewService(memtier.NewHot(nil), memtier.NewWarm(), []*warmcache.Namespace{blobs, docs},
		prometheus.NewRegistry(), log, warmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(4 << 20)
	srv := stateapi.NewGRPC(svc, nil, log).NewServer()
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return &surfaces{http: stateapi.NewHTTP(svc, log, stateapi.HTTPOptions{MaxBodyBytes: 4 << 20}), grpc: runtimev1.NewDaprClient(conn)}
}

// do serves one HTTP request.
func (s *surfaces) do(method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	w := httptest.NewRecorder()
	s.http.ServeHTTP(w, req)
	return w
}

func opaqueValues() map[string][]byte {
	v := tiertest.OpaqueValues()
	delete(v, "empty")
	delete(v, "text")
	// The values of Dapr's own conformance suite.
	v["one"], v["text"] = []byte{0x1}, []byte("testValue1")
	return v
}

// TestBytesRoundTrip saves opaque values over Dapr's gRPC API, under
// contentTypes that a JSON namespace refuses, and reads them back over
// gRPC (single and bulk) and HTTP (single, and bulk as base64), each with
// the namespace's content type.
func TestBytesRoundTrip(t *testing.T) {
	s := newSurfaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	values := opaqueValues()
	var keys []string
	for name, v := range values {
		_, err := s.grpc.SaveState(ctx, &runtimev1.SaveStateRequest{StoreName: "blobs", States: []*commonv1.StateItem{
			{Key: name, Value: v, Metadata: map[string]string{"contentType": "application/octet-stream"}},
		}})
		if err != nil {
			t.Fatalf("SaveState %s: %v", name, err)
		}
		got, err := s.grpc.GetState(ctx, &runtimev1.GetStateRequest{StoreName: "blobs", Key: name})
		if err != nil || !bytes.Equal(got.GetData(), v) || got.GetMetadata()["contentType"] != "image/png" {
			t.Fatalf("GetState %s = %d bytes, %v, %v; want the %d saved, contentType image/png", name, len(got.GetData()), got.GetMetadata(), err, len(v))
		}
		w := s.do(http.MethodGet, "/v1.0/state/blobs/"+name+"?metadata.contentType=text/plain", "")
		if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), v) || w.Header().Get("Content-Type") != "image/png" {
			t.Fatalf("HTTP GET %s = %d, %d bytes, %q; want 200, the %d saved, image/png", name, w.Code, w.Body.Len(), w.Header().Get("Content-Type"), len(v))
		}
		keys = append(keys, name)
	}
	bulk, err := s.grpc.GetBulkState(ctx, &runtimev1.GetBulkStateRequest{StoreName: "blobs", Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range bulk.GetItems() {
		if !bytes.Equal(it.GetData(), values[it.GetKey()]) {
			t.Errorf("GetBulkState %s = %d bytes, want %d", it.GetKey(), len(it.GetData()), len(values[it.GetKey()]))
		}
	}
	body, _ := json.Marshal(map[string]any{"keys": keys})
	w := s.do(http.MethodPost, "/v1.0/state/blobs/bulk", string(body))
	var items []struct {
		Key      string            `json:"key"`
		Data     string            `json:"data"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &items); err != nil || len(items) != len(keys) {
		t.Fatalf("HTTP bulk = %d items, %v; body %.200s", len(items), err, w.Body)
	}
	for _, it := range items {
		b, err := base64.StdEncoding.DecodeString(it.Data)
		if err != nil || !bytes.Equal(b, values[it.Key]) || it.Metadata["contentType"] != "image/png" {
			t.Errorf("HTTP bulk %s = %d bytes (%v), %v; want the base64 of the %d saved, image/png", it.Key, len(b), err, it.Metadata, len(values[it.Key]))
		}
	}
}

// TestBytesOverHTTPSaves saves over Dapr's HTTP API, whose values are
// JSON: a bytes namespace stores each value's JSON text under any
// contentType, and a JSON namespace still refuses a contentType that is
// not JSON.
func TestBytesOverHTTPSaves(t *testing.T) {
	s := newSurfaces(t)
	w := s.do(http.MethodPost, "/v1.0/state/blobs", `[{"key":"a","value":"aGVsbG8=","metadata":{"contentType":"application/octet-stream"}},{"key":"b","value":{"x":1}}]`)
	if w.Code != http.StatusNoContent {
		t.Fatalf("HTTP save into bytes = %d %s, want 204", w.Code, w.Body)
	}
	for key, want := range map[string]string{"a": `"aGVsbG8="`, "b": `{"x":1}`} {
		w = s.do(http.MethodGet, "/v1.0/state/blobs/"+key, "")
		if w.Code != http.StatusOK || w.Body.String() != want {
			t.Errorf("HTTP GET %s = %d %q, want %q", key, w.Code, w.Body, want)
		}
	}
	w = s.do(http.MethodPost, "/v1.0/state/docs", `[{"key":"a","value":"x","metadata":{"contentType":"application/octet-stream"}}]`)
	if w.Code < 400 || w.Code > 499 {
		t.Fatalf("HTTP save into JSON with contentType octet-stream = %d %s, want a 4xx", w.Code, w.Body)
	}
}

// TestJSONNamespaceRefusesBytes saves bytes that are not JSON into a JSON
// namespace over gRPC: refused, as before.
func TestJSONNamespaceRefusesBytes(t *testing.T) {
	s := newSurfaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.grpc.SaveState(ctx, &runtimev1.SaveStateRequest{StoreName: "docs", States: []*commonv1.StateItem{{Key: "a", Value: []byte{0x1}}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("SaveState of 0x01 into a JSON namespace = %v, want InvalidArgument", err)
	}
	_, err = s.grpc.SaveState(ctx, &runtimev1.SaveStateRequest{StoreName: "docs", States: []*commonv1.StateItem{
		{Key: "a", Value: []byte(`{"a":1}`), Metadata: map[string]string{"contentType": "application/octet-stream"}},
	}})
	if status.Code(err) == codes.OK {
		t.Fatal("SaveState with contentType application/octet-stream into a JSON namespace succeeded")
	}
}
