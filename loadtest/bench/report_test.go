package bench_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

func TestPercentiles(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var hundred []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		hundred = append(hundred, ms(i))
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want bench.Latency
	}{
		{"empty", nil, bench.Latency{}},
		{"one", []time.Duration{ms(7)}, bench.Latency{P50: ms(7), P90: ms(7), P99: ms(7), Max: ms(7), Count: 1}},
		{"hundred", hundred, bench.Latency{P50: ms(50), P90: ms(90), P99: ms(99), Max: ms(100), Count: 100}},
		{"ten", []time.Duration{ms(1), ms(2), ms(3), ms(4), ms(5), ms(6), ms(7), ms(8), ms(9), ms(10)},
			bench.Latency{P50: ms(5), P90: ms(9), P99: ms(10), Max: ms(10), Count: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bench.Percentiles(tc.in); got != tc.want {
				t.Errorf("Percentiles = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		name           string
		measured, base float64
		want           float64 // NaN: no ratio
	}{
		{"half", 5, 10, 0.5},
		{"above", 15, 10, 1.5},
		{"zero measured", 0, 10, 0},
		{"zero baseline", 5, 0, math.NaN()},
		{"NaN baseline", 5, math.NaN(), math.NaN()},
		{"infinite baseline", 5, math.Inf(1), math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := bench.Ratio(tc.measured, tc.base)
			if math.IsNaN(tc.want) != math.IsNaN(got) || !math.IsNaN(got) && got != tc.want {
				t.Errorf("Ratio(%g, %g) = %g, want %g", tc.measured, tc.base, got, tc.want)
			}
		})
	}
}

func TestFormatting(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{bench.FormatRate(1234567.4), "1,234,567"},
		{bench.FormatRate(999.5), "1,000"},
		{bench.FormatRate(12), "12"},
		{bench.FormatRate(math.NaN()), "n/a"},
		{bench.FormatRatio(0.7049), "0.70"},
		{bench.FormatRatio(math.NaN()), "n/a"},
		{bench.FormatPercent(0.9), "90.0%"},
		{bench.FormatDuration(412 * time.Microsecond), "0.412 ms"},
		{bench.FormatDuration(12345 * time.Microsecond), "12.3 ms"},
		{bench.FormatDuration(250 * time.Millisecond), "250 ms"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func foldOf(h bench.Histogram) *bench.WriteFold {
	f := bench.NewWriteFold(h)
	return &f
}

// sampleReport is a report as one run could leave it.
func sampleReport() *bench.Report {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	return &bench.Report{
		Env: bench.Environment{Start: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), CPUs: 2, GoVersion: "go1.26", PostgreSQL: "15", Redis: "7",
			Rows: 1_000_000, ValueBytes: 444, FloorBytes: 460, Workers: 32, Duration: 4 * time.Second, Command: "make bench"},
		Saturation: map[string]bench.Run{
			bench.Floor: {Scenario: bench.Floor, Throughput: 20000, Success: 1, KeysPerRequest: 1, Sources: map[string]uint64{"floor": 10},
				CPU: &bench.CPU{Server: "floor", Requests: 1000, Wall: time.Second, Used: map[string]time.Duration{bench.ProcServer: 20 * time.Millisecond, bench.ProcLoad: 30 * time.Millisecond}}},
			bench.FloorMW: {Scenario: bench.FloorMW, Throughput: 18000, Success: 1, KeysPerRequest: 1, Sources: map[string]uint64{"floor": 10},
				CPU: &bench.CPU{Server: "floor", Requests: 1000, Wall: time.Second, Used: map[string]time.Duration{bench.ProcServer: 24 * time.Millisecond}}},
			bench.Hot: {Scenario: bench.Hot, Throughput: 15000, Success: 1, KeysPerRequest: 1, Sources: map[string]uint64{"hit": 10},
				CPU: &bench.CPU{Server: "warmcache", Requests: 1000, Wall: 2 * time.Second, Used: map[string]time.Duration{bench.ProcServer: 40 * time.Millisecond, bench.ProcRedis: 6 * time.Millisecond}}},
			bench.GRPCFloor: {Scenario: bench.GRPCFloor, Throughput: 10000, Success: 1, KeysPerRequest: 1, Sources: map[string]uint64{"floor": 10}},
			bench.GRPC:      {Scenario: bench.GRPC, Throughput: 8000, Success: 1, KeysPerRequest: 1, Sources: map[string]uint64{"hit": 10}},
			bench.L1:        {Scenario: bench.L1, Throughput: 16000, Success: 1, KeysPerRequest: 1, Sources: map[string]uint64{"hit": 10}},
			bench.Miss: {Scenario: bench.Miss, Throughput: 3000, Success: 1, KeysPerRequest: 1, Sources: map[string]uint64{"miss": 10},
				Fold: &bench.Fold{SQLQueries: 100, SQLKeys: 450, RedisBatches: 200, RedisKeys: 500},
				CPU:  &bench.CPU{Server: "warmcache", Requests: 1000, Wall: time.Second, Used: map[string]time.Duration{bench.ProcServer: 100 * time.Millisecond, bench.ProcPostgres: 50 * time.Millisecond, bench.ProcLoad: 90 * time.Millisecond}}},
			bench.MGet: {Scenario: bench.MGet, Throughput: 1000, Success: 1, KeysPerRequest: 50},
			bench.PeerHot: {Scenario: bench.PeerHot, Throughput: 10000, Success: 1, KeysPerRequest: 1, Sources: map[string]uint64{"hit": 10},
				CPU: &bench.CPU{Server: "peer", Requests: 1000, Wall: time.Second, Used: map[string]time.Duration{bench.ProcServer: 30 * time.Millisecond, bench.ProcRedis: 8 * time.Millisecond}}},
			bench.PeerMiss: {Scenario: bench.PeerMiss, Throughput: 2500, Success: 1, KeysPerRequest: 1, Sources: map[string]uint64{"miss": 10},
				CPU: &bench.CPU{Server: "peer", Requests: 1000, Wall: time.Second, Used: map[string]time.Duration{bench.ProcServer: 60 * time.Millisecond, bench.ProcPostgres: 40 * time.Millisecond}}},
			bench.Put: {Scenario: bench.Put, Throughput: 1600, Success: 1, KeysPerRequest: 1, Workers: 16,
				Latency:   bench.Latency{P50: ms(8), P90: ms(12), P99: ms(20), Max: ms(30), Count: 8000},
				CPU:       &bench.CPU{Server: "warmcache", Requests: 1000, Wall: time.Second, Used: map[string]time.Duration{bench.ProcServer: 150 * time.Millisecond}},
				WriteFold: foldOf(bench.Histogram{Buckets: []bench.Bucket{{UpperBound: 1, Count: 10}, {UpperBound: 2, Count: 20}, {UpperBound: 4, Count: 40}, {UpperBound: 8, Count: 100}}, Count: 100, Sum: 470})},
			bench.PutIfMatch: {Scenario: bench.PutIfMatch, Throughput: 1400, Success: 1, KeysPerRequest: 1},
			bench.Delete:     {Scenario: bench.Delete, Throughput: 2000, Success: 1, KeysPerRequest: 1},
		},
		Upsert: []*bench.Baseline{
			{Name: "pgbench upsert extended", Command: "pgbench -M extended -f upsert.sql", Clients: 16, Throughput: 1800},
			{Name: "pgbench upsert simple", Mode: "simple", Command: "pgbench -M simple -f upsert.sql", Clients: 16, Throughput: 2000,
				Latency: bench.Latency{P50: ms(6), P90: ms(7), P99: ms(8), Max: ms(15), Count: 10000}},
		},
		SingleClient: &bench.SingleClient{Mode: "simple", Command: "pgbench -c 1 -M simple -f upsert.sql",
			Rounds: []bench.SingleRound{
				{PutRate: 800, UpsertRate: 1000, Put: bench.Latency{P50: ms(1.1), P99: ms(2.5), Count: 4000}, Upsert: bench.Latency{P50: ms(0.9), P99: ms(1.4), Count: 5000}},
				{PutRate: 780, UpsertRate: 990, Put: bench.Latency{P50: ms(1.3), P99: ms(3.5), Count: 3900}, Upsert: bench.Latency{P50: ms(1.1), P99: ms(1.6), Count: 4950}},
			},
			Put:    bench.Latency{P50: ms(1.2), P99: ms(3), Count: 7900},
			Upsert: bench.Latency{P50: ms(1), P99: ms(1.5), Count: 9950},
			Fold:   foldOf(bench.Histogram{Buckets: []bench.Bucket{{UpperBound: 1, Count: 500}, {UpperBound: 2, Count: 500}}, Count: 500, Sum: 500})},
		PeerUpsert: []*bench.Baseline{{Name: "pgbench peer upsert", Command: "pgbench -M simple -f peer-upsert.sql", Clients: 16, Throughput: 3000}},
		Fixed: map[string]bench.Run{
			bench.Floor:   {Scenario: bench.Floor, Rate: 7500, Latency: bench.Latency{P50: ms(0.2), P90: ms(0.4), P99: ms(1), Max: ms(3), Count: 30000}},
			bench.Hot:     {Scenario: bench.Hot, Rate: 7500, Latency: bench.Latency{P50: ms(0.3), P90: ms(0.6), P99: ms(1.5), Max: ms(4), Count: 30000}},
			bench.PeerHot: {Scenario: bench.PeerHot, Rate: 7500, Latency: bench.Latency{P50: ms(0.3), P90: ms(0.5), P99: ms(1.2), Max: ms(4), Count: 30000}},
			bench.Miss:    {Scenario: bench.Miss, Rate: 1500, Latency: bench.Latency{P50: ms(1), P90: ms(3), P99: ms(9), Max: ms(20), Count: 6000}},
		},
		PgbenchSat:  &bench.Baseline{Name: "pgbench", Command: "pgbench -M prepared", Clients: 32, Throughput: 12000},
		PgbenchRate: &bench.Baseline{Name: "pgbench", Command: "pgbench -R 1500", Clients: 32, Rate: 1500, Latency: bench.Latency{P50: ms(0.3), P90: ms(1), P99: ms(3), Count: 6000}},
		RedisGet:    &bench.Baseline{Name: "redis GET", Command: "redis-benchmark", Clients: 32, Throughput: 90000},
		Pooler: []*bench.Baseline{
			{Name: "pgbench extended", Command: "pgbench -M extended", Clients: 32, Throughput: 7000},
			{Name: "pgbench simple", Command: "pgbench -M simple", Clients: 32, Throughput: 8000,
				CPU: &bench.CPU{Requests: 1000, Wall: time.Second, Used: map[string]time.Duration{bench.ProcPostgres: 60 * time.Millisecond, bench.ProcPgBouncer: 15 * time.Millisecond, bench.ProcLoad: 20 * time.Millisecond}}},
		},
		Stampede: &bench.StampedeRun{Requests: 500, OK: 500, SQLQueries: 1, IndexScans: 1, Sources: map[string]uint64{"miss": 500}},
		Profiles: []bench.Profile{{Path: bench.Hot, Command: "go tool pprof -top", Requests: 1000,
			Top:    "      flat  flat%   sum%        cum   cum%\n     150ms 30.61% 30.61%      150ms 30.61%  internal/runtime/syscall/linux.Syscall6\n",
			Allocs: "Type: alloc_space\nShowing nodes accounting for 1.50MB, 90.00% of 2MB total\n      flat  flat%   sum%        cum   cum%\n",
		}},
	}
}

func TestTargets(t *testing.T) {
	rows := sampleReport().Targets()
	want := []struct{ prefix, verdict string }{
		{"1.50 ×", bench.Pass},        // hot: 15000 / 10000 (peer)
		{"1.33 ×", bench.Missed},      // hot CPU: 40 µs / 30 µs per request
		{"0.75 ×", bench.Missed},      // Redis per hit: 6 µs / 8 µs
		{"0.38 ×", bench.Missed},      // miss: 3000 / 8000 (the faster PgBouncer run)
		{"1.20 ×", bench.Missed},      // miss: 3000 / 2500 (peer)
		{"1.25 ×", bench.Missed},      // PostgreSQL and PgBouncer per miss: 50 µs / 40 µs
		{"0.80 ×", bench.NotMeasured}, // l1: no hit-l1 answers, whatever the ratio
		{"1.60 ×", bench.NotMeasured}, // l1 against the peer: the same
		{"1.25 ×", bench.Pass},        // p99: 1.5 ms / 1.2 ms
		{"0.80 ×", bench.Missed},      // grpc: 8000 / 10000 (peer, REST)
		{"1 (service counter)", bench.Pass},
		{"0.80 ×", bench.Missed}, // put: 1600 / 2000 (the faster pgbench upsert), under 1.0
		{"0.70 ×", bench.Missed}, // put-if-match: 1400 / 2000
		{"1.00 ×", bench.Pass},   // delete: 2000 / 2000
		{"0.53 ×", bench.Missed}, // put against the peer's upsert: 1600 / 3000, under 0.6
		{"2.50 ×", bench.Missed}, // put p99: 20 ms / 8 ms (the faster pgbench upsert's)
		{"1.20 ×", bench.Pass},   // one client's p50: 1.2 ms / 1 ms
		{"2.00 ×", bench.Missed}, // one client's p99: 3 ms / 1.5 ms
		{"3.75 ×", bench.Pass},   // the service's CPU per PUT against per hit: 150 µs / 40 µs
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d target rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(rows[i].Measured, w.prefix) || !strings.HasPrefix(rows[i].Verdict, w.verdict) {
			t.Errorf("row %d (%s): measured %q verdict %q; want measured starting %q, verdict %q", i, rows[i].Scenario, rows[i].Measured, rows[i].Verdict, w.prefix, w.verdict)
		}
	}
}

// TestPutAgainstHitAtItsRate checks the reference row that holds a PUT's
// CPU against a hit's at the rate the PUTs reached, and that the fixed-rate
// hits join the CPU table.
func TestPutAgainstHitAtItsRate(t *testing.T) {
	r := sampleReport()
	r.Fixed[bench.HotAtPutRate] = bench.Run{Scenario: bench.HotAtPutRate, Rate: 1600, Latency: bench.Latency{P50: time.Millisecond / 5, P99: time.Millisecond, Count: 8000},
		CPU: &bench.CPU{Server: "warmcache", Requests: 1000, Wall: time.Second, Used: map[string]time.Duration{bench.ProcServer: 75 * time.Millisecond}}}
	var row *bench.TargetRow
	rows := r.Targets()
	for i := range rows {
		if strings.Contains(rows[i].Scenario, bench.HotAtPutRate) {
			row = &rows[i]
		}
	}
	if row == nil {
		t.Fatalf("no target row names %s", bench.HotAtPutRate)
	}
	if want := "2.00 × (150.0 µs vs 75.0 µs)"; row.Measured != want || row.Verdict != "reference" {
		t.Errorf("row %q: measured %q, verdict %q; want %q, reference", row.Scenario, row.Measured, row.Verdict, want)
	}
	var buf bytes.Buffer
	if err := r.WriteMarkdown(&buf, "results"); err != nil {
		t.Fatal(err)
	}
	if want := "| `hot@put-rate` | warmcache | 75.0 µs |"; !strings.Contains(buf.String(), want) {
		t.Errorf("markdown lacks %q", want)
	}
	delete(r.Fixed, bench.HotAtPutRate)
	for _, row := range r.Targets() {
		if strings.Contains(row.Scenario, bench.HotAtPutRate) {
			t.Errorf("a report without %s has its row: %+v", bench.HotAtPutRate, row)
		}
	}
}

func TestTargetsWithNearCacheAndMissingRuns(t *testing.T) {
	r := sampleReport()
	r.Saturation[bench.L1] = bench.Run{Scenario: bench.L1, Throughput: 21000, Sources: map[string]uint64{"hit-l1": 99, "hit": 1}}
	r.Stampede.SQLQueries = 3
	delete(r.Saturation, bench.Miss)
	r.Saturation[bench.Hot].CPU.Used[bench.ProcServer] = 25 * time.Millisecond // 25 µs per request: 0.83 × the peer's
	r.Saturation[bench.Hot].CPU.Used[bench.ProcRedis] = 3 * time.Millisecond   // 3 µs per hit: 0.38 × the peer's
	delete(r.Fixed, bench.PeerHot)
	rows := r.Targets()
	for i, want := range []string{bench.Pass, bench.Pass, bench.Pass, bench.NotMeasured, bench.NotMeasured, bench.NotMeasured,
		bench.Pass, bench.Pass, bench.NotMeasured, bench.Missed, bench.Missed} {
		if rows[i].Verdict != want {
			t.Errorf("row %d (%s): verdict %q, want %q (measured %q)", i, rows[i].Scenario, rows[i].Verdict, want, rows[i].Measured)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().WriteMarkdown(&buf, "results"); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, want := range []string{
		"| `hot` (Redis hit) throughput at saturation | ≥ 1.3 × `peer-hot` | 1.50 ×",
		"| `mget` | 1,000 | 50,000 | 3.33 | `hot` keys/s |",
		"| `miss` | 3,000 | 3,000 | 0.38 | pgbench via PgBouncer lookups/s |",
		"| `grpc` | 8,000 | 8,000 | 0.80 | `grpc-floor` calls/s |",
		"| `put` | 1,600 | 1,600 | 0.80 | pgbench upsert via PgBouncer/s |",
		"| pgbench peer upsert (baseline) | 3,000 |",
		// CPU per request: hot's server against the floor's (40 vs 20 µs);
		// miss's total without the load generator against pgbench's
		// (150 vs 75 µs).
		"| `hot` | warmcache | 40.0 µs | 6.0 µs | n/a | n/a | 46.0 µs | n/a | 0.02 | 2.00 | `floor` |",
		"| `floor-mw` | floor | 24.0 µs |",
		"| `miss` | warmcache | 100.0 µs | n/a | 50.0 µs | n/a | 150.0 µs | 90.0 µs | 0.10 | 2.00 | pgbench simple |",
		"| pgbench simple | n/a | n/a | n/a | 60.0 µs | 15.0 µs | 75.0 µs | 20.0 µs |",
		"Allocated during the profile: 2.0 MiB, about 2.0 KiB per request (1,000 requests).",
		"Folding during `miss` (its warm-up included): 4.50 keys per warehouse query (100 queries), 2.50 keys per Redis read batch (200 batches).",
		"| `miss` | 1,500 | 1.000 ms | 3.000 ms | 9.000 ms | 20.0 ms | 3.00 | pgbench p99 |",
		"![throughput at saturation](results/throughput.png)",
		"| `internal/runtime/syscall/linux` | 30.6% |",
		"```sh\nmake bench\n```",
		"constant 460-byte JSON body",
		"| `put`: p99 at saturation | ≤ 2.0 × pgbench's p99 of the same upsert via PgBouncer, as many clients | 2.50 × (20.0 ms vs 8.000 ms, pgbench upsert simple) | miss |",
		"| `put`: the service's CPU per PUT | ≤ 4.0 × its CPU per hit (`hot`) | 3.75 × (150.0 µs vs 40.0 µs) | pass |",
		// Fold sizes: 470 writes in 100 folds, 10 of them alone; the
		// median and p99 estimated in (4, 8]; put-1 all alone; the
		// attacks without a histogram say so.
		"| `put` | 100 | 470 | 4.7 | 5 | 8 | 2.1% |",
		"| `put-if-match` | n/a | n/a | n/a | n/a | n/a | n/a |",
		"| `put-1` | 500 | 500 | 1.0 | 1 | 1 | 100.0% |",
		"The reference is pgbench upsert simple",
		"| `put` | 1,600 | 8.000 ms | 12.0 ms | 20.0 ms | 30.0 ms | 2.50 |",
		"| pgbench upsert simple | 2,000 | 6.000 ms | 7.000 ms | 8.000 ms | 15.0 ms | 1.00 |",
		"| 2 | 780 | 990 | 1.300 ms | 1.100 ms | 1.18 | 3.500 ms | 1.600 ms | 2.19 |",
		"| all |  |  | 1.200 ms | 1.000 ms | 1.20 | 3.000 ms | 1.500 ms | 2.00 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

func TestWriteCharts(t *testing.T) {
	dir := t.TempDir()
	r := sampleReport()
	for _, tc := range []struct {
		name  string
		write func(string) error
	}{
		{"throughput.png", r.WriteThroughputChart},
		{"cpu.png", r.WriteCPUChart},
		{"latency-hot.png", func(p string) error { return r.WriteLatencyChart(p, false) }},
		{"latency-miss.png", func(p string) error { return r.WriteLatencyChart(p, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := tc.write(path); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
				t.Errorf("%s is not a PNG", tc.name)
			}
		})
	}
}

func TestThroughputChartNeedsTheFloor(t *testing.T) {
	r := sampleReport()
	delete(r.Saturation, bench.Floor)
	if err := r.WriteThroughputChart(filepath.Join(t.TempDir(), "t.png")); err == nil {
		t.Fatal("chart without a floor succeeded")
	}
}

func TestBeforeAndAfter(t *testing.T) {
	before := sampleReport()
	before.Saturation[bench.Hot].CPU.Used[bench.ProcServer] = 60 * time.Millisecond
	r := sampleReport()
	r.Before, r.BeforeLabel = before, "abc1234"
	var buf bytes.Buffer
	if err := r.WriteMarkdown(&buf, "results"); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, want := range []string{
		"## Before and after",
		"The same harness on abc1234",
		"| `hot`: the service's CPU per hit | 2.00 × (60.0 µs vs 30.0 µs) (miss) | 1.33 × (40.0 µs vs 30.0 µs) (miss) |",
		"| `hot` | 60.0 µs → 40.0 µs |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	r := sampleReport()
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := bench.ReadJSON(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Saturation[bench.Hot].CPU.PerRequest(bench.ProcServer) != 40 || got.PoolerReference().Throughput != 8000 || got.Env.Workers != 32 ||
		got.Saturation[bench.Put].WriteFold.Sizes.AtMost(4) != 40 || got.SingleClient.Upsert.P99 != r.SingleClient.Upsert.P99 || got.UpsertReference().Mode != "simple" {
		t.Errorf("round trip lost data: %+v", got)
	}
}
