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
	"github.com/warmcache/warmcache/loadtest/bench"
)

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
	if kids := bench.Children(os.Getpid()); !slices.Contains(kids, cmd.Process.Pid) {
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
	// The window starts before the loop's own reading, so that whatever the
	// loop counts (in /proc's ticks of 10 ms) is inside the window.
	w := m.start()
	before, err := bench.ReadProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := uint64(1)
	for i := 0; i < 1e10; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		if i%(1<<20) == 0 {
			if st, err := bench.ReadProcStat(os.Getpid()); err == nil && st.CPU-before.CPU >= 50*time.Millisecond {
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
