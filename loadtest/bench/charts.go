package bench

import (
	"fmt"
	"image/color"
	"math"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var (
	colorP50  = color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff}
	colorP90  = color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff}
	colorP99  = color.RGBA{R: 0xc4, G: 0x4e, B: 0x52, A: 0xff}
	colorBar  = color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff}
	colorLine = color.RGBA{R: 0x33, G: 0x33, B: 0x33, A: 0xff}
)

// WriteThroughputChart draws each saturation run's throughput as a ratio
// to the floor's, with the floor at 1.0, into a PNG file at path. The
// baselines are drawn as well. It returns an error when the floor was not
// measured or the file cannot be written.
func (r *Report) WriteThroughputChart(path string) error {
	floor, ok := r.Saturation[Floor]
	if !ok || !(floor.Throughput > 0) {
		return fmt.Errorf("bench: throughput chart: the floor was not measured")
	}
	var names []string
	var vals plotter.Values
	var labels []string
	add := func(name string, rate float64) {
		names = append(names, name)
		vals = append(vals, rate/floor.Throughput)
		labels = append(labels, FormatRate(rate))
	}
	for _, name := range scenarioOrder {
		if run, ok := r.Saturation[name]; ok {
			label := name
			if run.KeysPerRequest > 1 {
				label = fmt.Sprintf("%s\n(%d keys/req)", name, run.KeysPerRequest)
			}
			add(label, run.Throughput)
		}
	}
	if b := r.PgbenchSat; b != nil {
		add("pgbench\ndirect", b.Throughput)
	}
	if b := r.PoolerReference(); b != nil {
		add("pgbench via\nPgBouncer", b.Throughput)
	}
	if b := r.RedisGet; b != nil {
		add("redis GET", b.Throughput)
	}

	p := plot.New()
	p.Title.Text = fmt.Sprintf("Throughput at saturation, %d workers (ratio to floor; labels: req/s)", r.Env.Workers)
	p.Y.Label.Text = "× floor"
	p.Y.Min = 0
	bars, err := plotter.NewBarChart(vals, vg.Points(28))
	if err != nil {
		return fmt.Errorf("bench: throughput chart: %w", err)
	}
	bars.Color = colorBar
	bars.LineStyle.Width = 0
	p.Add(bars)
	if err := addBarLabels(p, vals, labels, 0); err != nil {
		return err
	}
	one := plotter.NewFunction(func(float64) float64 { return 1 })
	one.Color = colorLine
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(one)
	p.Legend.Add("floor = 1.0", one)
	p.Legend.Top = true
	p.NominalX(names...)
	p.Y.Max = math.Max(1.2, maxOf(vals)*1.15)
	if err := p.Save(vg.Points(720), vg.Points(360), path); err != nil {
		return fmt.Errorf("bench: save %s: %w", path, err)
	}
	return nil
}

// WriteLatencyChart draws p50, p90 and p99 of fixed-rate runs, in
// milliseconds, into a PNG file at path: the miss path (miss and the
// pgbench baseline) when missPath is set, otherwise the hot path (floor,
// hot, l1 and the others). It returns an error when there is nothing to
// draw or the file cannot be written.
func (r *Report) WriteLatencyChart(path string, missPath bool) error {
	var names []string
	var p50, p90, p99 plotter.Values
	add := func(name string, l Latency) {
		names = append(names, name)
		p50 = append(p50, ms(l.P50))
		p90 = append(p90, ms(l.P90))
		p99 = append(p99, ms(l.P99))
	}
	for _, name := range scenarioOrder {
		if run, ok := r.Fixed[name]; ok && run.Latency.Count > 0 && (name == Miss) == missPath {
			add(fmt.Sprintf("%s\n%s/s", name, FormatRate(run.Rate)), run.Latency)
		}
	}
	if b := r.PgbenchRate; missPath && b != nil && b.Latency.Count > 0 {
		add(fmt.Sprintf("pgbench -M prepared\n%s/s", FormatRate(b.Rate)), b.Latency)
	}
	if len(names) == 0 {
		return fmt.Errorf("bench: latency chart: no fixed-rate run")
	}
	p := plot.New()
	p.Title.Text = "Hot path: latency at a fixed rate (ms, client side)"
	if missPath {
		p.Title.Text = "Miss path: latency at a fixed rate (ms, client side)"
	}
	p.Y.Label.Text = "ms"
	p.Y.Min = 0
	w := vg.Points(16)
	for i, s := range []struct {
		name string
		vals plotter.Values
		c    color.Color
	}{{"p50", p50, colorP50}, {"p90", p90, colorP90}, {"p99", p99, colorP99}} {
		bars, err := plotter.NewBarChart(s.vals, w)
		if err != nil {
			return fmt.Errorf("bench: latency chart: %w", err)
		}
		bars.Color = s.c
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(i-1) * w
		p.Add(bars)
		p.Legend.Add(s.name, bars)
	}
	p.Legend.Top = true
	p.NominalX(names...)
	p.Y.Max = maxOf(p99) * 1.3 // room for the legend
	if err := p.Save(vg.Points(720), vg.Points(360), path); err != nil {
		return fmt.Errorf("bench: save %s: %w", path, err)
	}
	return nil
}

