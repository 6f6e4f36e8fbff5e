package bench_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// TestClosedLoopCountsAnswers sends 100 requests, every tenth answered 500,
// and checks what the attack counted of them.
func TestClosedLoopCountsAnswers(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if served.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Cache", "hit")
	}))
	defer srv.Close()
	var sent atomic.Int64
	res := bench.ClosedLoop(context.Background(), srv.Client(), 4, 0, func() *http.Request {
		if sent.Add(1) > 100 {
			return nil
		}
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		return req
	})
	if len(res.Latencies) != 90 || res.Errors != 10 || res.Tags["hit"] != 90 {
		t.Errorf("ClosedLoop counted %d answers, %d errors, tags %v; want 90, 10, hit 90", len(res.Latencies), res.Errors, res.Tags)
	}
	if res.Rate() <= 0 || res.Quantile(0.5) <= 0 || res.Quantile(0.5) > res.Quantile(0.99) {
		t.Errorf("rate %v, p50 %v, p99 %v", res.Rate(), res.Quantile(0.5), res.Quantile(0.99))
	}
}
