package conformance_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	proto "github.com/dapr/dapr/pkg/proto/components/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/e2e/internal/pluggabletest"
	"github.com/warmcache/warmcache/internal/dapr/pluggable"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

// client is a raw client of the store's services, whose calls name the
// component as daprd does.
type client struct {
	proto.StateStoreClient
	proto.TransactionalStateStoreClient
	proto.TransactionalStoreMultiMaxSizeClient
	conn *grpc.ClientConn
}

func dial(t *testing.T, socket string) client {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return client{proto.NewStateStoreClient(conn), proto.NewTransactionalStateStoreClient(conn),
		proto.NewTransactionalStoreMultiMaxSizeClient(conn), conn}
}

// as names the component of the calls made with the returned context.
func as(ctx context.Context, component string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, pluggable.InstanceHeader, component)
}

// wantETagError checks that err is code with the one "etag" field
// violation by which daprd recognises an ETag error.
func wantETagError(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("%s: %v; want %s", what, err, code)
	}
	d := st.Details()
	if len(d) != 1 {
		t.Fatalf("%s: details %v; want one BadRequest", what, d)
	}
	br, ok := d[0].(*errdetails.BadRequest)
	if !ok || len(br.GetFieldViolations()) != 1 || br.GetFieldViolations()[0].GetField() != "etag" {
		t.Fatalf("%s: details %v; want one field violation on etag", what, d)
	}
}

func set(key, value string, etag *string) *proto.SetRequest {
	r := &proto.SetRequest{Key: key, Value: []byte(value)}
	if etag != nil {
		r.Etag = &proto.Etag{Value: *etag}
	}
	return r
}

