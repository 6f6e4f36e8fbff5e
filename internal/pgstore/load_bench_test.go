package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// BenchmarkLoadVsRowInserts writes the same 5,000 widget rows (about 450
// bytes each, into a hash-partitioned table with its GIN index) once per
// iteration, each time with new values: as one bulk load (COPY into a
// staging table and one merge), and as 5,000 single upserts (each its own commit), the way a
// client calling PUT for each row would. It reports rows/s; only the
// ratio between the two carries to another machine.
//
//	go test -run '^$' -bench BenchmarkLoadVsRowInserts -benchtime 2x ./internal/pgstore/
func BenchmarkLoadVsRowInserts(b *testing.B) {
	const n = 5_000
	rows := func(iter int) []warmcache.LoadRow {
		out := make([]warmcache.LoadRow, n)
		for i := range out {
			k := int64(i + 1)
			out[i] = warmcache.LoadRow{Line: k, Key: warmcache.Key{Text: fmt.Sprint(k), Int: k},
				Value: fmt.Appendf(nil, `{"widget": {"debug": "on", "id": "%d", "iteration": %d, "window": {"title": "Sample Konfabulator Widget", "name": "main_window", "width": 500, "height": 500}, "image": {"src": "Images/Sun.png", "name": "sun1", "hOffset": 250, "vOffset": 250, "alignment": "center"}, "text": {"data": "Click Here", "size": 36, "style": "bold", "name": "text1", "hOffset": 250, "vOffset": 100, "alignment": "center"}}}`, k, iter)}
		}
		return out
	}
	for _, mode := range []string{"copy_merge", "row_at_a_time"} {
		b.Run(mode, func(b *testing.B) {
			widgets := widgetsNamespace()
			dsn := newDatabase(b, schema+"CREATE INDEX widgets_value_gin ON widgets USING gin (value jsonb_path_ops);")
			s := mustOpenStore(b, dsn, target{wantMode: "cache_statement"}, widgets)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			iter := 0
			var elapsed time.Duration
			for b.Loop() {
				iter++
				batch := rows(iter)
				start := time.Now()
				if mode == "copy_merge" {
					if _, err := s.Load(ctx, widgets, &sliceRows{rows: batch}); err != nil {
						b.Fatal(err)
					}
				} else {
					for _, r := range batch {
						if _, err := s.Put(ctx, widgets, r.Key, r.Value, nil); err != nil {
							b.Fatal(err)
						}
					}
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(n*iter)/elapsed.Seconds(), "rows/s")
		})
	}
}
