package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/loadtest/bench"
)

// grpcTarget is a gRPC server under test: a few client connections that
// the workers of an attack share in turn.
type grpcTarget struct {
	conns   []*grpc.ClientConn
	clients []warmcachev1.CacheClient
	token   string
}

// dialGRPC opens n client connections to addr (loopback, plaintext).
func dialGRPC(addr string, n int, token string) (*grpcTarget, error) {
	if err := requireLoopback(addr); err != nil {
		return nil, err
	}
	t := &grpcTarget{token: token}
	for range max(n, 1) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.close()
			return nil, fmt.Errorf("grpc client %s: %w", addr, err)
		}
		t.conns = append(t.conns, cc)
		t.clients = append(t.clients, warmcachev1.NewCacheClient(cc))
	}
	return t, nil
}

func (t *grpcTarget) close() {
	for _, cc := range t.conns {
		_ = cc.Close()
	}
}

// grpcSpec is one gRPC attack: workers call Get in a closed loop, each
// sending its next call when the previous one is answered, for duration.
type grpcSpec struct {
	scenario  string
	target    *grpcTarget
	namespace string
	keys      []int64
	workers   int
	duration  time.Duration
}

// grpcAttack runs spec and summarises it like attack does: throughput
// counts successful calls per second, latencies are exact percentiles over
// every call, and Sources counts the items' source field.
func grpcAttack(ctx context.Context, spec grpcSpec) bench.Run {
	keys := make([]string, len(spec.keys))
	for i, k := range spec.keys {
		keys[i] = strconv.FormatInt(k, 10)
	}
	if spec.target.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+spec.target.token)
	}
	ctx, cancel := context.WithTimeout(ctx, spec.duration+10*time.Second)
	defer cancel()
	var next atomic.Uint64
	results := make([]grpcResult, spec.workers)
	start := time.Now()
	deadline := start.Add(spec.duration)
	var wg sync.WaitGroup
	for w := range spec.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := spec.target.clients[w%len(spec.target.clients)]
			results[w] = grpcWorker(ctx, client, spec.namespace, keys, &next, deadline)
		}()
	}
	wg.Wait()
	return summariseGRPC(spec, results, time.Since(start))
}

// grpcResult is what one worker of a gRPC attack measured.
type grpcResult struct {
	lat     []time.Duration
	ok      uint64
	sources map[string]uint64
	errs    map[string]bool // up to 5 distinct errors
}

// grpcWorker calls Get in a closed loop until deadline, taking the next
// key of keys in turn.
func grpcWorker(ctx context.Context, client warmcachev1.CacheClient, namespace string, keys []string, next *atomic.Uint64, deadline time.Time) grpcResult {
	res := grpcResult{lat: make([]time.Duration, 0, 1<<12), sources: map[string]uint64{}, errs: map[string]bool{}}
	for ctx.Err() == nil {
		t0 := time.Now()
		if !t0.Before(deadline) {
			break
		}
		i := next.Add(1) - 1
		resp, err := client.Get(ctx, &warmcachev1.GetRequest{Namespace: namespace, Key: keys[i%uint64(len(keys))]})
		res.lat = append(res.lat, time.Since(t0))
		if err != nil {
			if len(res.errs) < 5 {
				res.errs[status.Code(err).String()+": "+status.Convert(err).Message()] = true
			}
			continue
		}
		res.ok++
		res.sources[resp.GetItem().GetSource()]++
	}
	return res
}

// summariseGRPC merges the workers' results of spec's attack, which took
// elapsed, into one run.
func summariseGRPC(spec grpcSpec, results []grpcResult, elapsed time.Duration) bench.Run {
	var lat []time.Duration
	var ok uint64
	sources := map[string]uint64{}
	errSet := map[string]bool{}
	for _, r := range results {
		lat = append(lat, r.lat...)
		ok += r.ok
		for s, n := range r.sources {
			sources[s] += n
		}
		for e := range r.errs {
			errSet[e] = true
		}
	}
	var errs []string
	for e := range errSet {
		errs = append(errs, e)
	}
	sort.Strings(errs)
	if len(errs) > 5 {
		errs = errs[:5]
	}
	total := uint64(len(lat))
	run := bench.Run{
		Scenario:       spec.scenario,
		Workers:        spec.workers,
		Duration:       spec.duration,
		Requests:       total,
		KeysPerRequest: 1,
		Latency:        bench.Percentiles(lat),
		Sources:        sources,
		Errors:         errs,
	}
	if elapsed > 0 {
		run.Throughput = float64(ok) / elapsed.Seconds()
	}
	if total > 0 {
		run.Success = float64(ok) / float64(total)
	}
	return run
}
