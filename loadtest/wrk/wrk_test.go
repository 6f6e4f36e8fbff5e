package wrk_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/loadtest/bench"
	"github.com/warmcache/warmcache/loadtest/wrk"
)

func TestParse(t *testing.T) {
	out := "Running 1s test @ http://127.0.0.1:1\n" +
		"wrk-requests 1000\nwrk-duration-us 2000000\nwrk-errors 10\nwrk-p50-us 300\nwrk-p90-us 900\nwrk-p99-us 2500\nwrk-max-us 9000\n" +
		"wrk-source hit\t900\nwrk-source miss\t90\nwrk-source status 503\t10\n"
	run, err := wrk.Parse(out)
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
	if _, err := wrk.Parse("Running 1s test\nwrk-requests 5\n"); err == nil {
		t.Error("an output without the summary parsed")
	}
}

// TestRun runs the real wrk with the harness's script against a
// server that counts what it is asked: wrk must take the paths in turn,
// send the header, and its summary must match the server's count.
func TestRun(t *testing.T) {
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
	paths := []string{"/v1/kv/widgets/1", "/v1/kv/widgets/2", "/v1/kv/widgets/3"}
	run, err := wrk.Run(context.Background(), wrk.Spec{Scenario: "test", Base: srv.URL, Paths: paths,
		Header: map[string]string{"Authorization": "Bearer t"}, Conns: 4, Duration: time.Second, Dir: t.TempDir()})
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
