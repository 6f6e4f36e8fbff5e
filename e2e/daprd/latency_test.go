package daprd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	proto "github.com/dapr/dapr/pkg/proto/components/v1"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/testenv"
)

// BenchmarkLowRateGet takes apart the latency of a Dapr GET at a rate far
// below saturation: each path below is sent open-loop at lowRate requests
// a second for lowRateFor, one path after the other, in alternating
// rounds, and the p50 and p90 of each are reported in µs (b.N is
// ignored; run it with -benchtime 1x):
//
//   - daprd-warmcache, daprd-redis: a GET over daprd's HTTP API of a key
//     stored in warmcache (a Redis hit) and in state.redis;
//   - socket-get: the call daprd makes for the first, sent straight to
//     warmcache's socket: the component's gRPC, its read and Redis;
//   - socket-ping: the component's Ping on the same socket: its gRPC
//     alone, the floor of socket-get;
//   - redis-get: one GET of a value of the same size from the same Redis.
//
// So socket-get less socket-ping less redis-get is what warmcache's read
// path adds to a Redis round trip, and daprd-warmcache less socket-get
// against daprd-redis less redis-get is what daprd's call of a pluggable
// component costs beyond its built-in store's.
func BenchmarkLowRateGet(b *testing.B) {
	const (
		lowRate    = 1000
		lowRateFor = 3 * time.Second
		keys       = 100
		rounds     = 2
	)
	s := startStack(b)
	value := []byte(`{"order":1,"customer":"customer-000001","items":[{"sku":"sku-0001","qty":1}],"status":"paid","note":"dapr bench value"}`)
	for _, store := range []string{storeWarmcache, storeRedis} {
		items := make([]item, keys)
		for i := range items {
			items[i] = item{Key: fmt.Sprint("k", i), Value: jsonRaw(value)}
		}
		if a := s.save(b, store, items...); a.status != http.StatusNoContent {
			b.Fatalf("save to %s: %s", store, a.summary())
		}
		for i := range keys { // the first read of warmcache's keys fills Redis
			if a := s.call(b, http.MethodGet, fmt.Sprint("/v1.0/state/", store, "/k", i), nil); a.status != http.StatusOK {
				b.Fatalf("get from %s: %s", store, a.summary())
			}
		}
	}
	conn, err := grpc.NewClient("unix://"+s.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	component := proto.NewStateStoreClient(conn)
	callCtx := metadata.AppendToOutgoingContext(context.Background(), "x-component-instance", storeWarmcache)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b)})
	defer rdb.Close()
	probe := s.Prefix + "-probe"
	if err := rdb.Set(context.Background(), probe, value, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	defer rdb.Del(context.Background(), probe)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	daprGet := func(store string) func(int) error {
		return func(i int) error {
			resp, err := client.Get(fmt.Sprint(s.HTTP, "/v1.0/state/", store, "/k", i%keys))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: status %d", store, resp.StatusCode)
			}
			return nil
		}
	}
	harness.CompareAtRate(b, lowRate, lowRateFor, rounds, []harness.RatePath{
		{Name: "daprd-warmcache", Do: daprGet(storeWarmcache)},
		{Name: "daprd-redis", Do: daprGet(storeRedis)},
		{Name: "socket-get", Do: func(i int) error {
			resp, err := component.Get(callCtx, &proto.GetRequest{Key: fmt.Sprint(s.Prefix, "||k", i%keys)})
			if err == nil && len(resp.GetData()) == 0 {
				err = fmt.Errorf("socket get of k%d: no data", i%keys)
			}
			return err
		}},
		{Name: "socket-ping", Do: func(int) error {
			_, err := component.Ping(callCtx, &proto.PingRequest{})
			return err
		}},
		{Name: "redis-get", Do: func(int) error { return rdb.Get(context.Background(), probe).Err() }},
	})
}

// jsonRaw is a JSON value sent as it is.
type jsonRaw []byte

func (j jsonRaw) MarshalJSON() ([]byte, error) { return j, nil }
