package bench_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// The write path's latency and CPU rows are not measured where a run left
// out what they compare, and the report still writes and encodes.
func TestWriteCostRowsNotMeasured(t *testing.T) {
	r := sampleReport()
	put := r.Saturation[bench.Put]
	put.CPU, put.Latency = nil, bench.Latency{}
	empty := bench.NewWriteFold(bench.Histogram{Buckets: []bench.Bucket{{UpperBound: 1}}})
	put.WriteFold = &empty // a write attack that folded nothing
	r.Saturation[bench.Put] = put
	r.SingleClient = nil
	rows := r.Targets()
	costs := rows[len(rows)-4:]
	for _, row := range costs {
		if row.Verdict != bench.NotMeasured || row.Measured != "—" {
			t.Errorf("%s: measured %q, verdict %q; want not measured", row.Scenario, row.Measured, row.Verdict)
		}
	}
	var md, js bytes.Buffer
	if err := r.WriteMarkdown(&md, "results"); err != nil {
		t.Fatal(err)
	}
	if want := "| `put` | 0 | 0 | n/a | n/a | n/a | n/a |"; !strings.Contains(md.String(), want) {
		t.Errorf("markdown lacks %q", want)
	}
	if strings.Contains(md.String(), "One client, nothing to fold") {
		t.Error("markdown describes a single client that did not run")
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatalf("WriteJSON of a write attack without folds: %v", err)
	}
}
