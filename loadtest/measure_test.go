package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/loadtest/bench"
	"sync"
)

func TestParseProcStat(t *testing.T) {
	// The command name holds a space and a parenthesis, as a process title
	// may; utime 150 and stime 50 ticks are 2s of CPU.
	line := "4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 100 0 0 0 150 50 7 3 20 0 4 0 12345 0 0\n"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 17 || st.cpu != 2*time.Second {
		t.Errorf("parseProcStat = %+v, want ppid 17, cpu 2s", st)
	}
	if _, err := parseProcStat([]byte("4242 (x) S 1")); err == nil {
		t.Error("a truncated line parsed")
	}
}

func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 1111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:18EB 0100007F:9C40 01 00000000:00000000 00:00000000 00000000   999        0 2222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3333 1 0000000000000000 100 0 0 10 0
`
	// Port 6379 is 0x18EB: only its LISTEN row counts, not the connection.
	if got := listeningInodes([]byte(table), 6379); !slices.Equal(got, []string{"1111"}) {
		t.Errorf("listeningInodes(6379) = %q, want [1111]", got)
	}
	if got := listeningInodes([]byte(table), 5432); len(got) != 0 {
		t.Errorf("listeningInodes(5432) = %q, want none", got)
	}
}

func TestListenerPIDFindsThisProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, err := listenerPID(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if pid != os.Getpid() {
		t.Errorf("listenerPID = %d, want this process %d", pid, os.Getpid())
	}
}

func TestBackendServes(t *testing.T) {
	for _, tc := range []struct {
		title string
		want  bool
	}{
		{"postgres: postgres warmcache_bench 127.0.0.1(41312) idle", true},
		{"postgres: postgres warmcache_bench_other 127.0.0.1(41312) idle", false},
		{"postgres: postgres postgres 127.0.0.1(41274) SELECT", false},
		{"postgres: checkpointer ", false},
		{"/usr/lib/postgresql/15/bin/postgres\x00-D\x00warmcache_bench\x00", false},
	} {
		if got := backendServes([]byte(tc.title), "warmcache_bench"); got != tc.want {
			t.Errorf("backendServes(%q) = %v, want %v", tc.title, got, tc.want)
		}
	}
}

func TestChildPIDs(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	if kids := childPIDs(os.Getpid()); !slices.Contains(kids, cmd.Process.Pid) {
		t.Errorf("childPIDs = %v, want it to hold %d", kids, cmd.Process.Pid)
	}
}

// TestCPUMeterCountsWorkInTheWindow burns CPU in this process until
// /proc shows at least 50ms more, and checks that a window around it
// counts at least that much for the group and nothing for an idle one.
func TestCPUMeterCountsWorkInTheWindow(t *testing.T) {
	idle := exec.Command("sleep", "30")
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = idle.Process.Kill()
		_ = idle.Wait()
	}()
	m := &cpuMeter{interval: 10 * time.Millisecond, groups: []cpuGroup{pidGroup("self", os.Getpid()), pidGroup("idle", idle.Process.Pid)}}
	before, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	w := m.start()
	x := uint64(1)
	for i := 0; i < 1e10; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		if i%(1<<20) == 0 {
			if st, err := readProcStat(os.Getpid()); err == nil && st.cpu-before.cpu >= 50*time.Millisecond {
				break
			}
		}
	}
	used, wall := w.stop()
	if used["self"] < 50*time.Millisecond {
		t.Errorf("self used %s in the window (x %d), want at least 50ms", used["self"], x)
	}
	if used["idle"] != 0 {
		t.Errorf("an idle sleep used %s", used["idle"])
	}
	if wall <= 0 {
		t.Errorf("wall %s", wall)
	}
}

// TestMiddlewareFloorRunsTheServiceMiddleware serves the middleware floor
// and checks that its route answers the constant body and that the
// service's request metrics counted it under the route's pattern.
func TestMiddlewareFloorRunsTheServiceMiddleware(t *testing.T) {
	body := floorBody(460)
	h, err := newMiddlewareFloorHandler(body, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ts := newTargetSet(srv.URL, "")
	targets := ts.floorGets([]int64{42})
	resp, err := http.Get(targets[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != string(body) || resp.Header.Get("X-Cache") != "floor" {
		t.Fatalf("GET %s: status %d, X-Cache %q, %d bytes", targets[0].URL, resp.StatusCode, resp.Header.Get("X-Cache"), len(got))
	}
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	n := bench.SumSamples(string(metrics), "warmcache_http_request_duration_seconds_count", map[string]string{"route": "/v1/kv/{namespace}" + floorMWRoute, "status": "2xx"})
	if n != 1 {
		t.Errorf("the service's metrics counted %g requests of the floor route, want 1:\n%s", n, metrics)
	}
	// The service's own routes are there too: an unknown one answers the
	// service's error body.
	resp, err = http.Get(srv.URL + "/nowhere")
	if err != nil {
		t.Fatal(err)
	}
	errBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(errBody), `"no_route"`) {
		t.Errorf("GET /nowhere: %d %s", resp.StatusCode, errBody)
	}
}

// TestGRPCAttackOnTheFloor runs a short gRPC attack on the gRPC floor and
// checks what it counts.
func TestGRPCAttackOnTheFloor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	warmcachev1.RegisterCacheServer(s, &grpcFloor{body: floorBody(460)})
	go func() { _ = s.Serve(ln) }()
	defer s.Stop()
	target, err := dialGRPC(ln.Addr().String(), 2, "")
	if err != nil {
		t.Fatal(err)
	}
	defer target.close()
	run := grpcAttack(context.Background(), grpcSpec{scenario: bench.GRPCFloor, target: target, namespace: "widgets", keys: []int64{1, 2, 3}, workers: 3, duration: 200 * time.Millisecond})
	if run.Requests == 0 || run.Success != 1 || run.Sources["floor"] != run.Requests || uint64(run.Latency.Count) != run.Requests || len(run.Errors) > 0 {
		t.Errorf("run = %+v", run)
	}
	if _, err := dialGRPC("10.0.0.1:9090", 1, ""); err == nil {
		t.Error("dialGRPC accepted a non-loopback address")
	}
}

func TestParseWrk(t *testing.T) {
	out := "Running 1s test @ http://127.0.0.1:1\n" +
		"wrk-requests 1000\nwrk-duration-us 2000000\nwrk-errors 10\nwrk-p50-us 300\nwrk-p90-us 900\nwrk-p99-us 2500\nwrk-max-us 9000\n" +
		"wrk-source hit\t900\nwrk-source miss\t90\nwrk-source status 503\t10\n"
	run, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if run.Requests != 1000 || run.Throughput != 495 || run.Success != 0.99 {
		t.Errorf("requests %d throughput %g success %g, want 1000, 495 (990 answered in 2 s), 0.99", run.Requests, run.Throughput, run.Success)
	}
	if run.Latency.P99 != 2500*time.Microsecond || run.Latency.Max != 9*time.Millisecond || run.Latency.Count != 1000 {
		t.Errorf("latency %+v", run.Latency)
	}
	if run.Sources["hit"] != 900 || run.Sources["miss"] != 90 || run.Sources["status 503"] != 10 || len(run.Errors) != 1 {
		t.Errorf("sources %v errors %v", run.Sources, run.Errors)
	}
	if _, err := parseWrk("Running 1s test\nwrk-requests 5\n"); err == nil {
		t.Error("an output without the summary parsed")
	}
}

// TestWrkAttack runs the real wrk with the harness's script against a
// server that counts what it is asked: wrk must take the paths in turn,
// send the header, and its summary must match the server's count.
func TestWrkAttack(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		testenv.Unavailable(t, "wrk is not installed (make install installs it): %v", err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var total int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		total++
		if r.Header.Get("Authorization") == "Bearer t" {
			seen[r.URL.Path]++
		}
		mu.Unlock()
		w.Header().Set("X-Cache", "hit")
		_, _ = w.Write([]byte("{}"))
	}))
	defer srv.Close()
	h := &harness{opts: options{ArtifactDir: t.TempDir()}}
	paths := []string{"/v1/kv/widgets/1", "/v1/kv/widgets/2", "/v1/kv/widgets/3"}
	run, err := h.wrkAttack(context.Background(), "test", srv.URL, paths, map[string]string{"Authorization": "Bearer t"}, 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if run.Requests == 0 || run.Sources["hit"] != run.Requests || run.Success != 1 {
		t.Fatalf("wrk: %d requests, sources %v, success %g", run.Requests, run.Sources, run.Success)
	}
	// wrk counts the requests answered before the end; the server may have
	// seen a few more in flight.
	if uint64(total) < run.Requests || uint64(total) > run.Requests+4 {
		t.Errorf("wrk reported %d requests, the server answered %d", run.Requests, total)
	}
	for _, p := range paths {
		if seen[p] < total/3-4 {
			t.Errorf("path %s asked for %d times of %d, with the header: %v", p, seen[p], total, seen)
		}
	}
	if run.CPU == nil || run.CPU.Used[bench.ProcLoad] <= 0 {
		t.Errorf("wrk's CPU was not measured: %+v", run.CPU)
	}
}
