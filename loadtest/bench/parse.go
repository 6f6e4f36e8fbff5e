package bench

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var pgbenchTPS = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// ParsePgbenchTPS returns the transactions per second that pgbench printed
// ("tps = N (without initial connection time)"). Each transaction of the
// harness's script is one point lookup. It returns an error when the line
// is missing.
func ParsePgbenchTPS(out string) (float64, error) {
	m := pgbenchTPS.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("bench: no tps line in the pgbench output")
	}
	tps, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("bench: pgbench tps %q: %w", m[1], err)
	}
	return tps, nil
}

var pgbenchTransactions = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)

// ParsePgbenchTransactions returns the number of transactions that pgbench
// printed ("number of transactions actually processed: N"), or an error
// when the line is missing.
func ParsePgbenchTransactions(out string) (uint64, error) {
	m := pgbenchTransactions.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("bench: no transaction count in the pgbench output")
	}
	return strconv.ParseUint(m[1], 10, 64)
}

// ParsePgbenchLog reads a pgbench per-transaction log (--log) and returns
// each transaction's latency. A log written with --rate has a seventh
// field, the schedule lag, which is subtracted: the result is the time from
// sending the query to its answer, as a load generator measures it. It
// returns an error on a malformed line.
func ParsePgbenchLog(r io.Reader) ([]time.Duration, error) {
	var out []time.Duration
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 6 {
			return nil, fmt.Errorf("bench: pgbench log line %d: want at least 6 fields, got %d", line, len(f))
		}
		if f[2] == "skipped" {
			continue
		}
		us, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: pgbench log line %d: latency %q: %w", line, f[2], err)
		}
		if len(f) >= 7 {
			lag, err := strconv.ParseInt(f[6], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("bench: pgbench log line %d: schedule lag %q: %w", line, f[6], err)
			}
			us -= lag
		}
		out = append(out, time.Duration(max(us, 0))*time.Microsecond)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: read pgbench log: %w", err)
	}
	return out, nil
}

// RedisBenchmark is one test's line of `redis-benchmark --csv`.
type RedisBenchmark struct {
	RPS                float64
	P50, P95, P99, Max time.Duration
}

// ParseRedisBenchmarkCSV returns the line of test (e.g. "GET") from the
// output of `redis-benchmark --csv` (Redis 7: test, rps, avg, min, p50,
// p95, p99, max, latencies in milliseconds). It returns an error when the
// test is missing or a number is malformed.
func ParseRedisBenchmarkCSV(out, test string) (RedisBenchmark, error) {
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		return RedisBenchmark{}, fmt.Errorf("bench: redis-benchmark csv: %w", err)
	}
	if len(rows) == 0 {
		return RedisBenchmark{}, fmt.Errorf("bench: redis-benchmark printed nothing")
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, name := range []string{"test", "rps", "p50_latency_ms", "p95_latency_ms", "p99_latency_ms", "max_latency_ms"} {
		if _, ok := col[name]; !ok {
			return RedisBenchmark{}, fmt.Errorf("bench: redis-benchmark csv has no %q column", name)
		}
	}
	for _, row := range rows[1:] {
		if len(row) != len(rows[0]) || row[col["test"]] != test {
			continue
		}
		var rb RedisBenchmark
		if rb.RPS, err = strconv.ParseFloat(row[col["rps"]], 64); err != nil {
			return RedisBenchmark{}, fmt.Errorf("bench: redis-benchmark rps: %w", err)
		}
		for _, f := range []struct {
			name string
			p    *time.Duration
		}{{"p50_latency_ms", &rb.P50}, {"p95_latency_ms", &rb.P95}, {"p99_latency_ms", &rb.P99}, {"max_latency_ms", &rb.Max}} {
			ms, err := strconv.ParseFloat(row[col[f.name]], 64)
			if err != nil {
				return RedisBenchmark{}, fmt.Errorf("bench: redis-benchmark %s: %w", f.name, err)
			}
			*f.p = time.Duration(ms * float64(time.Millisecond))
		}
		return rb, nil
	}
	return RedisBenchmark{}, fmt.Errorf("bench: redis-benchmark csv has no %s line", test)
}

// PackageShare is the flat CPU share of one package in a profile.
type PackageShare struct {
	Package string
	Percent float64
}

var pprofTopLine = regexp.MustCompile(`^\s*[0-9.]+[a-zµ]*s?\s+([0-9.]+)%\s+[0-9.]+%\s+[0-9.]+[a-zµ]*s?\s+([0-9.]+)%\s+(.+)$`)

