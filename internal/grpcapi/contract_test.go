package grpcapi_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/warmcache/warmcache/internal/grpcapi"
	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// contract is the gRPC service over the core and the in-memory tiers,
// served on an in-process connection: the whole call path but the
// servers.
type contract struct {
	client warmcachev1.CacheClient
	hot    *memtier.Hot
	warm   *memtier.Warm
}

func newContract(t *testing.T) *contract {
	t.Helper()
	widgets := &warmcache.Namespace{Name: "widgets", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true}
	blobs := &warmcache.Namespace{Name: "blobs", Table: "blobs", KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutBytes, ValueColumn: "value", VersionColumn: "version", Writable: true}
	c := &contract{hot: memtier.NewHot(nil), warm: memtier.NewWarm()}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	svc, err := warmcache.NewService(c.hot, c.warm, []*warmcache.Namespace{widgets, blobs}, reg, log, warmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	api, err := grpcapi.New(svc, nil, reg, log, grpcapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := api.NewServer()
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
	c.client = warmcachev1.NewCacheClient(conn)
	return c
}

func callContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("status %v (%v), want %v", got, err, code)
	}
}

func TestContractReadWrite(t *testing.T) {
	c := newContract(t)
	ctx := callContext(t)
	get := func(key string) (*warmcachev1.Item, error) {
		resp, err := c.client.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: key})
		return resp.GetItem(), err
	}

	_, err := get("7")
	wantCode(t, err, codes.NotFound)

	put, err := c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "7", Value: []byte(`{"color":"red"}`)})
	if err != nil {
		t.Fatal(err)
	}
	row, _ := c.warm.Row("widgets", "7")
	if string(put.GetItem().GetValue()) != `{"color":"red"}` || put.GetItem().GetVersion() != row.Version || put.GetItem().GetKey() != "7" {
		t.Fatalf("Put = %v, want the value at the row's version %d", put.GetItem(), row.Version)
	}
	it, err := get("007")
	if err != nil || it.GetSource() != "hit" || it.GetVersion() != row.Version || string(it.GetValue()) != `{"color":"red"}` || it.GetKey() != "7" {
		t.Fatalf("Get after Put = %v, %v; want a hit at version %d", it, err, row.Version)
	}

	c.hot.Forget()
	if it, err := get("7"); err != nil || it.GetSource() != "miss" || it.GetVersion() != row.Version {
		t.Fatalf("Get after the cache was lost = %v, %v; want a miss at version %d", it, err, row.Version)
	}
	if it, err := get("7"); err != nil || it.GetSource() != "hit" {
		t.Fatalf("second Get = %v, %v; want a hit", it, err)
	}

	stale := row.Version - 1
	_, err = c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "7", Value: []byte(`2`), ExpectedVersion: &stale})
	wantCode(t, err, codes.FailedPrecondition)
	second, err := c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "7", Value: []byte(`2`), ExpectedVersion: &row.Version})
	if err != nil || second.GetItem().GetVersion() <= row.Version {
		t.Fatalf("Put at the current version = %v, %v; want a newer version", second, err)
	}

	_, err = c.client.Delete(ctx, &warmcachev1.DeleteRequest{Namespace: "widgets", Key: "7", ExpectedVersion: &row.Version})
	wantCode(t, err, codes.FailedPrecondition)
	if _, err := c.client.Delete(ctx, &warmcachev1.DeleteRequest{Namespace: "widgets", Key: "7"}); err != nil {
		t.Fatal(err)
	}
	_, err = get("7")
	wantCode(t, err, codes.NotFound)
	_, err = c.client.Delete(ctx, &warmcachev1.DeleteRequest{Namespace: "widgets", Key: "7"})
	wantCode(t, err, codes.NotFound)

	_, err = get("abc")
	wantCode(t, err, codes.InvalidArgument)
	_, err = c.client.Get(ctx, &warmcachev1.GetRequest{Namespace: "nope", Key: "1"})
	wantCode(t, err, codes.NotFound)
	_, err = c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "1", Value: []byte(`{"a":`)})
	wantCode(t, err, codes.InvalidArgument)
}

func TestContractMGet(t *testing.T) {
	c := newContract(t)
	ctx := callContext(t)
	c.warm.Set("widgets", "1", []byte(`1`), 5)
	c.warm.Set("widgets", "2", []byte(`2`), 6)
	mget := func() *warmcachev1.MGetResponse {
		t.Helper()
		resp, err := c.client.MGet(ctx, &warmcachev1.MGetRequest{Namespace: "widgets", Keys: []string{"2", "1", "3", "02"}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := mget()
	items := resp.GetItems()
	if len(items) != 2 || items[0].GetKey() != "2" || items[0].GetVersion() != 6 || items[1].GetKey() != "1" ||
		string(items[1].GetValue()) != "1" || items[0].GetSource() != "miss" {
		t.Fatalf("MGet items = %v; want 2 then 1, from the warehouse", items)
	}
	if m := resp.GetMissing(); len(m) != 1 || m[0] != "3" {
		t.Fatalf("MGet missing = %v, want [3]", m)
	}
	if n := c.warm.Lookups(); n != 1 {
		t.Errorf("warehouse reads = %d, want one for the three keys", n)
	}
	resp = mget()
	if resp.GetItems()[0].GetSource() != "hit" || c.warm.Lookups() != 1 {
		t.Errorf("second MGet = %v after %d warehouse reads; want hits and no new read", resp.GetItems(), c.warm.Lookups())
	}

	c.warm.SetFailing(true)
	_, err := c.client.MGet(ctx, &warmcachev1.MGetRequest{Namespace: "widgets", Keys: []string{"4"}})
	wantCode(t, err, codes.Unavailable)
	if resp := mget(); len(resp.GetItems()) != 2 {
		t.Errorf("MGet of cached keys with the warehouse down = %v, want both items", resp)
	}
}
