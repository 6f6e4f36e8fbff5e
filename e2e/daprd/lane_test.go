package daprd_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	dapr "github.com/dapr/go-sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/internal/testproc"
)

// TestDaprdFlows drives warmcache through a real daprd, as an application
// does, over the Go SDK (daprd's gRPC API) and daprd's HTTP API: the flows
// docs/dapr.md shows.
func TestDaprdFlows(t *testing.T) {
	s := startStack(t)
	c := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const store = storeWarmcache

	t.Run("save get delete over gRPC", func(t *testing.T) {
		if err := c.SaveState(ctx, store, "order-1", []byte(`{"qty":1}`), nil); err != nil {
			t.Fatalf("SaveState: %v", err)
		}
		it, err := c.GetState(ctx, store, "order-1", nil) // strong: the warehouse
		if err != nil || string(it.Value) != `{"qty":1}` || it.Etag == "" {
			t.Fatalf("GetState = %+v, %v; want the value with an ETag", it, err)
		}
		if src := it.Metadata["warmcache-source"]; src != "miss" {
			t.Errorf("strong GetState came from %q, want the warehouse (miss)", src)
		}
		ev, err := c.GetStateWithConsistency(ctx, store, "order-1", nil, dapr.StateConsistencyEventual)
		if err != nil || ev.Etag != it.Etag || ev.Metadata["warmcache-source"] != "hit" {
			t.Fatalf("eventual GetState = %+v, %v; want a Redis hit at ETag %s", ev, err, it.Etag)
		}
		if err := c.DeleteState(ctx, store, "order-1", nil); err != nil {
			t.Fatalf("DeleteState: %v", err)
		}
		if gone, err := c.GetState(ctx, store, "order-1", nil); err != nil || gone.Value != nil {
			t.Fatalf("GetState after delete = %+v, %v; want empty", gone, err)
		}
	})

	t.Run("etags over gRPC", func(t *testing.T) {
		if err := c.SaveState(ctx, store, "acct", []byte(`10`), nil); err != nil {
			t.Fatal(err)
		}
		v1, err := c.GetState(ctx, store, "acct", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, cc := range []dapr.StateConcurrency{dapr.StateConcurrencyFirstWrite, dapr.StateConcurrencyLastWrite} {
			if err := c.SaveState(ctx, store, "acct", []byte(`20`), nil); err != nil {
				t.Fatal(err)
			}
			err := c.SaveStateWithETag(ctx, store, "acct", []byte(`30`), v1.Etag, nil, dapr.WithConcurrency(cc))
			wantCode(t, "save at a stale ETag", err, codes.Aborted)
			// The Go SDK's DeleteStateWithETag, with its options.
			err = c.DeleteStateWithETag(ctx, store, "acct", &dapr.ETag{Value: v1.Etag}, nil, &dapr.StateOptions{Concurrency: cc})
			wantCode(t, "delete at a stale ETag", err, codes.Aborted)
		}
		err = c.SaveStateWithETag(ctx, store, "acct", []byte(`40`), "not-a-version", nil)
		wantCode(t, "an ETag that is no version", err, codes.InvalidArgument)
		now, err := c.GetState(ctx, store, "acct", nil)
		if err != nil || string(now.Value) != "20" {
			t.Fatalf("after the conflicts GetState = %+v, %v; want 20", now, err)
		}
		if err := c.DeleteStateWithETag(ctx, store, "acct", &dapr.ETag{Value: now.Etag}, nil, nil); err != nil {
			t.Fatalf("delete at the current ETag: %v", err)
		}
	})

	t.Run("bulk and transactions over gRPC", func(t *testing.T) {
		if err := c.SaveBulkState(ctx, store, &dapr.SetStateItem{Key: "b1", Value: []byte("1")}, &dapr.SetStateItem{Key: "b2", Value: []byte("2")}); err != nil {
			t.Fatalf("SaveBulkState: %v", err)
		}
		items, err := c.GetBulkState(ctx, store, []string{"b1", "b2", "missing"}, nil, 2)
		if err != nil || len(items) != 3 {
			t.Fatalf("GetBulkState = %d items, %v; want 3", len(items), err)
		}
		found := map[string]string{}
		for _, it := range items {
			found[it.Key] = string(it.Value)
		}
		if found["b1"] != "1" || found["b2"] != "2" || found["missing"] != "" {
			t.Fatalf("GetBulkState = %v", found)
		}
		b1, _ := c.GetState(ctx, store, "b1", nil)
		if err := c.ExecuteStateTransaction(ctx, store, nil, []*dapr.StateOperation{
			{Type: dapr.StateOperationTypeUpsert, Item: &dapr.SetStateItem{Key: "b1", Value: []byte("11"), Etag: &dapr.ETag{Value: b1.Etag}}},
			{Type: dapr.StateOperationTypeDelete, Item: &dapr.SetStateItem{Key: "b2"}},
		}); err != nil {
			t.Fatalf("transaction: %v", err)
		}
		err = c.ExecuteStateTransaction(ctx, store, nil, []*dapr.StateOperation{
			{Type: dapr.StateOperationTypeUpsert, Item: &dapr.SetStateItem{Key: "b3", Value: []byte("3")}},
			{Type: dapr.StateOperationTypeUpsert, Item: &dapr.SetStateItem{Key: "b1", Value: []byte("12"), Etag: &dapr.ETag{Value: b1.Etag}}},
		})
		if err == nil {
			t.Fatal("a transaction at a stale ETag committed")
		}
		if err := c.DeleteBulkState(ctx, store, []string{"b1", "b3"}, nil); err != nil {
			t.Fatalf("DeleteBulkState: %v", err)
		}
		left, err := c.GetBulkState(ctx, store, []string{"b1", "b2", "b3"}, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range left {
			if it.Value != nil {
				t.Errorf("%s = %q after the deletes; want absent (b3 never committed)", it.Key, it.Value)
			}
		}
	})

	t.Run("ttl over HTTP", func(t *testing.T) {
		if a := s.save(t, store, item{Key: "session", Value: "x", Metadata: map[string]string{"ttlInSeconds": "1"}}); a.status != http.StatusNoContent {
			t.Fatalf("save with ttlInSeconds = %d %s", a.status, a.body)
		}
		if a := s.get(t, store, "session"); a.status != http.StatusOK || a.header.Get("Metadata.ttlexpiretime") == "" {
			t.Fatalf("GET = %d %v; want the item with metadata.ttlExpireTime", a.status, a.header)
		}
		testproc.Eventually(t, 20*time.Second, "the session expired", func() bool {
			return s.get(t, store, "session").status == http.StatusNoContent
		})
	})

	t.Run("query refused like state.postgresql", func(t *testing.T) {
		_, err := c.QueryStateAlpha1(ctx, store, `{"filter":{}}`, nil)
		if err == nil || !strings.Contains(err.Error(), "does not support querying") || strings.Contains(err.Error(), "unknown service") {
			t.Fatalf("QueryStateAlpha1 = %v; want warmcache's refusal", err)
		}
	})

	t.Run("cmd/dapr-example through daprd", func(t *testing.T) {
		bin := testproc.Build(t, "github.com/warmcache/warmcache/cmd/dapr-example")
		cmd := exec.CommandContext(ctx, bin, "-store", store)
		cmd.Env = append(os.Environ(), "DAPR_GRPC_ENDPOINT="+s.GRPC)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "refused") || !strings.Contains(string(out), "deleted") {
			t.Fatalf("dapr-example through daprd: %v\n%s", err, out)
		}
	})

	t.Run("large values", func(t *testing.T) {
		for _, n := range []int{1<<20 + 2, 3 << 20} {
			v := bytes.Repeat([]byte{0xA5}, n)
			if err := c.SaveState(ctx, store, "big", v, nil); err != nil {
				t.Fatalf("SaveState of %d bytes: %v", n, err)
			}
			got, err := c.GetState(ctx, store, "big", nil)
			if err != nil || !bytes.Equal(got.Value, v) {
				t.Fatalf("GetState of the %d-byte value: %d bytes, %v", n, len(got.Value), err)
			}
		}
	})
}

// TestDaprdWarmcacheRestarts stops warmcache under a running daprd: daprd's
// calls fail while it is down, nothing it acknowledged is lost, and daprd
// reconnects to the new process on the same socket without a restart.
func TestDaprdWarmcacheRestarts(t *testing.T) {
	s := startStack(t)
	c := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.SaveState(ctx, storeWarmcache, "kept", []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	s.warmcache.Stop(t, syscall.SIGTERM)
	if _, err := c.GetState(ctx, storeWarmcache, "kept", nil); err == nil {
		t.Fatal("GetState succeeded while warmcache was down")
	}
	// The built-in stores keep serving meanwhile: daprd itself is up.
	if err := c.SaveState(ctx, storePostgres, "kept", []byte("pg"), nil); err != nil {
		t.Fatalf("state.postgresql while warmcache is down: %v", err)
	}
	s.startWarmcache(t)
	testproc.Eventually(t, 60*time.Second, "daprd reaches the restarted warmcache", func() bool {
		it, err := c.GetState(ctx, storeWarmcache, "kept", nil)
		return err == nil && string(it.Value) == "before"
	})
	if err := c.SaveState(ctx, storeWarmcache, "after", []byte("after"), nil); err != nil {
		t.Fatalf("SaveState after the restart: %v", err)
	}
}

// wantCode checks that err carries the gRPC code want.
func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	for e := err; e != nil; e = errors.Unwrap(e) {
		if st, ok := status.FromError(e); ok {
			if st.Code() != want {
				t.Fatalf("%s: %v; want %s", what, err, want)
			}
			return
		}
	}
	t.Fatalf("%s: %v; want a gRPC status %s", what, err, want)
}
