package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// The fold sizes come from the service's histogram as client_golang
// exposes it: the rise between two scrapes, whatever came before.
func TestScrapeHistogramOfWriteFolds(t *testing.T) {
	reg := prometheus.NewRegistry()
	sizes := prometheus.NewHistogram(prometheus.HistogramOpts{Name: writeFoldSize, Help: "Writes per folded warehouse write.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}})
	reg.MustRegister(sizes)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	ctx := context.Background()

	sizes.Observe(64) // before the attack: not counted
	before, err := scrapeHistogram(ctx, srv.URL, writeFoldSize)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []float64{1, 1, 2, 3, 16, 16, 16, 16, 16, 16} {
		sizes.Observe(n)
	}
	after, err := scrapeHistogram(ctx, srv.URL, writeFoldSize)
	if err != nil {
		t.Fatal(err)
	}
	d, err := after.Since(before)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]float64, len(d.Buckets))
	for i, b := range d.Buckets {
		counts[i] = b.Count
	}
	if want := []float64{2, 3, 4, 4, 10, 10, 10, 10}; !slices.Equal(counts, want) || d.Count != 10 || d.Sum != 103 {
		t.Fatalf("rise = buckets %v, count %g, sum %g; want %v, 10, 103", counts, d.Count, d.Sum, want)
	}
	// The median, rank 5, is the first of the six folds in (8, 16],
	// spread over 9 to 16; p99, rank 10, the last.
	f := bench.NewWriteFold(d)
	if f.P50 != 10 || f.P99 != 16 || f.Mean != 10.3 || f.Alone() != 2.0/103 {
		t.Errorf("fold sizes: median %g, p99 %g, mean %g, alone %g; want 10, 16, 10.3, 2/103", f.P50, f.P99, f.Mean, f.Alone())
	}
	if _, err := scrapeHistogram(ctx, srv.URL, "warmcache_batch_keys"); err == nil {
		t.Error("scrapeHistogram found a histogram the service does not expose")
	}
}

// Every transaction of a logged pgbench run is in its log, paced or not;
// only a paced run has a rate.
func TestPgbenchArgsLogWhenLogged(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "pgbench-log", "pgbench.1")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("0 0 1 0 1 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &harness{opts: options{Duration: 5 * time.Second, ArtifactDir: dir, Database: "bench"}}
	for _, tc := range []struct {
		name          string
		pr            pgbenchRun
		log, rate     bool
		clients, jobs string
	}{
		{"saturation", pgbenchRun{addr: "127.0.0.1:6432", mode: "simple", clients: 16, script: "u.sql"}, false, false, "16", "2"},
		{"saturation, logged", pgbenchRun{addr: "127.0.0.1:6432", mode: "extended", clients: 16, script: "u.sql", logged: true}, true, false, "16", "2"},
		{"one client, logged", pgbenchRun{addr: "127.0.0.1:6432", mode: "extended", clients: 1, script: "u.sql", logged: true}, true, false, "1", "1"},
		{"paced", pgbenchRun{addr: "127.0.0.1:5432", mode: "prepared", clients: 32, script: "l.sql", rate: 1500, logged: true}, true, true, "32", "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, logDir, err := h.pgbenchArgs(tc.pr)
			if err != nil {
				t.Fatal(err)
			}
			cmd := strings.Join(args, " ")
			for flag, want := range map[string]bool{"--log": tc.log, "-R ": tc.rate} {
				if strings.Contains(cmd, flag) != want {
					t.Errorf("pgbench %s: has %q = %v, want %v", cmd, flag, !want, want)
				}
			}
			if want := " -M " + tc.pr.mode + " -c " + tc.clients + " -j " + tc.jobs + " -T 5 "; !strings.Contains(cmd, want) || args[len(args)-1] != "bench" {
				t.Errorf("pgbench %s: want %q and the database last", cmd, want)
			}
			if _, err := os.Stat(stale); tc.log && !os.IsNotExist(err) {
				t.Errorf("a logged run left the last run's log in %s", logDir)
			}
		})
	}
}
