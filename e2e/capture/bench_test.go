package capture_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// EnvBench names the Markdown file that BenchmarkCapture writes; by
// default it is loadtest/capture.md. The benchmark is one measured run:
//
//	go test -run '^$' -bench Capture -benchtime 1x ./e2e/capture
const EnvBench = "WARMCACHE_CAPTURE_BENCH"

const (
	benchRows     = 100_000
	benchHotKeys  = 1000
	benchWorkers  = 16
	benchAttack   = time.Second
	benchRounds   = 9
	trickleWrites = 200 // per second, on keys outside the hot set, during the hit-path attacks
)

// BenchmarkCapture measures, in one run on one machine: the hit
// path's throughput of an instance with change capture against one with
// change capture off (alternating attacks, writers trickling updates to other
// keys meanwhile), and how fast a 100,000-row UPDATE in one transaction is
// applied to Redis by change capture and by polling.
func BenchmarkCapture(bench *testing.B) {
	var t testing.TB = bench
	out := os.Getenv(EnvBench)
	if out == "" {
		out = "../../loadtest/capture.md"
	}
	loadBefore := loadAverage()
	s := newStack(t, benchRows)
	off := s.startInstance(t, "off", map[string]string{"WARMCACHE_FRESHNESS": "off"})
	capture := s.startInstance(t, "capture", map[string]string{"WARMCACHE_FRESHNESS": "capture"})
	waitMode(t, capture, "capture", 15*time.Second)

	hot := make([]int64, benchHotKeys)
	for i := range hot {
		hot[i] = int64(i + 1)
	}
	for _, in := range []*instance{off, capture} {
		if _, err := in.mget(hot); err != nil {
			t.Fatalf("prewarm %s: %v", in.name, err)
		}
	}

	// Writers trickle updates to keys outside the hot set, so that the
	// instance with change capture applies changes while it serves hits.
	ctx, stopTrickle := context.WithCancel(context.Background())
	var trickled atomic.Int64
	var wg sync.WaitGroup
	conn := s.connect(t)
	wg.Go(func() {
		tick := time.NewTicker(time.Second / trickleWrites)
		defer tick.Stop()
		rng := rand.New(rand.NewPCG(3, 4))
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			k := int64(benchHotKeys + 1 + rng.IntN(benchRows-benchHotKeys))
			if _, err := conn.Exec(ctx, `UPDATE widgets SET value = jsonb_set(value, '{t}', to_jsonb($2::bigint)) WHERE key = $1`, k, rng.Int64()); err == nil {
				trickled.Add(1)
			}
		}
	})
	rates := map[string][]float64{}
	for range benchRounds {
		for _, in := range []*instance{off, capture} {
			rates[in.name] = append(rates[in.name], attack(t, in, hot))
		}
	}
	stopTrickle()
	wg.Wait()
	median := func(xs []float64) float64 {
		c := append([]float64(nil), xs...)
		for i := range c {
			for j := i + 1; j < len(c); j++ {
				if c[j] < c[i] {
					c[i], c[j] = c[j], c[i]
				}
			}
		}
		return c[len(c)/2]
	}
	offRate, capRate := median(rates["off"]), median(rates["capture"])
	t.Logf("hit path: off %.0f req/s %v, capture %.0f req/s %v, ratio %.3f; %d trickled updates applied meanwhile",
		offRate, rates["off"], capRate, rates["capture"], capRate/offRate, trickled.Load())

	capApply := bulkApply(t, s, capture, "capture")
	_ = capture.proc.Stop(t, syscall.SIGTERM)
	_ = off.proc.Stop(t, syscall.SIGTERM)
	poll := s.startInstance(t, "poll", map[string]string{"WARMCACHE_FRESHNESS": "poll"})
	waitMode(t, poll, "poll", 15*time.Second)
	time.Sleep(1500 * time.Millisecond) // the first poll sets the watermark
	pollApply := bulkApply(t, s, poll, "poll")

	var b strings.Builder
	fmt.Fprintf(&b, "## Change capture: its cost and apply rate\n\n")
	fmt.Fprintf(&b, "Measured %s on %d cores (%s/%s), by `e2e/capture`'s benchmark: a PostgreSQL cluster of its own (`initdb`, `wal_level = logical`), a Redis of its own, %d widget rows, `warmcache serve` processes, the load generator in the same process as the test.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, benchRows)
	fmt.Fprintf(&b, "The machine was shared: its 1-minute load average was %s before the run and %s after it, so single rounds vary by tens of percent; the medians of interleaved rounds are what compare.\n\n", loadBefore, loadAverage())
	fmt.Fprintf(&b, "**Hit path.** Two instances on the same Redis and PostgreSQL, one with `--freshness off` and one holding the replication slot, each attacked in turn for %v with %d keep-alive workers doing `GET` on %d cached keys, %d rounds, while a writer updated other keys in SQL at %d per second (the capturing instance applied them meanwhile).\n\n",
		benchAttack, benchWorkers, benchHotKeys, benchRounds, trickleWrites)
	fmt.Fprintf(&b, "| instance | GET hits/s per round | median |\n|---|---|---|\n")
	for _, name := range []string{"off", "capture"} {
		var rs []string
		for _, r := range rates[name] {
			rs = append(rs, fmt.Sprintf("%.0f", r))
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f |\n", name, strings.Join(rs, ", "), median(rates[name]))
	}
	fmt.Fprintf(&b, "\nRatio with change capture to without: **%.3f**.\n\n", capRate/offRate)
	fmt.Fprintf(&b, "**Apply rate.** One `UPDATE widgets SET value = jsonb_set(value, '{bulk}', ...)` of all %d rows in one transaction (the trigger gives every row a new version), then the time until the instance had applied every row to Redis:\n\n", benchRows)
	fmt.Fprintf(&b, "| mode | UPDATE commit | applied after the commit | rows/s applied |\n|---|---|---|---|\n")
	for _, r := range []bulkResult{capApply, pollApply} {
		fmt.Fprintf(&b, "| %s | %v | %v | %.0f |\n", r.mode, r.commit.Round(time.Millisecond), r.applied.Round(time.Millisecond), float64(benchRows)/r.applied.Seconds())
	}
	fmt.Fprintf(&b, "\nTo reproduce:\n\n```sh\ngo test -run '^$' -bench Capture -benchtime 1x ./e2e/capture\n```\n")
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s:\n%s", out, b.String())
}

// attack GETs keys for benchAttack with benchWorkers workers and returns
// the hits per second. Answers that are not hits (a Redis call past its
// deadline on a loaded machine is served from SQL) are not counted, and are
// reported.
func attack(t testing.TB, in *instance, keys []int64) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchAttack)
	defer cancel()
	var n atomic.Int64
	var bad atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range benchWorkers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for ctx.Err() == nil {
				k := keys[rng.IntN(len(keys))]
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.url+"/v1/kv/widgets/"+strconv.FormatInt(k, 10), nil)
				res, err := in.client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				if res.StatusCode == http.StatusOK && res.Header.Get("X-Cache") == "hit" {
					n.Add(1)
				} else {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Logf("%s: %d answers that were not hits, not counted", in.name, bad.Load())
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}