func TestStore(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			srv := pluggabletest.Start(t, w.NewDatabase(t))
			c := dial(t, srv.Socket)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ctx = as(ctx, pluggabletest.Component)

			get := func(t *testing.T, key string) *proto.GetResponse {
				t.Helper()
				r, err := c.Get(ctx, &proto.GetRequest{Key: key, Consistency: proto.StateOptions_CONSISTENCY_STRONG})
				if err != nil {
					t.Fatalf("Get %s: %v", key, err)
				}
				return r
			}

			t.Run("error contract", func(t *testing.T) {
				if r := get(t, "app||absent"); r.GetData() != nil || r.GetEtag() != nil {
					t.Fatalf("Get of an absent key = %v; want an empty response", r)
				}
				if _, err := c.Set(ctx, set("app||k", "v1", nil)); err != nil {
					t.Fatal(err)
				}
				v1 := get(t, "app||k").GetEtag().GetValue()
				if _, err := c.Set(ctx, set("app||k", "v2", &v1)); err != nil {
					t.Fatalf("Set at the current ETag: %v", err)
				}
				_, err := c.Set(ctx, set("app||k", "v3", &v1))
				wantETagError(t, "Set at a stale ETag", err, codes.FailedPrecondition)
				bad := "not-a-version"
				_, err = c.Set(ctx, set("app||k", "v3", &bad))
				wantETagError(t, "Set at an invalid ETag", err, codes.InvalidArgument)
				_, err = c.Delete(ctx, &proto.DeleteRequest{Key: "app||k", Etag: &proto.Etag{Value: v1}})
				wantETagError(t, "Delete at a stale ETag", err, codes.FailedPrecondition)
				_, err = c.Delete(ctx, &proto.DeleteRequest{Key: "app||absent", Etag: &proto.Etag{Value: v1}})
				wantETagError(t, "Delete of an absent key at an ETag", err, codes.FailedPrecondition)
				if _, err := c.Delete(ctx, &proto.DeleteRequest{Key: "app||absent"}); err != nil {
					t.Fatalf("Delete of an absent key: %v; want no error", err)
				}
				if got := string(get(t, "app||k").GetData()); got != "v2" {
					t.Fatalf("after the refused writes the value is %q, want v2", got)
				}
			})

			t.Run("bulk etags", func(t *testing.T) {
				keys := []string{"app||b1", "app||b2", "app||b3"}
				var items []*proto.SetRequest
				for _, k := range keys {
					items = append(items, set(k, "first", nil))
				}
				if _, err := c.BulkSet(ctx, &proto.BulkSetRequest{Items: items}); err != nil {
					t.Fatal(err)
				}
				etags := map[string]string{}
				for _, k := range keys {
					etags[k] = get(t, k).GetEtag().GetValue()
				}
				stale := "9000000000000000000" // a version no row has
				e2 := etags[keys[1]]
				_, err := c.BulkSet(ctx, &proto.BulkSetRequest{Items: []*proto.SetRequest{
					set(keys[0], "second", &stale), set(keys[1], "second", &e2),
				}})
				wantETagError(t, "BulkSet with one stale ETag", err, codes.FailedPrecondition)
				if st, _ := status.FromError(err); !strings.Contains(st.Message(), keys[0]) || strings.Contains(st.Message(), keys[1]) {
					t.Errorf("the error %q should name %s only", st.Message(), keys[0])
				}
				if r := get(t, keys[0]); string(r.GetData()) != "first" || r.GetEtag().GetValue() != etags[keys[0]] {
					t.Errorf("%s = %s at %s; want unchanged", keys[0], r.GetData(), r.GetEtag().GetValue())
				}
				if r := get(t, keys[1]); string(r.GetData()) != "second" || r.GetEtag().GetValue() == e2 {
					t.Errorf("%s = %s at %s; want second at a new ETag", keys[1], r.GetData(), r.GetEtag().GetValue())
				}
				e2 = get(t, keys[1]).GetEtag().GetValue()

				_, err = c.BulkDelete(ctx, &proto.BulkDeleteRequest{Items: []*proto.DeleteRequest{
					{Key: keys[0], Etag: &proto.Etag{Value: etags[keys[0]]}},
					{Key: keys[1], Etag: &proto.Etag{Value: stale}},
				}})
				wantETagError(t, "BulkDelete with one stale ETag", err, codes.FailedPrecondition)
				if r := get(t, keys[0]); r.GetData() != nil {
					t.Errorf("%s = %s; want deleted", keys[0], r.GetData())
				}
				if r := get(t, keys[1]); r.GetEtag().GetValue() != e2 {
					t.Errorf("%s at %s; want unchanged at %s", keys[1], r.GetEtag().GetValue(), e2)
				}
				if _, err := c.BulkDelete(ctx, &proto.BulkDeleteRequest{Items: []*proto.DeleteRequest{
					{Key: keys[1], Etag: &proto.Etag{Value: e2}}, {Key: keys[2], Etag: &proto.Etag{Value: etags[keys[2]]}},
				}}); err != nil {
					t.Fatalf("BulkDelete at the current ETags: %v", err)
				}
				got, err := c.BulkGet(ctx, &proto.BulkGetRequest{Items: []*proto.GetRequest{{Key: keys[1]}, {Key: keys[2]}}})
				if err != nil || len(got.GetItems()) != 2 || got.GetItems()[0].GetData() != nil || got.GetItems()[1].GetData() != nil {
					t.Fatalf("BulkGet after the deletes = %v, %v; want two empty items", got, err)
				}

			})

			t.Run("transaction is atomic", func(t *testing.T) {
				stale := "9000000000000000000" // a version no row has
				_, err := c.Transact(ctx, &proto.TransactionalStateRequest{Operations: []*proto.TransactionalStateOperation{
					{Request: &proto.TransactionalStateOperation_Set{Set: set("app||t1", "a", nil)}},
					{Request: &proto.TransactionalStateOperation_Set{Set: set("app||t2", "b", &stale)}},
				}})
				wantETagError(t, "Transact with a stale ETag", err, codes.FailedPrecondition)
				if r := get(t, "app||t1"); r.GetData() != nil {
					t.Fatalf("app||t1 = %s after a failed transaction; want absent", r.GetData())
				}
				// A transaction's own metadata may name any content type:
				// the namespace stores bytes.
				if _, err := c.Transact(ctx, &proto.TransactionalStateRequest{
					Metadata: map[string]string{"contentType": "application/octet-stream"},
					Operations: []*proto.TransactionalStateOperation{
						{Request: &proto.TransactionalStateOperation_Set{Set: set("app||t1", "\x00\xff", nil)}},
					}}); err != nil {
					t.Fatalf("Transact with contentType application/octet-stream: %v", err)
				}
				if r := get(t, "app||t1"); string(r.GetData()) != "\x00\xff" {
					t.Fatalf("app||t1 = %q after the transaction; want its bytes", r.GetData())
				}
				max, err := c.MultiMaxSize(ctx, &proto.MultiMaxSizeRequest{})
				if err != nil || max.GetMaxSize() != int64(srv.Gateway.Service().MaxBatchKeys()) {
					t.Fatalf("MultiMaxSize = %v, %v; want the core's batch bound", max, err)
				}
			})

			t.Run("consistency", func(t *testing.T) {
				if _, err := c.Set(ctx, set("app||c", "v", nil)); err != nil {
					t.Fatal(err)
				}
				strong := get(t, "app||c")
				if src := strong.GetMetadata()["warmcache-source"]; src != "miss" {
					t.Errorf("a strong Get came from %q; want the warehouse (miss)", src)
				}
				ev, err := c.Get(ctx, &proto.GetRequest{Key: "app||c"})
				if err != nil || ev.GetMetadata()["warmcache-source"] != "hit" {
					t.Errorf("an eventual Get = %v, %v; want a cache hit", ev, err)
				}
			})

			t.Run("keys as daprd sends them", func(t *testing.T) {
				req := set("orders||order-1", "\x00\x01\xff", nil)
				req.Metadata = map[string]string{"contentType": "application/octet-stream"}
				if _, err := c.Set(ctx, req); err != nil {
					t.Fatal(err)
				}
				it, err := srv.Gateway.Service().GetLatest(ctx, pluggabletest.Namespace, "orders||order-1")
				if err != nil || string(it.Entry.Value) != "\x00\x01\xff" {
					t.Fatalf("the namespace holds %q, %v under daprd's key; want the bytes as sent", it.Entry.Value, err)
				}
			})

			t.Run("opaque values", func(t *testing.T) {
				for name, v := range tiertest.OpaqueValues() {
					key := "app||opaque-" + name
					if _, err := c.Set(ctx, &proto.SetRequest{Key: key, Value: v}); err != nil {
						t.Fatalf("Set %s (%d bytes): %v", name, len(v), err)
					}
					if got := get(t, key).GetData(); !bytes.Equal(got, v) {
						t.Fatalf("strong Get %s: %d bytes, not the %d sent", name, len(got), len(v))
					}
					for range 2 { // a miss that fills Redis, then a hit
						r, err := c.Get(ctx, &proto.GetRequest{Key: key})
						if err != nil || !bytes.Equal(r.GetData(), v) {
							t.Fatalf("Get %s (%s): %d bytes, %v; want the %d sent", name, r.GetMetadata()["warmcache-source"], len(r.GetData()), err, len(v))
						}
					}
					bulk, err := c.BulkGet(ctx, &proto.BulkGetRequest{Items: []*proto.GetRequest{{Key: key}}})
					if err != nil || len(bulk.GetItems()) != 1 || !bytes.Equal(bulk.GetItems()[0].GetData(), v) {
						t.Fatalf("BulkGet %s: %v; want the %d bytes sent", name, err, len(v))
					}
				}
			})

			t.Run("answers daprd can receive", func(t *testing.T) {
				big := tiertest.OpaqueValues()["1MiB"]
				var items []*proto.GetRequest
				for i := range 5 {
					key := fmt.Sprintf("app||big-%d", i)
					if _, err := c.Set(ctx, &proto.SetRequest{Key: key, Value: big}); err != nil {
						t.Fatal(err)
					}
					items = append(items, &proto.GetRequest{Key: key})
				}
				if r, err := c.BulkGet(ctx, &proto.BulkGetRequest{Items: items[:3]}); err != nil || len(r.GetItems()) != 3 {
					t.Fatalf("BulkGet of 3 MiB = %v; want its items", err)
				}
				_, err := c.BulkGet(ctx, &proto.BulkGetRequest{Items: items})
				if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "daprd receives") {
					t.Fatalf("BulkGet of 5 MiB: %v; want InvalidArgument saying that daprd receives at most %d bytes", err, pluggable.DaprdMaxRecvBytes)
				}
			})

			t.Run("components", func(t *testing.T) {
				bare := context.Background()
				if _, err := c.Init(bare, &proto.InitRequest{}); err != nil {
					t.Errorf("Init without a component name (the default component): %v", err)
				}
				if r, err := c.Get(bare, &proto.GetRequest{Key: "app||c"}); err != nil || string(r.GetData()) != "v" {
					t.Errorf("Get without a component name = %v, %v; want the default component's value", r, err)
				}
				_, err := c.Get(as(bare, "other"), &proto.GetRequest{Key: "app||c"})
				if status.Code(err) != codes.NotFound {
					t.Errorf("Get for an unknown component: %v; want NotFound", err)
				}
				_, err = c.Init(ctx, &proto.InitRequest{Metadata: &proto.MetadataRequest{
					Properties: map[string]string{pluggable.PropertyNamespace: "elsewhere"}}})
				if status.Code(err) != codes.InvalidArgument {
					t.Errorf("Init naming another namespace: %v; want InvalidArgument", err)
				}
				f, err := c.Features(ctx, &proto.FeaturesRequest{})
				if err != nil || !slices.Equal(f.GetFeatures(), []string{"ETAG", "TRANSACTIONAL", pluggable.FeatureTTL}) {
					t.Errorf("Features = %v, %v", f, err)
				}
			})

			t.Run("reflection", func(t *testing.T) {
				stream, err := reflectionpb.NewServerReflectionClient(c.conn).ServerReflectionInfo(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := stream.Send(&reflectionpb.ServerReflectionRequest{
					MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
					t.Fatal(err)
				}
				resp, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, s := range resp.GetListServicesResponse().GetService() {
					names = append(names, s.GetName())
				}
				for _, want := range []string{"dapr.proto.components.v1.StateStore", "dapr.proto.components.v1.TransactionalStateStore"} {
					if !slices.Contains(names, want) {
						t.Errorf("reflection lists %v; want %s, by which daprd discovers the component", names, want)
					}
				}
			})
		})
	}
}
