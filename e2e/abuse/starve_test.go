package abuse

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
)

// TestStarvation holds 16 idle REST _loads and 16 idle gRPC Load streams
// open, and floods /readyz and the gRPC health check, while another client
// reads cold keys and writes: its GETs and PUTs must all succeed with a
// p99 within 100 ms of the same workload on the quiet server, measured in
// this test, and /readyz must stay ready throughout.
func TestStarvation(t *testing.T) {
	s := startServer(t)
	const rows = 4000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO widgets (key, value, version)
		SELECT g, jsonb_build_object('id', g, 'name', 'widget ' || g), nextval('warmcache_version_seq')
		FROM generate_series(1, $1) g`, rows)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// workload reads cold keys from first on and writes keys above rows,
	// with 4 clients, n operations each, and returns every latency.
	workload := func(first, n int) ([]time.Duration, error) {
		var mu sync.Mutex
		var lat []time.Duration
		var failed error
		var wg sync.WaitGroup
		for c := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					key := first + c*n + i
					method, path, body := "GET", fmt.Sprintf("/v1/kv/widgets/%d", key), ""
					if i%2 == 1 {
						method, path, body = "PUT", fmt.Sprintf("/v1/kv/widgets/%d", rows+key), `{"written":true}`
					}
					req, _ := http.NewRequest(method, s.http+path, strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+tokenWriter)
					start := time.Now()
					res, err := s.client.Do(req)
					d := time.Since(start)
					if err == nil {
						res.Body.Close()
						if res.StatusCode != 200 {
							err = fmt.Errorf("%s %s: %d", method, path, res.StatusCode)
						}
					}
					mu.Lock()
					lat = append(lat, d)
					if err != nil && failed == nil {
						failed = err
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return lat, failed
	}
	// Quiet and loaded runs alternate, so that whatever else the machine
	// does weighs on both alike; the p99s are over all rounds. A measure
	// over the bound is taken once more, for a burst of the machine's
	// other work: starvation (the pool held by idle loads or probes) fails
	// every attempt, with errors or latencies of seconds.
	const rounds, perClient, attempts = 4, 40, 2
	var probes, notReady atomic.Int64
	key := 1
	measure := func() (pq, pl time.Duration) {
		var quiet, loaded []time.Duration
		var flooding time.Duration
		before := probes.Load()
		for round := range rounds {
			lat, err := workload(key, perClient)
			key += 4 * perClient
			if err != nil {
				t.Fatalf("round %d, quiet: %v", round, err)
			}
			quiet = append(quiet, lat...)

			stop := s.abuse(t, &probes, &notReady)
			start := time.Now()
			lat, err = workload(key, perClient)
			key += 4 * perClient
			flooding += time.Since(start)
			stop()
			if err != nil {
				t.Fatalf("round %d: another client's reads and writes under idle loads and a probe flood: %v", round, err)
			}
			loaded = append(loaded, lat...)
		}
		pq, pl = p99(quiet), p99(loaded)
		n := probes.Load() - before
		t.Logf("cold GET and PUT p99: quiet %v; with 16+16 idle loads and %d readiness probes (about %.0f/s) %v",
			pq.Round(time.Microsecond), n, float64(n)/flooding.Seconds(), pl.Round(time.Microsecond))
		return pq, pl
	}
	for attempt := 1; ; attempt++ {
		pq, pl := measure()
		if pl <= pq+100*time.Millisecond {
			break
		}
		if attempt == attempts {
			t.Errorf("p99 %v under idle loads and probes, more than 100ms over the quiet %v, in %d measures", pl, pq, attempts)
			break
		}
	}
	if n := notReady.Load(); n > 0 {
		t.Errorf("%d of %d readiness probes were not ready", n, probes.Load())
	}
	// No idle load wrote anything.
	for _, k := range []int{900000, 950000} {
		if r := s.do(t, "GET", fmt.Sprintf("/v1/kv/widgets/%d", k), tokenWriter, nil); r.status != 404 {
			t.Errorf("key %d of an idle load: %d, want 404", k, r.status)
		}
	}
}

// abuse opens 16 idle REST _loads and 16 idle gRPC Load streams and starts
// a flood of readiness probes over both transports, counting the probes
// and those not ready; the function it returns ends them all.
func (s *server) abuse(t *testing.T, probes, notReady *atomic.Int64) (stop func()) {
	t.Helper()
	// 16 idle REST loads: headers and one line of a body announced as 1 MB,
	// then nothing.
	var idle []net.Conn
	for i := range 16 {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.http, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		line := fmt.Sprintf(`{"key":%d,"value":{"idle":true}}`+"\n", 900000+i)
		fmt.Fprintf(c, "POST /v1/kv/widgets/_load HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/x-ndjson\r\nContent-Length: 1000000\r\n\r\n%s", tokenWriter, line)
	}
	// 16 idle gRPC Load streams: a first message, then nothing.
	gc := s.grpcConn(t)
	streamCtx, stopStreams := context.WithCancel(withToken(context.Background(), tokenWriter))
	for i := range 16 {
		stream, err := gc.Load(streamCtx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&warmcachev1.LoadRequest{Namespace: "widgets", Records: []*warmcachev1.LoadRecord{{Key: fmt.Sprint(950000 + i), Value: []byte(`1`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// A flood of readiness probes over both transports: 6 clients, each
	// probing every probeEvery, a few hundred probes a second
	// where the kubelet sends one every few seconds. (Unpaced, the flood's
	// own client and the server's HTTP handling take the 2 cores of the
	// test machine, and the latency measured is the CPU's run queue.)
	floodCtx, stopFlood := context.WithCancel(context.Background())
	var flooding sync.WaitGroup
	probeClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	// flood runs n clients that each call probe every probeEvery until the
	// flood stops, counting the probes and those that found it not ready.
	flood := func(n int, probe func() (ready bool)) {
		for range n {
			flooding.Go(func() {
				tick := time.NewTicker(probeEvery)
				defer tick.Stop()
				for floodCtx.Err() == nil {
					<-tick.C
					ready := probe()
					probes.Add(1)
					if !ready {
						notReady.Add(1)
					}
				}
			})
		}
	}
	flood(4, func() bool {
		res, err := probeClient.Get(s.http + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	hc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	health := healthpb.NewHealthClient(hc)
	flood(2, func() bool {
		res, err := health.Check(floodCtx, &healthpb.HealthCheckRequest{Service: "warmcache.v1.Cache"})
		// A check cut off by the flood's end is not a failure.
		return floodCtx.Err() != nil || (err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING)
	})
	time.Sleep(300 * time.Millisecond) // let the loads and probes take whatever they hold
	return func() {
		stopFlood()
		flooding.Wait()
		hc.Close()
		stopStreams()
		for _, c := range idle {
			c.Close()
		}
		probeClient.CloseIdleConnections()
	}
}

// probeEvery paces each client of the readiness flood.
const probeEvery = 25 * time.Millisecond

func p99(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[(len(d)*99)/100]
}