func addBarLabels(p *plot.Plot, vals plotter.Values, labels []string, offset float64) error {
	xys := make(plotter.XYs, len(vals))
	for i, v := range vals {
		xys[i] = plotter.XY{X: float64(i) + offset, Y: v}
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return fmt.Errorf("bench: chart labels: %w", err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = -0.5 // centred over the bar
		l.TextStyle[i].YAlign = 0    // above the value
	}
	p.Add(l)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func maxOf(vs plotter.Values) float64 {
	m := 0.0
	for _, v := range vs {
		m = math.Max(m, v)
	}
	return m
}

// procColors are the colours of the process groups in the CPU chart.
var procColors = map[string]color.Color{
	ProcServer:    colorBar,
	ProcRedis:     colorP99,
	ProcPostgres:  colorP50,
	ProcPgBouncer: colorP90,
	ProcLoad:      color.RGBA{R: 0xaa, G: 0xaa, B: 0xaa, A: 0xff},
}

// WriteCPUChart draws the CPU time per request of each process group,
// stacked, for every attack whose CPU was measured, into a PNG file at
// path. It returns an error when nothing was measured or the file cannot
// be written.
func (r *Report) WriteCPUChart(path string) error {
	var rows []cpuRow
	for _, row := range r.cpuRows() {
		// mget's requests carry many keys each and would flatten the rest.
		if row.name != "`"+MGet+"`" {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("bench: CPU chart: no CPU measured")
	}
	names := make([]string, len(rows))
	for i, row := range rows {
		n := strings.ReplaceAll(row.name, "`", "")
		n = strings.Replace(n, "pgbench -M ", "pgbench\n", 1)
		n = strings.Replace(n, " via PgBouncer", "\nPgBouncer", 1)
		n = strings.Replace(n, " direct", "\ndirect", 1)
		names[i] = n
	}
	p := plot.New()
	p.Title.Text = "CPU per request by process at saturation (µs)"
	p.Y.Label.Text = "µs per request"
	p.Y.Min = 0
	var below *plotter.BarChart
	top := 0.0
	totals := make([]float64, len(rows))
	for _, g := range ProcOrder {
		vals := make(plotter.Values, len(rows))
		any := false
		for i, row := range rows {
			if v := row.cpu.PerRequest(g); !math.IsNaN(v) {
				vals[i] = v
				totals[i] += v
				any = true
			}
		}
		if !any {
			continue
		}
		bars, err := plotter.NewBarChart(vals, vg.Points(24))
		if err != nil {
			return fmt.Errorf("bench: CPU chart: %w", err)
		}
		bars.Color = procColors[g]
		bars.LineStyle.Width = 0
		if below != nil {
			bars.StackOn(below)
		}
		below = bars
		p.Add(bars)
		p.Legend.Add(g, bars)
	}
	for _, t := range totals {
		top = math.Max(top, t)
	}
	p.Legend.Top = true
	p.NominalX(names...)
	p.Y.Max = top * 1.35 // room for the legend
	if err := p.Save(vg.Points(860), vg.Points(380), path); err != nil {
		return fmt.Errorf("bench: save %s: %w", path, err)
	}
	return nil
}
