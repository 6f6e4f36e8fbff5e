package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// PutOneClient is the scenario of one client's PUTs of random keys, one
// at a time on one connection: nothing to fold.
const PutOneClient = "put-1"

// HotAtPutRate is the fixed-rate attack of Redis hits, with the write
// scenarios' workers, at the rate that `put` reached at saturation: the
// service's CPU per hit when requests arrive as often as the PUTs did.
// A service that is idle between requests pays each request's wake-ups
// (the kernel's, its scheduler's) alone; at saturation a wake-up serves
// many. So a PUT's CPU over a hit's at the same rate is what the PUT's own
// path costs beyond serving a request at that rate.
const HotAtPutRate = "hot@put-rate"

// foldSizeLowest is the least size of a write fold.
const foldSizeLowest = 1

// WriteFold is how the service folded single writes during an attack:
// the rise of its warmcache_write_fold_size histogram, writes per
// warehouse statement (one round trip, one commit). P50 and P99 are
// estimated from the buckets (Histogram.WholeQuantile: a fold is a whole
// number of writes, at least 1); Mean is exact. All three are zero
// without folds.
type WriteFold struct {
	Sizes          Histogram
	P50, P99, Mean float64
}

// NewWriteFold summarises the fold sizes of an attack.
func NewWriteFold(sizes Histogram) WriteFold {
	f := WriteFold{Sizes: sizes}
	if sizes.Count > 0 {
		f.P50, f.P99, f.Mean = sizes.WholeQuantile(0.50, foldSizeLowest), sizes.WholeQuantile(0.99, foldSizeLowest), sizes.Mean()
	}
	return f
}

// Alone is the fraction of the writes that went to the warehouse alone,
// in folds of one (exact: the first bucket holds folds of one only); NaN
// without writes.
func (f WriteFold) Alone() float64 {
	return Ratio(f.Sizes.AtMost(foldSizeLowest), f.Sizes.Sum)
}

// SingleClient is the write path with nothing to fold: one client's PUTs,
// one at a time on one connection, and pgbench's single client of the same
// upsert through the same PgBouncer, taking turns round by round.
type SingleClient struct {
	// Mode is pgbench's protocol (-M), that of the saturation reference.
	Mode    string
	Command string
	Rounds  []SingleRound
	// Put and Upsert are the percentiles over every round's requests.
	Put, Upsert Latency
	// Fold is how the service folded the PUTs of every round.
	Fold *WriteFold `json:",omitempty"`
}

// SingleRound is one turn of each: the PUTs, then pgbench.
type SingleRound struct {
	PutRate, UpsertRate float64
	Put, Upsert         Latency
}

// writeCostRows holds a PUT's latency against pgbench's of the same
// upsert, at saturation and with one client, and the service's CPU per
// PUT against its CPU per hit.
func (r *Report) writeCostRows() []TargetRow {
	var rows []TargetRow
	put, hasPut := r.Saturation[Put]
	row := TargetRow{Scenario: "`put`: p99 at saturation", Target: "≤ 2.0 × pgbench's p99 of the same upsert via PgBouncer, as many clients"}
	if ref := fastest(r.Upsert); hasPut && put.Latency.Count > 0 && ref != nil && ref.Latency.Count > 0 {
		ratio := Ratio(float64(put.Latency.P99), float64(ref.Latency.P99))
		row.Measured = fmt.Sprintf("%s × (%s vs %s, %s)", FormatRatio(ratio), FormatDuration(put.Latency.P99), FormatDuration(ref.Latency.P99), ref.Name)
		row.Verdict = verdict(ratio <= 2.0, ratio)
	}
	rows = append(rows, fill(row))
	for _, q := range []struct {
		name string
		of   func(Latency) time.Duration
	}{{"p50", func(l Latency) time.Duration { return l.P50 }}, {"p99", func(l Latency) time.Duration { return l.P99 }}} {
		row := TargetRow{Scenario: fmt.Sprintf("`%s`: one client's PUT, %s", PutOneClient, q.name), Target: fmt.Sprintf("≤ 1.5 × the %s of `pgbench -c 1` of the same upsert via PgBouncer", q.name)}
		if s := r.SingleClient; s != nil && s.Put.Count > 0 && s.Upsert.Count > 0 {
			ratio := Ratio(float64(q.of(s.Put)), float64(q.of(s.Upsert)))
			row.Measured = fmt.Sprintf("%s × (%s vs %s, %d rounds)", FormatRatio(ratio), FormatDuration(q.of(s.Put)), FormatDuration(q.of(s.Upsert)), len(s.Rounds))
			row.Verdict = verdict(ratio <= 1.5, ratio)
		}
		rows = append(rows, fill(row))
	}
	hot, hasHot := r.Saturation[Hot]
	rows = append(rows, cpuTargetRow("`put`: the service's CPU per PUT", "≤ 4.0 × its CPU per hit (`hot`)", 4.0,
		put, hasPut && hasHot && put.CPU != nil && hot.CPU != nil, hot, ProcServer))
	if same, ok := r.Fixed[HotAtPutRate]; ok && hasPut && put.CPU != nil && same.CPU != nil {
		row := cpuTargetRow(fmt.Sprintf("`put`: the service's CPU per PUT against a hit at the PUT's rate (`%s`, %s/s)", HotAtPutRate, FormatRate(same.Rate)),
			"none: a reference for the row above", math.Inf(1), put, true, same, ProcServer)
		row.Verdict = "reference"
		rows = append(rows, row)
	}
	return rows
}

