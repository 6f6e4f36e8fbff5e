package bench_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

func TestParsePgbenchTPS(t *testing.T) {
	out := `pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: lookup.sql
number of clients: 32
latency average = 2.113 ms
initial connection time = 40.497 ms
tps = 15143.285513 (without initial connection time)
`
	tps, err := bench.ParsePgbenchTPS(out)
	if err != nil || tps != 15143.285513 {
		t.Fatalf("ParsePgbenchTPS = %v, %v; want 15143.285513", tps, err)
	}
	if _, err := bench.ParsePgbenchTPS("pgbench: error: connection refused"); err == nil {
		t.Fatal("ParsePgbenchTPS accepted output without a tps line")
	}
}

func TestParsePgbenchLog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		log     string
		want    []time.Duration
		wantErr bool
	}{
		{"unpaced", "0 0 250 0 1700000000 1\n1 0 1200 0 1700000000 2\n",
			[]time.Duration{250 * time.Microsecond, 1200 * time.Microsecond}, false},
		{"paced: lag subtracted", "0 0 900 0 1700000000 1 400\n", []time.Duration{500 * time.Microsecond}, false},
		{"skipped transactions ignored", "0 0 skipped 0 1700000000 1 9000\n0 1 300 0 1700000000 2 0\n", []time.Duration{300 * time.Microsecond}, false},
		{"short line", "0 0 250\n", nil, true},
		{"bad number", "0 0 abc 0 1700000000 1\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bench.ParsePgbenchLog(strings.NewReader(tc.log))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestParseRedisBenchmarkCSV(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","74074.07","0.061","0.016","0.063","0.111","0.143","0.207"
"GET wc:k","80000.00","0.060","0.016","0.055","0.087","0.119","1.783"
`
	rb, err := bench.ParseRedisBenchmarkCSV(out, "GET wc:k")
	if err != nil {
		t.Fatal(err)
	}
	want := bench.RedisBenchmark{RPS: 80000, P50: 55 * time.Microsecond, P95: 87 * time.Microsecond, P99: 119 * time.Microsecond, Max: 1783 * time.Microsecond}
	if rb != want {
		t.Errorf("got %+v, want %+v", rb, want)
	}
	if _, err := bench.ParseRedisBenchmarkCSV(out, "LPUSH"); err == nil {
		t.Error("found a test that is not in the output")
	}
	if _, err := bench.ParseRedisBenchmarkCSV(`"test","rps"`+"\n", "GET"); err == nil {
		t.Error("accepted a header without latency columns")
	}
}

func TestSharesByPackage(t *testing.T) {
	top := `Type: cpu
Showing nodes accounting for 440ms, 89.80% of 490ms total
      flat  flat%   sum%        cum   cum%
     150ms 30.61% 30.61%      150ms 30.61%  internal/runtime/syscall/linux.Syscall6
      20ms  4.08% 34.69%       20ms  4.08%  runtime.futex
      10ms  2.04% 36.73%       80ms 16.33%  github.com/redis/go-redis/v9.(*Client).Process
      10ms  2.04% 38.77%       10ms  2.04%  github.com/redis/go-redis/v9/internal/proto.replyLen
      10ms  2.04% 40.81%       10ms  2.04%  runtime.memmove (inline)
      10ms  2.04% 42.85%       10ms  2.04%  github.com/redis/go-redis/v9.(*baseClient).process
      10ms  2.04% 44.89%       10ms  2.04%  aeshashbody
`
	got := bench.SharesByPackage(top)
	want := []bench.PackageShare{
		{"internal/runtime/syscall/linux", 30.61},
		{"runtime", 8.16},
		{"github.com/redis/go-redis/v9", 4.08},
		{"github.com/redis/go-redis/v9/internal/proto", 2.04},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Package != want[i].Package || got[i].Percent-want[i].Percent > 1e-9 || want[i].Percent-got[i].Percent > 1e-9 {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestSumSamples(t *testing.T) {
	text := `# HELP warmcache_sql_queries_total Warehouse operations.
# TYPE warmcache_sql_queries_total counter
warmcache_sql_queries_total{namespace="widgets",op="lookup",result="ok"} 3
warmcache_sql_queries_total{namespace="widgets",op="lookup_many",result="ok"} 2
warmcache_sql_queries_total{namespace="other",op="lookup",result="ok"} 100
warmcache_sql_queries_total_extra{namespace="widgets"} 50
warmcache_sql_query_duration_seconds_sum{namespace="widgets",op="lookup"} 0.5
`
	for _, tc := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"namespace", map[string]string{"namespace": "widgets"}, 5},
		{"namespace and op", map[string]string{"namespace": "widgets", "op": "lookup"}, 3},
		{"all", nil, 105},
		{"none", map[string]string{"namespace": "nope"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bench.SumSamples(text, "warmcache_sql_queries_total", tc.match); got != tc.want {
				t.Errorf("SumSamples = %g, want %g", got, tc.want)
			}
		})
	}
}

func TestCumulativeShareAndProfiledCores(t *testing.T) {
	top := `Type: cpu
Duration: 4s, Total samples = 1.91s (47.74%)
      flat  flat%   sum%        cum   cum%
         0     0%     0%      1.48s 77.49%  net/http.(*conn).serve
     0.01s  0.52%  0.52%      0.46s 24.08%  github.com/redis/go-redis/v9.(*hooksMixin).processHook (inline)
         0     0%  0.52%      0.46s 24.08%  github.com/redis/go-redis/v9.(*Client).Process
`
	for _, tc := range []struct {
		fn   string
		want float64
		ok   bool
	}{
		{"net/http.(*conn).serve", 77.49, true},
		{"github.com/redis/go-redis/v9.(*hooksMixin).processHook", 24.08, true},
		{"github.com/redis/go-redis/v9.(*Client).Process", 24.08, true},
		{"runtime.gcBgMarkWorker", 0, false},
	} {
		t.Run(tc.fn, func(t *testing.T) {
			got, ok := bench.CumulativeShare(top, tc.fn)
			if got != tc.want || ok != tc.ok {
				t.Errorf("CumulativeShare = %g, %v; want %g, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	if cores, ok := bench.ProfiledCores(top); !ok || math.Abs(cores-0.4774) > 1e-9 {
		t.Errorf("ProfiledCores = %g, %v; want 0.4774, true", cores, ok)
	}
	if _, ok := bench.ProfiledCores("no header"); ok {
		t.Error("ProfiledCores found a header in text without one")
	}
}

func TestParsePgbenchTransactions(t *testing.T) {
	out := "transaction type: lookup.sql\nnumber of transactions actually processed: 123456\nlatency average = 1.0 ms\n"
	n, err := bench.ParsePgbenchTransactions(out)
	if err != nil || n != 123456 {
		t.Fatalf("ParsePgbenchTransactions = %d, %v; want 123456", n, err)
	}
	if _, err := bench.ParsePgbenchTransactions("tps = 5"); err == nil {
		t.Fatal("no error without the count line")
	}
}

func TestAllocTotal(t *testing.T) {
	for _, tc := range []struct {
		top  string
		want float64
		ok   bool
	}{
		{"Showing nodes accounting for 98.02MB, 89.36% of 109.70MB total\n", 109.70 * (1 << 20), true},
		{"Showing nodes accounting for 512kB, 50% of 1024kB total\n", 1024 * 1024, true},
		{"Showing nodes accounting for 1089751, 91.09% of 1196371 total\n", 1196371, true},
		{"Type: alloc_space\n", 0, false},
	} {
		got, ok := bench.AllocTotal(tc.top)
		if ok != tc.ok || math.Abs(got-tc.want) > 1 {
			t.Errorf("AllocTotal(%q) = %g, %v; want %g, %v", tc.top, got, ok, tc.want, tc.ok)
		}
	}
}