type bulkResult struct {
	mode            string
	commit, applied time.Duration
}

// bulkApply updates every row in one transaction and waits until the
// instance's metrics count every row applied, then checks a sample of keys.
func bulkApply(t testing.TB, s *stack, in *instance, mode string) bulkResult {
	t.Helper()
	before := in.changes(t)
	conn := s.connect(t)
	marker := time.Now().UnixNano()
	start := time.Now()
	if _, err := conn.Exec(context.Background(), `UPDATE widgets SET value = jsonb_set(value, '{bulk}', to_jsonb($1::bigint))`, marker); err != nil {
		t.Fatalf("bulk update: %v", err)
	}
	committed := time.Now()
	for in.changes(t) < before+benchRows {
		if time.Since(committed) > 3*time.Minute {
			t.Fatalf("%s: %v of %d rows applied after 3 minutes", mode, in.changes(t)-before, benchRows)
		}
		time.Sleep(20 * time.Millisecond)
	}
	applied := time.Since(committed)
	for _, k := range []int64{1, 777, benchRows / 2, benchRows} {
		res, err := in.client.Get(in.url + "/v1/kv/widgets/" + strconv.FormatInt(k, 10))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if !strings.Contains(string(body), strconv.FormatInt(marker, 10)) || res.Header.Get("X-Cache") != "hit" {
			t.Errorf("%s: key %d answers %s %q after the bulk update was applied", mode, k, res.Header.Get("X-Cache"), body)
		}
	}
	t.Logf("%s: a %d-row UPDATE committed in %v and was applied %v after its commit (%.0f rows/s)",
		mode, benchRows, committed.Sub(start).Round(time.Millisecond), applied.Round(time.Millisecond), float64(benchRows)/applied.Seconds())
	return bulkResult{mode: mode, commit: committed.Sub(start), applied: applied}
}

// changes returns the instance's count of applied changes.
func (in *instance) changes(t testing.TB) int64 {
	t.Helper()
	res, err := in.client.Get(in.url + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "warmcache_freshness_changes_total{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return int64(sum)
}

// loadAverage returns the 1-minute load average, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
