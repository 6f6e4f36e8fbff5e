package grpcapi_test

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

// opaqueValues are the values the bytes tests round-trip: each byte
// 0x00-0xFF, 1 MiB of random bytes (the value bound), no bytes, and bytes
// that are not JSON.
func opaqueValues() map[string][]byte { return tiertest.OpaqueValues() }

// TestContractBytes round-trips opaque values through Put, Get and MGet
// of a bytes namespace, with its content type, and checks that it refuses
// queries and loads and that a JSON namespace still refuses what is not
// JSON.
func TestContractBytes(t *testing.T) {
	c := newContract(t)
	ctx := callContext(t)
	values := opaqueValues()
	var keys []string
	for name, v := range values {
		put, err := c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "blobs", Key: name, Value: v})
		if err != nil {
			t.Fatalf("Put %s: %v", name, err)
		}
		if !bytes.Equal(put.GetItem().GetValue(), v) || put.GetContentType() != "application/octet-stream" {
			t.Fatalf("Put %s = %d bytes, %q; want the %d written, application/octet-stream", name, len(put.GetItem().GetValue()), put.GetContentType(), len(v))
		}
		// The write filled the hot tier; the second read comes from the
		// warehouse.
		for _, evict := range []bool{false, true} {
			if evict {
				if _, err := c.client.Invalidate(ctx, &warmcachev1.InvalidateRequest{Namespace: "blobs", Keys: []string{name}}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.client.Get(ctx, &warmcachev1.GetRequest{Namespace: "blobs", Key: name})
			if err != nil {
				t.Fatalf("Get %s: %v", name, err)
			}
			if !bytes.Equal(got.GetItem().GetValue(), v) || got.GetContentType() != "application/octet-stream" {
				t.Fatalf("Get %s (invalidated %v) = %d bytes from %q, %q; want the %d written, application/octet-stream",
					name, evict, len(got.GetItem().GetValue()), got.GetItem().GetSource(), got.GetContentType(), len(v))
			}
		}
		keys = append(keys, name)
	}
	many, err := c.client.MGet(ctx, &warmcachev1.MGetRequest{Namespace: "blobs", Keys: append(keys, "absent")})
	if err != nil {
		t.Fatal(err)
	}
	if len(many.GetItems()) != len(keys) || len(many.GetMissing()) != 1 || many.GetContentType() != "application/octet-stream" {
		t.Fatalf("MGet = %d items, missing %v, %q; want %d, [absent], application/octet-stream",
			len(many.GetItems()), many.GetMissing(), many.GetContentType(), len(keys))
	}
	for _, it := range many.GetItems() {
		if !bytes.Equal(it.GetValue(), values[it.GetKey()]) {
			t.Errorf("MGet %s = %d bytes, want the %d written", it.GetKey(), len(it.GetValue()), len(values[it.GetKey()]))
		}
	}

	_, err = c.client.Query(ctx, &warmcachev1.QueryRequest{Namespace: "blobs", Match: []byte(`{"a":1}`)})
	wantCode(t, err, codes.InvalidArgument)
	stream, err := c.client.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&warmcachev1.LoadRequest{Namespace: "blobs", Records: []*warmcachev1.LoadRecord{{Key: "a", Value: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.CloseAndRecv()
	wantCode(t, err, codes.InvalidArgument)
	_, err = c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "blobs", Key: "big", Value: make([]byte, 1<<20+1)})
	wantCode(t, err, codes.ResourceExhausted)

	_, err = c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "1", Value: []byte{0x00, 0xff}})
	wantCode(t, err, codes.InvalidArgument)
	got, err := c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "1", Value: []byte(`{"a":1}`)})
	if err != nil || got.GetContentType() != "application/json" {
		t.Fatalf("Put into widgets = %q, %v; want application/json", got.GetContentType(), err)
	}
}