// SharesByPackage sums the flat percentages of `go tool pprof -top` output
// by package (the function name up to its last path element's first dot),
// largest first. Lines that are not function rows are skipped.
func SharesByPackage(top string) []PackageShare {
	sum := map[string]float64{}
	var order []string
	for _, line := range strings.Split(top, "\n") {
		m := pprofTopLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pct, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		pkg := packageOf(strings.TrimSpace(m[3]))
		if _, ok := sum[pkg]; !ok {
			order = append(order, pkg)
		}
		sum[pkg] += pct
	}
	out := make([]PackageShare, 0, len(order))
	for _, p := range order {
		out = append(out, PackageShare{Package: p, Percent: sum[p]})
	}
	// Stable insertion sort, largest first: the lists are short.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Percent > out[j-1].Percent; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// packageOf returns the import path of a pprof function name such as
// "github.com/redis/go-redis/v9.(*baseClient).Process" or "runtime.mallocgc".
func packageOf(fn string) string {
	fn, _, _ = strings.Cut(fn, " ") // drop "(inline)"
	slash := strings.LastIndex(fn, "/")
	dot := strings.Index(fn[slash+1:], ".")
	if dot < 0 {
		return "runtime" // an assembly routine such as aeshashbody or memeqbody
	}
	return fn[:slash+1+dot]
}

// SumSamples sums the samples of metric in Prometheus text exposition
// format whose labels include every pair of match. Other metrics, and
// series of the same name with a suffix (_bucket, _sum), are skipped.
func SumSamples(text, metric string, match map[string]string) float64 {
	total := 0.0
	eachSample(text, metric, match, func(_ string, v float64) { total += v })
	return total
}

// eachSample calls fn with the labels (as printed, without braces) and
// the value of every sample of metric in text whose labels include every
// pair of match.
func eachSample(text, metric string, match map[string]string, fn func(labels string, v float64)) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, metric) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(metric):]
		labels := ""
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue
		}
		ok := true
		for k, v := range match {
			if labelValue(labels, k) != v {
				ok = false
				break
			}
		}
		fields := strings.Fields(rest)
		if !ok || len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			fn(labels, v)
		}
	}
}

// labelValue returns the value of label name in labels as a sample prints
// them (name="value",...), or "" when it is absent. Values holding a
// comma or an escaped quote are not told apart: the service's are neither.
func labelValue(labels, name string) string {
	for _, pair := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if ok && k == name && len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			return v[1 : len(v)-1]
		}
	}
	return ""
}

// CumulativeShare returns the cumulative percentage of function fn (its
// full name as pprof prints it, without "(inline)") in `go tool pprof
// -top -cum` output, and whether fn appears there.
func CumulativeShare(top, fn string) (float64, bool) {
	for _, line := range strings.Split(top, "\n") {
		m := pprofTopLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSpace(m[3]), " (inline)")
		if name != fn {
			continue
		}
		pct, err := strconv.ParseFloat(m[2], 64)
		return pct, err == nil
	}
	return 0, false
}

var pprofSamples = regexp.MustCompile(`Duration: ([0-9.]+[a-zµ]*s), Total samples = [0-9.]+[a-zµ]*s \(\s*([0-9.]+)%\)`)

// ProfiledCores returns how many cores the profiled process kept busy on
// average: pprof's "Total samples = ... (N%)" of the duration, divided by
// 100. It returns false when the header is missing.
func ProfiledCores(top string) (float64, bool) {
	m := pprofSamples.FindStringSubmatch(top)
	if m == nil {
		return 0, false
	}
	pct, err := strconv.ParseFloat(m[2], 64)
	return pct / 100, err == nil
}

var pprofTotal = regexp.MustCompile(`Showing nodes accounting for [^,]+, [0-9.]+% of ([0-9.]+)([a-zA-Z]*) total`)

// AllocTotal returns the total of a `go tool pprof -top` output of an
// allocation profile: bytes for alloc_space (pprof prints units such as
// "1.50GB" and "512kB"), a count for alloc_objects. It returns false when
// the header is missing.
func AllocTotal(top string) (float64, bool) {
	m := pprofTotal.FindStringSubmatch(top)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	unit := map[string]float64{"": 1, "B": 1, "kB": 1 << 10, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40, "k": 1e3, "M": 1e6, "G": 1e9}
	mul, ok := unit[m[2]]
	if !ok {
		return 0, false
	}
	return v * mul, true
}