// writeWrites writes the write attacks' fold sizes, their latency at
// saturation against pgbench's, and the single client's turns.
func (r *Report) writeWrites(p func(string, ...any)) {
	names := slices.DeleteFunc([]string{Put, PutIfMatch, Delete}, func(n string) bool { _, ok := r.Saturation[n]; return !ok })
	if len(names) == 0 && r.SingleClient == nil {
		return
	}
	p("## Writes: folds and latency\n\n")
	r.writeFoldSizes(p, names)
	r.writeWriteLatency(p, names)
	r.writeSingleClient(p)
}

// writeFoldSizes writes the fold sizes of each write attack.
func (r *Report) writeFoldSizes(p func(string, ...any), names []string) {
	p("Writes per warehouse statement (one round trip, one commit): the rise of the service's `warmcache_write_fold_size` histogram over each measured attack, its warm-up left out. ")
	p("The median and p99 are of the folds, read from the buckets (bounds 1, 2, 4, …, 128) as nearest-rank quantiles with each bucket's folds spread evenly over the whole sizes it holds (5 to 8 writes in the bucket (4, 8]), the whole-number form of the linear interpolation of Prometheus's `histogram_quantile`: exact up to 2, estimates within a power-of-two bucket above. ")
	p("The mean (writes ÷ folds) and the writes that went alone (the `le=\"1\"` bucket) are exact.\n\n")
	p("| attack | folds | writes | writes per fold: mean | median | p99 | writes alone |\n|---|---:|---:|---:|---:|---:|---:|\n")
	row := func(name string, f *WriteFold) {
		if f == nil {
			p("| `%s` | n/a | n/a | n/a | n/a | n/a | n/a |\n", name)
			return
		}
		s := f.Sizes
		p("| `%s` | %s | %s | %s | %s | %s | %s |\n", name, FormatRate(s.Count), FormatRate(s.Sum),
			formatSize(s.Mean()), FormatRate(s.WholeQuantile(0.50, foldSizeLowest)), FormatRate(s.WholeQuantile(0.99, foldSizeLowest)), FormatPercent(f.Alone()))
	}
	for _, name := range names {
		row(name, r.Saturation[name].WriteFold)
	}
	if s := r.SingleClient; s != nil {
		row(PutOneClient, s.Fold)
	}
	p("\n")
}

// writeWriteLatency writes the write attacks' latency at saturation, and
// that of pgbench's upserts from their transaction logs.
func (r *Report) writeWriteLatency(p func(string, ...any), names []string) {
	ref := fastest(r.Upsert)
	p("Latency at saturation, each attack with %d workers and each pgbench with as many clients: for the service, the client's time from sending a request to reading its whole answer; ", r.writeWorkers())
	p("for pgbench, each transaction's time in its log (`--log`, one line per transaction). Exact nearest-rank percentiles over every request. ")
	p("The reference is %s, the throughput reference of the targets.\n\n", orNA(refName(ref)))
	p("| attack | req/s | p50 | p90 | p99 | max | p99 ÷ reference |\n|---|---:|---:|---:|---:|---:|---:|\n")
	refP99 := math.NaN()
	if ref != nil && ref.Latency.Count > 0 {
		refP99 = float64(ref.Latency.P99)
	}
	line := func(name string, rate float64, l Latency) {
		p("| %s | %s | %s | %s | %s | %s | %s |\n", name, FormatRate(rate), FormatDuration(l.P50), FormatDuration(l.P90),
			FormatDuration(l.P99), FormatDuration(l.Max), FormatRatio(Ratio(float64(l.P99), refP99)))
	}
	for _, name := range names {
		if run := r.Saturation[name]; run.Latency.Count > 0 {
			line("`"+name+"`", run.Throughput, run.Latency)
		}
	}
	for _, b := range slices.Concat(r.Upsert, r.WriteFunction, r.PeerUpsert) {
		if b != nil && b.Latency.Count > 0 {
			line(b.Name, b.Throughput, b.Latency)
		}
	}
	p("\n")
}

// writeSingleClient writes the single client's turns and their percentiles
// over all rounds.
func (r *Report) writeSingleClient(p func(string, ...any)) {
	s := r.SingleClient
	if s == nil {
		return
	}
	p("One client, nothing to fold: `%s` PUTs random keys one at a time on one keep-alive connection, then pgbench runs the same upsert with one client on one connection through the same PgBouncer (`%s`), for %s each, taking turns for %d rounds. ",
		PutOneClient, s.Command, r.Env.Duration, len(s.Rounds))
	p("Latency as above; the last line's percentiles are over every round's requests.\n\n")
	p("| round | PUT/s | upserts/s | PUT p50 | upsert p50 | p50 ratio | PUT p99 | upsert p99 | p99 ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	line := func(name, putRate, upsertRate string, put, up Latency) {
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, putRate, upsertRate,
			FormatDuration(put.P50), FormatDuration(up.P50), FormatRatio(Ratio(float64(put.P50), float64(up.P50))),
			FormatDuration(put.P99), FormatDuration(up.P99), FormatRatio(Ratio(float64(put.P99), float64(up.P99))))
	}
	for i, rd := range s.Rounds {
		line(fmt.Sprint(i+1), FormatRate(rd.PutRate), FormatRate(rd.UpsertRate), rd.Put, rd.Upsert)
	}
	line("all", "", "", s.Put, s.Upsert)
	p("\n")
}

func refName(b *Baseline) string {
	if b == nil {
		return ""
	}
	return b.Name
}

// formatSize prints a mean fold size with one decimal, or "n/a" for NaN.
func formatSize(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", v)
}
