// Command storagechart draws the reports of `warmcache advise --json` as
// one PNG: size on disk and point-lookup p50 of each candidate storage,
// one bar per report, side by side.
//
//	make load-tools
//	bin/storagechart -o docs/storage/storage.png docs/storage/widgets.json docs/storage/orders.json
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// report is the part of advise's JSON report the chart reads.
type report struct {
	Namespace string `json:"namespace"`
	Rows      int    `json:"rows"`
	Results   []struct {
		Name       string  `json:"name"`
		Bytes      int64   `json:"bytes"`
		P50Seconds float64 `json:"p50_seconds"`
		Error      string  `json:"error"`
	} `json:"results"`
}

var palette = []color.RGBA{
	{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	{R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
	{R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
	{R: 0xc4, G: 0x4e, B: 0x52, A: 0xff},
}

func main() {
	out := flag.String("o", "storage.png", "PNG file to write")
	flag.Parse()
	if err := run(*out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "storagechart:", err)
		os.Exit(1)
	}
}

func run(out string, files []string) error {
	if len(files) == 0 || len(files) > len(palette) {
		return fmt.Errorf("want 1 to %d advise JSON reports", len(palette))
	}
	var reports []report
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		reports = append(reports, r)
	}
	names := candidateNames(reports[0])
	size, err := panel(reports, names, "Size on disk (MiB), table + TOAST + indexes", func(i int, r report) float64 {
		return float64(r.Results[i].Bytes) / (1 << 20)
	})
	if err != nil {
		return err
	}
	p50, err := panel(reports, names, "Point lookup p50 (ms), through the service's lookup path", func(i int, r report) float64 {
		return r.Results[i].P50Seconds * 1000
	})
	if err != nil {
		return err
	}
	const w, h = 22 * vg.Centimeter, 20 * vg.Centimeter
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadX: vg.Centimeter / 2, PadY: vg.Centimeter / 2}
	canvases := plot.Align([][]*plot.Plot{{size}, {p50}}, tiles, dc)
	size.Draw(canvases[0][0])
	p50.Draw(canvases[1][0])
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func candidateNames(r report) []string {
	var names []string
	for _, res := range r.Results {
		names = append(names, res.Name)
	}
	return names
}

// panel draws one bar group per candidate and one bar per report.
func panel(reports []report, names []string, title string, value func(i int, r report) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Min = 0
	p.Legend.Top = true
	width := vg.Points(14)
	var top float64
	for ri, r := range reports {
		if len(r.Results) != len(names) {
			return nil, errors.New("the reports compare different candidates")
		}
		vals := make(plotter.Values, len(names))
		for i := range names {
			if r.Results[i].Name != names[i] {
				return nil, fmt.Errorf("candidate %d is %q in one report and %q in another", i, names[i], r.Results[i].Name)
			}
			if r.Results[i].Error == "" {
				vals[i] = value(i, r)
				top = max(top, vals[i])
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, err
		}
		bars.Color = palette[ri]
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(ri)-float64(len(reports)-1)/2)
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("%s (%d rows)", r.Namespace, r.Rows), bars)
	}
	p.Y.Max = top * 1.4 // room for the legend above the bars
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.35
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	return p, nil
}
