package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/loadtest/bench"
)

// monitorRounds is how many times the monitor scenario attacks its two
// services at once; each round is one comparison.
const monitorRounds = 8

// monitorRun is one measured attack of the monitor scenario.
type monitorRun struct {
	on  bool
	run bench.Run
}

// monitorScenario measures what the consistency monitor costs the hits:
// two service processes on the same Redis keys, started alike but for
// WARMCACHE_CONSISTENCY_SAMPLES (the default on one, 0 on the other), are
// attacked at once, each at saturation on the hot keys with half the
// workers, monitorRounds times, each attack measured as the hot
// scenario's is. Attacked together, both meet the same load from the rest
// of the machine, which on a shared machine moves either one's throughput
// far more than the monitor could. The section goes to the report.
func (r *benchRun) monitorScenario(ctx context.Context) error {
	env := func(samples int) []string {
		return append(slices.Clone(r.opts.HotEnv), "WARMCACHE_CONSISTENCY_SAMPLES="+strconv.Itoa(samples))
	}
	on, err := r.startService(ctx, "service-monitor-on", env(config.DefaultConsistencySamples))
	if err != nil {
		return err
	}
	defer func() { _ = on.stop() }()
	off, err := r.startService(ctx, "service-monitor-off", env(0))
	if err != nil {
		return err
	}
	defer func() { _ = off.stop() }()
	for _, s := range []*service{on, off} {
		if err := r.prewarm(ctx, s, r.distinct); err != nil {
			return err
		}
	}
	spec := func(s *service, name string) func() attackSpec {
		sp := r.httpSpec(name, s.targets.gets(r.hotKeys), 1)
		return func() attackSpec {
			a := sp()
			a.workers = max(1, r.opts.Workers/2)
			return a
		}
	}
	specs := []func() attackSpec{spec(on, "monitor-on"), spec(off, "monitor-off")}
	if r.opts.Warmup > 0 {
		var wg sync.WaitGroup
		for _, sp := range specs {
			wg.Go(func() {
				w := sp()
				w.duration = r.opts.Warmup
				_ = r.saturation(ctx, w)
			})
		}
		wg.Wait()
	}
	var runs []monitorRun
	for range monitorRounds {
		pair := make([]monitorRun, 2)
		var wg sync.WaitGroup
		for i, s := range []*service{on, off} {
			wg.Go(func() {
				pair[i] = monitorRun{on: s == on, run: r.measured(s.process, "warmcache", func() bench.Run { return r.saturation(ctx, specs[i]()) })}
			})
		}
		wg.Wait()
		for _, m := range pair {
			r.logRun(m.run)
		}
		runs = append(runs, pair...)
	}
	samples, err := scrapeSum(ctx, on.base+"/metrics", "warmcache_consistency_samples_total", nil)
	if err != nil {
		r.note("monitor: the samples taken were not read: %v", err)
		samples = math.NaN()
	}
	sum := summarizeMonitor(runs)
	r.logf("monitor: throughput on/off median %s (%s to %s), server CPU per request on/off median %s (%s to %s)",
		bench.FormatRatio(sum.throughput.median), bench.FormatRatio(sum.throughput.min), bench.FormatRatio(sum.throughput.max),
		bench.FormatRatio(sum.cpu.median), bench.FormatRatio(sum.cpu.min), bench.FormatRatio(sum.cpu.max))
	r.report.Monitor = renderMonitor(runs, sum, samples, r.opts.Duration.String())
	return nil
}

// spread is the median and the range of a few ratios.
type spread struct{ median, min, max float64 }

func spreadOf(xs []float64) spread {
	xs = slices.DeleteFunc(slices.Clone(xs), func(x float64) bool { return math.IsNaN(x) })
	if len(xs) == 0 {
		return spread{math.NaN(), math.NaN(), math.NaN()}
	}
	slices.Sort(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return spread{m, xs[0], xs[len(xs)-1]}
}

// monitorSummary holds, over the rounds (pairs of neighbouring runs), the ratios
// of the monitored service to the unmonitored one.
type monitorSummary struct {
	throughput, cpu spread
	pairs           int
}

// summarizeMonitor pairs the runs two by two, in order, and takes each
// pair's ratios on/off of throughput and of the server's CPU per request.
// A pair without one of each is skipped.
func summarizeMonitor(runs []monitorRun) monitorSummary {
	var tput, cpu []float64
	for i := 0; i+1 < len(runs); i += 2 {
		a, b := runs[i], runs[i+1]
		if a.on == b.on {
			continue
		}
		if !a.on {
			a, b = b, a
		}
		tput = append(tput, bench.Ratio(a.run.Throughput, b.run.Throughput))
		cpu = append(cpu, bench.Ratio(a.run.CPU.PerRequest(bench.ProcServer), b.run.CPU.PerRequest(bench.ProcServer)))
	}
	return monitorSummary{throughput: spreadOf(tput), cpu: spreadOf(cpu), pairs: len(tput)}
}

// renderMonitor writes the report's section of the monitor scenario.
func renderMonitor(runs []monitorRun, sum monitorSummary, samples float64, duration string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n## Consistency monitor: its cost on hits\n\n")
	p("Two service processes on the same Redis keys, started alike but for `WARMCACHE_CONSISTENCY_SAMPLES`: ")
	p("`on` at the default, %d in a million, `off` at 0. Each round attacks both at once, each at saturation on the `hot` keys (REST GETs answered from Redis) with half the workers, for %s after a warm-up, ", config.DefaultConsistencySamples, duration)
	p("so that both meet the same load from the rest of the machine; each round is one comparison. CPU per request is each service's, from `/proc/<pid>/stat`, as in the CPU table. ")
	if !math.IsNaN(samples) {
		p("The monitored service sampled %.0f updates in all, its pre-warming's fills included: a hit updates nothing, so what the monitor can cost a hit is its idle goroutine and nothing on the request's path.\n\n", samples)
	} else {
		p("\n\n")
	}
	p("| round | monitor | req/s | server µs/req | X-Cache |\n|---:|---|---:|---:|---|\n")
	for i, m := range runs {
		state := "off"
		if m.on {
			state = "on"
		}
		p("| %d | %s | %s | %s | %s |\n", i/2+1, state, bench.FormatRate(m.run.Throughput),
			bench.FormatMicros(m.run.CPU.PerRequest(bench.ProcServer)), formatSourcesShort(m.run.Sources))
	}
	p("\nOver %d rounds, throughput on/off: median %s (%s to %s); server CPU per request on/off: median %s (%s to %s). ",
		sum.pairs, bench.FormatRatio(sum.throughput.median), bench.FormatRatio(sum.throughput.min), bench.FormatRatio(sum.throughput.max),
		bench.FormatRatio(sum.cpu.median), bench.FormatRatio(sum.cpu.min), bench.FormatRatio(sum.cpu.max))
	cost := 1 - sum.throughput.median
	verdict := "within"
	if !(cost <= 0.02) {
		verdict = "beyond"
	}
	p("The monitor's cost, 1 − the median throughput ratio, is %s of hit throughput: %s the target of 2%%. ", bench.FormatPercent(cost), verdict)
	p("The range between rounds is the machine's noise, and the median is to be read against it.\n")
	return b.String()
}

// formatSourcesShort prints X-Cache counts as name=count, sorted.
func formatSourcesShort(m map[string]uint64) string {
	var parts []string
	for k, v := range m {
		if k == "" {
			k = "none"
		}
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "n/a"
	}
	return strings.Join(parts, " ")
}
