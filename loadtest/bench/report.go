package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Scenario names.
const (
	Floor    = "floor"
	FloorMW  = "floor-mw" // the floor behind the service's REST middleware
	Hot      = "hot"
	L1       = "l1"
	Miss     = "miss"
	Mixed    = "mixed"
	MGet     = "mget"
	Stampede = "stampede"
	// GRPCFloor and GRPC are Get calls: a constant gRPC server, and the
	// service's Cache.Get on Redis hits.
	GRPCFloor = "grpc-floor"
	GRPC      = "grpc"
	// PeerHot and PeerMiss are the hand-written cache-aside (`loadtest
	// peer`) on the hot keys and on cold keys: the reference of warmcache's
	// hits and misses.
	PeerHot  = "peer-hot"
	PeerMiss = "peer-miss"
	// Put, PutIfMatch and Delete are REST writes of random keys: an
	// upsert, an upsert at the key's current version (If-Match), and a
	// delete, each key of the last two written once.
	Put        = "put"
	PutIfMatch = "put-if-match"
	Delete     = "delete"
)

// X-Cache header values that the report counts.
const (
	SourceL1   = "hit-l1"
	SourceHot  = "hit"
	SourceMiss = "miss"
)

// Run is the outcome of one attack on one scenario.
type Run struct {
	Scenario string
	// Rate is the requested rate in requests per second; zero means the
	// attack ran at saturation with Workers workers and no pacing.
	Rate     float64
	Workers  int
	Duration time.Duration
	Requests uint64
	// Throughput counts successful requests per second.
	Throughput float64
	// Success is the fraction of 2xx answers.
	Success float64
	// KeysPerRequest is the number of keys one request asks for: 1, or the
	// batch size of mget.
	KeysPerRequest int
	Latency        Latency
	// Sources counts the X-Cache header of the answers ("" when absent).
	Sources map[string]uint64
	// Errors are the distinct errors, at most a few.
	Errors []string
	// CPU is what each process used during the attack; nil when not
	// measured.
	CPU *CPU
	// Fold is how the service folded reads during the attack (and its
	// warm-up); nil when not measured.
	Fold *Fold
	// WriteFold is how the service folded writes during the attack (not
	// its warm-up); nil when not measured.
	WriteFold *WriteFold `json:",omitempty"`
}

// Fold counts the service's folded reads (its warmcache_batch_keys
// histogram) over an attack: batches and keys per tier.
type Fold struct {
	SQLQueries, SQLKeys     float64
	RedisBatches, RedisKeys float64
	// LaneSpills counts the Redis read lanes the service opened beyond
	// its --hot-lanes (warmcache_hot_lane_spills_total).
	LaneSpills float64
	// The time the service spent in each tier call, from its
	// warmcache_sql_query_duration_seconds (lookups) and
	// warmcache_redis_duration_seconds (reads and fills) histograms: with
	// the counts above, the mean time of one call.
	SQLSeconds                   float64
	RedisReads, RedisReadSeconds float64
	Fills, FillSeconds           float64
}

// Since returns what f counted after before was taken.
func (f Fold) Since(before Fold) Fold {
	return Fold{
		SQLQueries: f.SQLQueries - before.SQLQueries, SQLKeys: f.SQLKeys - before.SQLKeys,
		RedisBatches: f.RedisBatches - before.RedisBatches, RedisKeys: f.RedisKeys - before.RedisKeys,
		LaneSpills: f.LaneSpills - before.LaneSpills,
		SQLSeconds: f.SQLSeconds - before.SQLSeconds,
		RedisReads: f.RedisReads - before.RedisReads, RedisReadSeconds: f.RedisReadSeconds - before.RedisReadSeconds,
		Fills: f.Fills - before.Fills, FillSeconds: f.FillSeconds - before.FillSeconds,
	}
}

// meanCall formats the mean time of one of n calls that took seconds in
// all, or "n/a" without calls.
func meanCall(seconds, n float64) string {
	if n == 0 {
		return "n/a"
	}
	return FormatDuration(time.Duration(seconds / n * float64(time.Second)))
}

// KeysPerSecond is Throughput times KeysPerRequest.
func (r Run) KeysPerSecond() float64 {
	return r.Throughput * float64(max(r.KeysPerRequest, 1))
}

// SourceFraction is the fraction of answers whose X-Cache was src, or NaN
// when the run has no answers.
func (r Run) SourceFraction(src string) float64 {
	var total uint64
	for _, n := range r.Sources {
		total += n
	}
	if total == 0 {
		return math.NaN()
	}
	return float64(r.Sources[src]) / float64(total)
}

// Baseline is a measurement by a reference tool (pgbench, redis-benchmark)
// in the same run.
type Baseline struct {
	Name string
	// Mode is pgbench's protocol (-M); empty for other tools.
	Mode    string `json:",omitempty"`
	Command string
	Clients int
	// Rate is the requested rate; zero means saturation.
	Rate       float64
	Throughput float64
	Latency    Latency
	// NoP90 is set when the tool does not report a 90th percentile.
	NoP90 bool
	// CPU is what each process used during the run; nil when not
	// measured.
	CPU *CPU
}

// StampedeRun is the outcome of N concurrent requests for one cold key.
type StampedeRun struct {
	Requests int
	OK       int
	Sources  map[string]uint64
	// SQLQueries is the rise of the service's warmcache_sql_queries_total
	// during the stampede.
	SQLQueries float64
	// IndexScans is the rise of idx_scan in pg_stat_user_tables over the
	// table's partitions; negative when it could not be read.
	IndexScans int64
	Wall       time.Duration
	Latency    Latency
}

// Profile is a CPU and an allocation profile of the service taken during
// an extra attack on one path.
type Profile struct {
	// Path is the scenario the attack ran (hot, l1, miss, grpc).
	Path    string
	Command string
	// Top and TopCum are `go tool pprof -top` output of the CPU profile,
	// sorted by flat and by cumulative time.
	Top, TopCum string
	// Allocs is `go tool pprof -top -sample_index=alloc_space` output of
	// the allocations made during the attack; AllocObjects the same by
	// alloc_objects.
	Allocs, AllocObjects string
	// Requests is the number of requests answered during the profile, so
	// that allocations can be read per request.
	Requests uint64
}

// profileFrames are the frames whose cumulative share the report shows,
// with what each one stands for.
var profileFrames = []struct{ fn, what string }{
	{"net/http.(*conn).serve", "all HTTP request handling"},
	{"net/http.(*conn).readRequest", "reading and parsing requests"},
	{"net/http.(*response).finishRequest", "flushing responses to the socket"},
	{"github.com/warmcache/warmcache/internal/httpapi.(*metrics).middleware-fm.(*metrics).middleware.func1", "the REST middleware chain and handler"},
	{"github.com/warmcache/warmcache/internal/warmcache.(*Service).Get", "the core's read path"},
	{"github.com/redis/go-redis/v9.(*Client).Process", "one Redis command round trip (go-redis)"},
	{"github.com/redis/go-redis/v9.(*baseClient).pipelineProcessCmds", "Redis pipelines"},
	{"internal/runtime/syscall/linux.Syscall6", "system calls (socket reads and writes)"},
	{"runtime.gcBgMarkWorker", "garbage collection (background marking)"},
	{"runtime.schedule", "the goroutine scheduler"},
}

// Environment describes where and how the run happened.
type Environment struct {
	Start        time.Time
	CPUs         int
	GoVersion    string
	PostgreSQL   string
	Redis        string
	Rows         int64
	ValueBytes   int
	FloorBytes   int
	Workers      int
	Duration     time.Duration
	Warmup       time.Duration
	ViaPgBouncer bool
	// Capture says the service followed the table's changes by change
	// capture, as the local stack deploys it, rather than by polling.
	Capture      bool
	NearCacheEnv []string
	ZipfS        float64
	HotKeys      int
	MGetBatch    int
	Command      string
	// PGAddr and PgBouncerAddr are the warehouse's addresses, direct and
	// through the pooler.
	PGAddr, PgBouncerAddr string
	// GRPCConns is the number of client connections of a gRPC attack.
	GRPCConns int
	// LoadStart and LoadEnd are the machine's 1-minute load averages
	// (/proc/loadavg) when the run started and ended; empty when unknown.
	LoadStart, LoadEnd string
	// Pinning says where the servers and the load generators ran.
	Pinning string
	// Pinned is true when they ran on separate CPUs.
	Pinned bool
}

// Report is everything one harness run measured.
type Report struct {
	Env Environment
	// Saturation and Fixed hold the runs by scenario name.
	Saturation map[string]Run
	Fixed      map[string]Run
	// PgbenchSat and PgbenchRate are the direct warehouse baselines
	// (pgbench -M prepared) at saturation and at the miss scenario's fixed
	// rate.
	PgbenchSat, PgbenchRate *Baseline
	// Pooler holds pgbench through the same PgBouncer as the service, one
	// run per protocol; the fastest is the miss path's reference.
	Pooler []*Baseline
	// Upsert holds pgbench of the service's upsert on the same table
	// through the same PgBouncer, one run per protocol, the fastest the
	// write path's reference; PeerUpsert the same of the peer's upsert on
	// a table of its own, without versions.
	Upsert, PeerUpsert []*Baseline
	// WriteFunction holds pgbench of the table's write function, called as
	// the service calls it for a PUT: the warehouse's share of a PUT, with
	// the locks and the version draw that order its writes.
	WriteFunction []*Baseline
	// SingleClient is one client's PUTs against pgbench's one client of
	// the same upsert; nil when not measured.
	SingleClient *SingleClient `json:",omitempty"`
	RedisGet     *Baseline
	Stampede     *StampedeRun
	Profiles     []Profile
	// Notes are remarks from the run (skipped steps, failures).
	Notes []string
	// Dapr is the dapr scenario's section of the report, rendered by the
	// harness (loadtest/dapr.go); empty when it did not run.
	Dapr string `json:",omitempty"`
	// Monitor is the monitor scenario's section of the report, rendered by
	// the harness (loadtest/monitor.go); empty when it did not run.
	Monitor string `json:",omitempty"`

	// Before is an earlier run (of an earlier build) to compare with, as
	// read from its results.json; nil for none.
	Before *Report `json:"-"`
	// BeforeLabel says what Before measured, such as the build's commit.
	BeforeLabel string `json:"-"`

	chartDir string // where WriteMarkdown links the charts
}

// Verdicts of a target.
const (
	Pass        = "pass"
	Missed      = "miss"
	NotMeasured = "not measured"
)

// TargetRow is one line of the target table.
type TargetRow struct {
	Scenario string
	Target   string
	Measured string
	Verdict  string
}

// PoolerReference returns the fastest pgbench run through PgBouncer, the
// reference of the miss path, or nil when none was measured.
func (r *Report) PoolerReference() *Baseline { return fastest(r.Pooler) }

// UpsertReference returns the fastest pgbench of the service's upsert
// through PgBouncer, the reference of the write path, or nil when none was
// measured.
func (r *Report) UpsertReference() *Baseline { return fastest(r.Upsert) }

// fastest returns the baseline of bs with the highest throughput, or nil.
func fastest(bs []*Baseline) *Baseline {
	var best *Baseline
	for _, b := range bs {
		if b != nil && (best == nil || b.Throughput > best.Throughput) {
			best = b
		}
	}
	return best
}

// Targets evaluates the targets against the report: warmcache against
// the peer (the hand-written cache-aside on the same Redis and
// PostgreSQL), against pgbench of the same lookup through the same
// PgBouncer, and the near cache against the constant-body floor.
func (r *Report) Targets() []TargetRow {
	peerHot, hasPeerHot := r.Saturation[PeerHot]
	peerMiss, hasPeerMiss := r.Saturation[PeerMiss]
	hot, hasHot := r.Saturation[Hot]
	miss, hasMiss := r.Saturation[Miss]
	rows := make([]TargetRow, 0, 11)

	rows = append(rows, throughputRow("`hot` (Redis hit) throughput at saturation", "≥ 1.3 × `peer-hot`", 1.3,
		hot, hasHot, peerHot, hasPeerHot, "req/s", SourceHot))
	rows = append(rows, cpuTargetRow("`hot`: the service's CPU per hit", "≤ 1.0 × the peer's CPU per hit", 1.0,
		hot, hasHot && hasPeerHot, peerHot, ProcServer))
	rows = append(rows, cpuTargetRow("`hot`: Redis's CPU per hit", "≤ 0.5 × Redis's CPU per peer hit", 0.5,
		hot, hasHot && hasPeerHot, peerHot, ProcRedis))

	ref := r.PoolerReference()
	row := TargetRow{Scenario: "`miss` lookups/s with a cold cache", Target: "≥ 1.0 × pgbench through the same PgBouncer at the same concurrency"}
	if hasMiss && ref != nil {
		ratio := Ratio(miss.Throughput, ref.Throughput)
		row.Measured = fmt.Sprintf("%s × (%s vs %s lookups/s, %s; %s `miss`)", FormatRatio(ratio), FormatRate(miss.Throughput), FormatRate(ref.Throughput), ref.Name, FormatPercent(miss.SourceFraction(SourceMiss)))
		if d := r.PgbenchSat; d != nil {
			row.Measured += fmt.Sprintf("; %s × direct `pgbench -M prepared`", FormatRatio(Ratio(miss.Throughput, d.Throughput)))
		}
		row.Verdict = verdict(ratio >= 1.0, ratio)
	}
	rows = append(rows, fill(row))
	rows = append(rows, throughputRow("`miss` lookups/s with a cold cache, against the peer", "≥ 1.5 × `peer-miss`", 1.5,
		miss, hasMiss, peerMiss, hasPeerMiss, "lookups/s", SourceMiss))
	rows = append(rows, cpuTargetRow("`miss`: PostgreSQL's and PgBouncer's CPU per miss", "≤ 0.5 × the peer's", 0.5,
		miss, hasMiss && hasPeerMiss, peerMiss, ProcPostgres, ProcPgBouncer))

	floor, hasFloor := r.Saturation[Floor]
	l1, hasL1 := r.Saturation[L1]
	rows = append(rows, nearRow(throughputRow("`l1` (near-cache hit) throughput at saturation", "≥ 0.90 × `floor`", 0.90,
		l1, hasL1, floor, hasFloor, "req/s", SourceL1), l1, hasL1))
	rows = append(rows, nearRow(throughputRow(fmt.Sprintf("`l1` on Zipf keys (s = %g) with the near cache on, against the peer", r.Env.ZipfS), "≥ 2.0 × `peer-hot`", 2.0,
		l1, hasL1, peerHot, hasPeerHot, "req/s", SourceL1), l1, hasL1))

	row = TargetRow{Scenario: "p99 of `hot` at half of its saturation rate", Target: "≤ 1.5 × the peer's p99 at the same rate"}
	if h, ok := r.Fixed[Hot]; ok && h.Latency.Count > 0 {
		row.Measured = fmt.Sprintf("%s at %s req/s", FormatDuration(h.Latency.P99), FormatRate(h.Rate))
		if p, ok := r.Fixed[PeerHot]; ok && p.Latency.Count > 0 {
			ratio := Ratio(float64(h.Latency.P99), float64(p.Latency.P99))
			row.Measured = fmt.Sprintf("%s × (%s vs %s at %s req/s)", FormatRatio(ratio), FormatDuration(h.Latency.P99), FormatDuration(p.Latency.P99), FormatRate(h.Rate))
			row.Verdict = verdict(ratio <= 1.5, ratio)
		}
	}
	rows = append(rows, fill(row))

	g, hasG := r.Saturation[GRPC]
	rows = append(rows, throughputRow("`grpc` (Get, Redis hit) throughput at saturation", "≥ 1.3 × `peer-hot` (REST)", 1.3,
		g, hasG, peerHot, hasPeerHot, "calls/s", SourceHot))

	row = TargetRow{Scenario: fmt.Sprintf("`stampede`: %d concurrent requests for one cold key", r.stampedeN()), Target: "1 SQL query"}
	if s := r.Stampede; s != nil {
		row.Measured = fmt.Sprintf("%s (service counter); %s (idx_scan)", formatCount(s.SQLQueries), formatScans(s.IndexScans))
		ok := s.SQLQueries == 1 && s.OK == s.Requests
		row.Verdict = verdict(ok, 1)
	}
	rows = append(rows, fill(row))
	return append(rows, r.writeTargetRows()...)
}

// writeTargetRows holds the write scenarios against pgbench of the same
// upsert on the same table, and of the peer's on its own, through the
// same PgBouncer at the same concurrency, and counts their round trips.
func (r *Report) writeTargetRows() []TargetRow {
	var rows []TargetRow
	upsert, peer := fastest(r.Upsert), fastest(r.PeerUpsert)
	for _, w := range []struct{ name, what string }{{Put, "PUT"}, {PutIfMatch, "conditional PUT (If-Match)"}, {Delete, "DELETE"}} {
		run, ok := r.Saturation[w.name]
		row := TargetRow{Scenario: fmt.Sprintf("`%s`: %s/s of random keys", w.name, w.what), Target: "≥ 1.0 × pgbench of the same upsert on the same table via PgBouncer"}
		if ok && upsert != nil {
			ratio := Ratio(run.Throughput, upsert.Throughput)
			row.Measured = fmt.Sprintf("%s × (%s vs %s/s, %s; %s success)", FormatRatio(ratio), FormatRate(run.Throughput), FormatRate(upsert.Throughput), upsert.Name, FormatPercent(run.Success))
			row.Verdict = verdict(ratio >= 1, ratio)
		}
		rows = append(rows, fill(row))
	}
	run, ok := r.Saturation[Put]
	row := TargetRow{Scenario: "`put`: PUT/s against the peer's upsert on its own table", Target: "≥ 0.6 × pgbench of the peer's upsert via PgBouncer"}
	if ok && peer != nil {
		ratio := Ratio(run.Throughput, peer.Throughput)
		row.Measured = fmt.Sprintf("%s × (%s vs %s/s, %s)", FormatRatio(ratio), FormatRate(run.Throughput), FormatRate(peer.Throughput), peer.Name)
		row.Verdict = verdict(ratio >= 0.6, ratio)
	}
	return append(append(rows, fill(row)), r.writeCostRows()...)
}

// throughputRow holds run's throughput against ref's: at least min times.
func throughputRow(scenario, target string, min float64, run Run, hasRun bool, ref Run, hasRef bool, unit, source string) TargetRow {
	row := TargetRow{Scenario: scenario, Target: target}
	if hasRun && hasRef {
		ratio := Ratio(run.Throughput, ref.Throughput)
		row.Measured = fmt.Sprintf("%s × (%s vs %s %s; %s `%s`)", FormatRatio(ratio), FormatRate(run.Throughput), FormatRate(ref.Throughput), unit, FormatPercent(run.SourceFraction(source)), source)
		row.Verdict = verdict(ratio >= min, ratio)
	}
	return fill(row)
}

// cpuTargetRow holds the CPU per request of groups (summed) during run against
// the same during ref: at most max times.
func cpuTargetRow(scenario, target string, max float64, run Run, measured bool, ref Run, groups ...string) TargetRow {
	row := TargetRow{Scenario: scenario, Target: target}
	if measured {
		var a, b float64
		for _, g := range groups {
			a += orZero(run.CPU.PerRequest(g), len(groups))
			b += orZero(ref.CPU.PerRequest(g), len(groups))
		}
		ratio := Ratio(a, b)
		if !math.IsNaN(a) && !math.IsNaN(b) {
			row.Measured = fmt.Sprintf("%s × (%s vs %s)", FormatRatio(ratio), FormatMicros(a), FormatMicros(b))
			row.Verdict = verdict(ratio <= max, ratio)
		}
	}
	return fill(row)
}

// orZero counts a group that was not measured as zero in a sum of several
// (PgBouncer is idle when the peer reads PostgreSQL directly), and keeps it
// NaN when it is the only one.
func orZero(us float64, groups int) float64 {
	if math.IsNaN(us) && groups > 1 {
		return 0
	}
	return us
}

// nearRow marks row as not measured when the l1 run was not answered from
// a near cache.
func nearRow(row TargetRow, l1 Run, hasL1 bool) TargetRow {
	if frac := l1.SourceFraction(SourceL1); hasL1 && row.Verdict != NotMeasured && !(frac >= 0.9) {
		row.Verdict = NotMeasured + ": the service answered " + FormatPercent(frac) + " from a near cache"
	}
	return row
}

// writeWorkers is the workers of the write attacks.
func (r *Report) writeWorkers() int {
	return r.Saturation[Put].Workers
}

func (r *Report) stampedeN() int {
	if r.Stampede == nil {
		return 500
	}
	return r.Stampede.Requests
}

func verdict(ok bool, ratio float64) string {
	switch {
	case math.IsNaN(ratio):
		return NotMeasured
	case ok:
		return Pass
	default:
		return Missed
	}
}

func fill(row TargetRow) TargetRow {
	if row.Verdict == "" {
		row.Verdict = NotMeasured
	}
	if row.Measured == "" {
		row.Measured = "—"
	}
	return row
}

// FormatRatio prints a ratio with two decimals, or "n/a" for NaN.
func FormatRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", r)
}

// FormatRate prints a rate rounded to a whole number with thousands
// separators, e.g. 12345.6 -> "12,346".
func FormatRate(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	n := int64(math.Round(r))
	s := fmt.Sprint(max(n, -n))
	var b strings.Builder
	if n < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// FormatPercent prints a fraction as a percentage with one decimal, or
// "n/a" for NaN.
func FormatPercent(f float64) string {
	if math.IsNaN(f) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

// FormatDuration prints a latency in milliseconds with three significant
// decimals below 10 ms (e.g. "0.412 ms", "12.3 ms").
func FormatDuration(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 10:
		return fmt.Sprintf("%.3f ms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.0f ms", ms)
	}
}

// shortFrame drops the module path of a frame for display.
func shortFrame(fn string) string {
	fn = strings.TrimPrefix(fn, "github.com/warmcache/warmcache/")
	if i := strings.Index(fn, ".func1"); i > 0 && strings.Contains(fn, "-fm.") {
		fn = fn[:strings.Index(fn, "-fm.")]
	}
	return fn
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

func formatCount(f float64) string {
	if f == math.Trunc(f) {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.1f", f)
}

func formatScans(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprint(n)
}

func formatSources(m map[string]uint64) string {
	if len(m) == 0 {
		return "—"
	}
	var total uint64
	names := make([]string, 0, len(m))
	for k, n := range m {
		total += n
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		label := k
		if label == "" {
			label = "none"
		}
		parts = append(parts, fmt.Sprintf("%s %s", label, FormatPercent(float64(m[k])/float64(total))))
	}
	return strings.Join(parts, ", ")
}

// Scenario order in the tables.
var scenarioOrder = []string{Floor, FloorMW, PeerHot, Hot, L1, PeerMiss, Miss, Mixed, MGet, GRPCFloor, GRPC, Put, HotAtPutRate, PutIfMatch, Delete}

// WriteMarkdown writes the report as markdown. Charts are linked from
// chartDir, relative to the markdown file.
func (r *Report) WriteMarkdown(w io.Writer, chartDir string) error {
	r.chartDir = chartDir
	ew := &errWriter{w: w}
	p := func(format string, args ...any) { fmt.Fprintf(ew, format, args...) }
	r.writeIntro(p)
	r.writeTargets(p)
	r.writeBeforeAfter(p)
	r.writeThroughput(p)
	r.writeFolding(p)
	r.writeCPU(p)
	r.writeLatency(p)
	r.writeWrites(p)
	r.writeStampede(p)
	r.writeBaselines(p)
	r.writeProfiles(p)
	r.writeSetup(p)
	return ew.err
}

// writeIntro writes the title, the machine and the command that reproduces the run.
func (r *Report) writeIntro(p func(string, ...any)) {
	e := r.Env
	p("# Load test results\n\n")
	p("One run of `make bench` (the harness in `loadtest/`) on %s: %d CPUs, %s, PostgreSQL %s, Redis %s.\n",
		e.Start.UTC().Format("2006-01-02 15:04 UTC"), e.CPUs, e.GoVersion, e.PostgreSQL, e.Redis)
	p("Every number below is from that one run, and every ratio is against a baseline measured in the same run. ")
	if e.Pinned {
		p("The servers (the service, the floors, the peer, PostgreSQL, PgBouncer and Redis) and the load generators (vegeta and the gRPC client in the harness process, pgbench, redis-benchmark) ran on separate CPUs: %s. ", e.Pinning)
		p("So the load generator's own CPU stays out of the servers' throughput, and the ratios compare servers that had the same core.\n\n")
	} else {
		p("The load generator (vegeta, in the harness process), the service, the floor server, the peer, PostgreSQL, PgBouncer and Redis ")
		p("all share the same %d cores (%s), so absolute rates say little about a dedicated machine; the ratios are what the targets are about.\n\n", e.CPUs, orNA(e.Pinning))
	}
	if e.LoadStart != "" || e.LoadEnd != "" {
		p("The machine's 1-minute load average was %s when the run started and %s when it ended; ", orNA(e.LoadStart), orNA(e.LoadEnd))
		p("much above %d means other work competed for the cores during the run.\n\n", e.CPUs)
	}
	p("Reproduce:\n\n```sh\n%s\n```\n\n", e.Command)
}

// writeTargets writes the table of targets and verdicts.
func (r *Report) writeTargets(p func(string, ...any)) {
	p("## Targets\n\n")
	p("| scenario | target | measured | verdict |\n|---|---|---|---|\n")
	for _, t := range r.Targets() {
		p("| %s | %s | %s | %s |\n", t.Scenario, t.Target, t.Measured, t.Verdict)
	}
	p("\n")
}

// writeThroughput writes the throughput at saturation of every scenario and baseline.
func (r *Report) writeThroughput(p func(string, ...any)) {
	e := r.Env
	p("## Throughput at saturation\n\n")
	p("Each attack: %d vegeta workers without pacing (each sends its next request when the previous one is answered), %s after a %s warm-up, keep-alive connections over loopback. ",
		e.Workers, e.Duration, e.Warmup)
	p("Rates count successful answers only.\n\n")
	p("| scenario | req/s | keys/s | ratio | baseline | X-Cache | success |\n|---|---:|---:|---:|---|---|---:|\n")
	for _, name := range scenarioOrder {
		run, ok := r.Saturation[name]
		if !ok {
			continue
		}
		ratio, base := r.throughputBaseline(name, run)
		p("| `%s` | %s | %s | %s | %s | %s | %s |\n", name, FormatRate(run.Throughput), FormatRate(run.KeysPerSecond()),
			FormatRatio(ratio), base, formatSources(run.Sources), FormatPercent(run.Success))
	}
	for _, b := range r.baselines() {
		p("| %s (baseline) | %s | %s | | | | |\n", b.Name, FormatRate(b.Throughput), FormatRate(b.Throughput))
	}
	p("\n![throughput at saturation](%s/throughput.png)\n\n", r.chartDir)
}

// writeFolding writes how the service folded its reads during each scenario that measured it.
func (r *Report) writeFolding(p func(string, ...any)) {
	for _, name := range scenarioOrder {
		if f := r.Saturation[name].Fold; f != nil && f.SQLQueries == 0 {
			p("Folding during `%s` (its warm-up included): %s keys per Redis read batch (%s batches; %s lanes opened beyond `--hot-lanes`).\n\n",
				name, formatPerBatch(f.RedisKeys, f.RedisBatches), FormatRate(f.RedisBatches), FormatRate(f.LaneSpills))
		} else if f != nil {
			p("Folding during `%s` (its warm-up included): %s keys per warehouse query (%s queries), %s keys per Redis read batch (%s batches). Mean time of one call, as the service measured it: warehouse query %s, Redis read %s, Redis fill %s.\n\n",
				name, formatPerBatch(f.SQLKeys, f.SQLQueries), FormatRate(f.SQLQueries), formatPerBatch(f.RedisKeys, f.RedisBatches), FormatRate(f.RedisBatches),
				meanCall(f.SQLSeconds, f.SQLQueries), meanCall(f.RedisReadSeconds, f.RedisReads), meanCall(f.FillSeconds, f.Fills))
		}
	}
}

// writeLatency writes the latency percentiles at a fixed rate.
func (r *Report) writeLatency(p func(string, ...any)) {
	e := r.Env
	p("## Latency at a fixed rate\n\n")
	p("Each attack: a constant rate (vegeta's pacer, open loop: a slow answer does not delay the next request) for %s after a %s warm-up at the same rate on the same keep-alive connections; ", e.Duration, e.Warmup)
	p("latency is measured by the client from sending a request to reading its whole answer. ")
	p("`floor`, `hot` and `l1` run at half of `hot`'s saturation rate, `miss` and `pgbench` at half of `miss`'s.\n\n")
	p("| scenario | rate (req/s) | p50 | p90 | p99 | max | p99 ratio | baseline |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, name := range scenarioOrder {
		run, ok := r.Fixed[name]
		if !ok {
			continue
		}
		ratio, base := r.latencyBaseline(name, run)
		l := run.Latency
		p("| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", name, FormatRate(run.Rate), FormatDuration(l.P50), FormatDuration(l.P90),
			FormatDuration(l.P99), FormatDuration(l.Max), FormatRatio(ratio), base)
	}
	if b := r.PgbenchRate; b != nil {
		l := b.Latency
		p("| %s (baseline) | %s | %s | %s | %s | %s | | |\n", b.Name, FormatRate(b.Rate), FormatDuration(l.P50), FormatDuration(l.P90), FormatDuration(l.P99), FormatDuration(l.Max))
	}
	if b := r.RedisGet; b != nil {
		l := b.Latency
		p("| %s at saturation (baseline; p95 for p90) | %s | %s | %s | %s | %s | | |\n", b.Name, FormatRate(b.Throughput), FormatDuration(l.P50), FormatDuration(l.P90), FormatDuration(l.P99), FormatDuration(l.Max))
	}
	p("\n![latency percentiles on the hot path](%s/latency-hot.png)\n", r.chartDir)
	p("![latency percentiles on the miss path](%s/latency-miss.png)\n\n", r.chartDir)
}

// writeStampede writes the stampede's answers and query counts, if it ran.
func (r *Report) writeStampede(p func(string, ...any)) {
	if s := r.Stampede; s != nil {
		p("## Stampede\n\n")
		p("%d requests for one key that is in neither cache, released together (one connection each). ", s.Requests)
		p("%d answered 200 in %s (p50 %s, p99 %s). X-Cache: %s.\n\n", s.OK, FormatDuration(s.Wall), FormatDuration(s.Latency.P50), FormatDuration(s.Latency.P99), formatSources(s.Sources))
		p("- SQL queries counted by the service (`warmcache_sql_queries_total`): **%s**\n", formatCount(s.SQLQueries))
		p("- index scans counted by PostgreSQL (`pg_stat_user_tables.idx_scan`, all partitions of the table): **%s**\n", formatScans(s.IndexScans))
		p("  (one per partition index that a query reads: a single-key lookup that prunes to one partition counts 1, ")
		p("a query whose plan keeps all partitions, such as a generic plan of `key = ANY($1)` on a hash-partitioned table, counts one per partition)\n\n")
	}
}

// writeBaselines writes the commands of the baselines and what each floor is.
func (r *Report) writeBaselines(p func(string, ...any)) {
	e := r.Env
	p("## Baselines\n\n")
	for _, b := range append(r.baselines(), r.PgbenchRate) {
		if b != nil {
			p("- %s, %d clients: `%s`\n", b.Name, b.Clients, b.Command)
		}
	}
	p("- `floor`: the harness's own server process (`loadtest floor`): a chi router on an `http.Server` configured as the service's, without the service's middleware, answering every `GET /v1/kv/{namespace}/{key}` with a constant %d-byte JSON body.\n", e.FloorBytes)
	p("- `floor-mw`: the same process and body on a second listener, behind the service's own REST handler (`httpapi.NewHandler`: its middleware chain, router and authorization), on a route of its own; the difference to `floor` is what the middleware costs.\n")
	p("- `grpc-floor`: the same process on a third listener, a `grpc.Server` with the service's message bound and stream workers, answering `warmcache.v1.Cache/Get` with a constant %d-byte value and no interceptors.\n\n", e.FloorBytes)
}

// writeSetup writes the table, the service, the keys and the notes of the run.
func (r *Report) writeSetup(p func(string, ...any)) {
	e := r.Env
	p("## Setup\n\n")
	via := "directly (127.0.0.1:5432)"
	if e.ViaPgBouncer {
		via = "through PgBouncer (transaction pooling, 127.0.0.1:6432)"
	}
	p("- table: `widgets`, %s rows, bigint keys, packed JSONB widget documents (%d bytes as served), 8 hash partitions\n", FormatRate(float64(e.Rows)), e.ValueBytes)
	follow := "by polling (`--freshness poll`)"
	if e.Capture {
		follow = "by change capture over a direct replication connection (`--replication-dsn`), as the local stack deploys it"
	}
	p("- service: `bin/warmcache serve`, warehouse %s, its own Redis key prefix, following the table's changes %s\n", via, follow)
	p("- keys: `hot`, `l1`, `mixed` and `mget`: Zipf (s = %g) over all rows, %d distinct keys pre-warmed; `miss`: each key at most once, in a scattered order over all rows, after the prefix is flushed\n", e.ZipfS, e.HotKeys)
	p("- `mixed`: 90%% GET, 10%% PUT of the same keys; `mget`: %d keys per request\n", e.MGetBatch)
	if _, ok := r.Saturation[Put]; ok {
		p("- `put`: PUTs of the widget document on uniformly random keys of all rows (rows that exist: upserts that update); `put-if-match`: PUTs with `If-Match` at the key's version, read just before, each key once; `delete`: DELETEs, each key once (the rows are put back after); these keys come from the end of the cold keys' order, which no read reaches. Each write attack runs with %d workers, as many as the clients of its pgbench references: the same upsert on the same table (with `nextval` for the version), and the upsert a user would write on a table of their own without versions (`peer_widgets`, a copy of the rows), both through the same PgBouncer; and pgbench of the table's write function, called as the service calls it for a PUT (its locks, its version draw and the upsert in one statement), the warehouse's share of a PUT. The round trips of a write are counted by the client in `TestWriteFunction` (internal/pgstore), not here: PgBouncer's `SHOW STATS` totals move once per `stats_period` (60 s), too coarse for one attack\n", r.writeWorkers())
	}
	nc := "none"
	if len(e.NearCacheEnv) > 0 {
		nc = "`" + strings.Join(e.NearCacheEnv, " ") + "`"
	}
	p("- `l1`: a second service process started with %s; the X-Cache column shows how many answers came from a near cache\n", nc)
	p("- `peer-hot`, `peer-miss`: the peer (`loadtest peer`, loadtest/peer.go), the cache-aside a user would write by hand: a chi handler that GETs the key from Redis and on a miss reads the row from PostgreSQL directly with its own pgx pool, then SETs it. Same Redis, same table, the same hot keys as `hot`; its cold keys continue the scattered order after `miss`, so no key is asked for twice\n")
	p("- placement: %s\n", orNA(e.Pinning))
	p("%s", r.Dapr)
	p("%s", r.Monitor)
	if len(r.Notes) > 0 {
		p("\n## Notes from this run\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
	}
}

func (r *Report) throughputBaseline(name string, run Run) (float64, string) {
	floor, hasFloor := r.Saturation[Floor]
	switch name {
	case Floor:
		return 1, "`floor`"
	case FloorMW, Hot, L1, Mixed, PeerHot:
		if hasFloor {
			return Ratio(run.Throughput, floor.Throughput), "`floor` req/s"
		}
	case GRPCFloor, GRPC:
		if gf, ok := r.Saturation[GRPCFloor]; ok {
			return Ratio(run.Throughput, gf.Throughput), "`grpc-floor` calls/s"
		}
	case Miss, PeerMiss:
		if ref := r.PoolerReference(); ref != nil {
			return Ratio(run.Throughput, ref.Throughput), "pgbench via PgBouncer lookups/s"
		}
	case MGet:
		if hot, ok := r.Saturation[Hot]; ok {
			return Ratio(run.KeysPerSecond(), hot.KeysPerSecond()), "`hot` keys/s"
		}
	case Put, PutIfMatch, Delete:
		if ref := fastest(r.Upsert); ref != nil {
			return Ratio(run.Throughput, ref.Throughput), "pgbench upsert via PgBouncer/s"
		}
	}
	return math.NaN(), "—"
}

func (r *Report) latencyBaseline(name string, run Run) (float64, string) {
	switch name {
	case Floor:
		return 1, "`floor`"
	case FloorMW, Hot, L1, Mixed, MGet, PeerHot:
		if f, ok := r.Fixed[Floor]; ok && f.Latency.Count > 0 {
			return Ratio(float64(run.Latency.P99), float64(f.Latency.P99)), "`floor` p99"
		}
	case Miss:
		if b := r.PgbenchRate; b != nil && b.Latency.Count > 0 {
			return Ratio(float64(run.Latency.P99), float64(b.Latency.P99)), "pgbench p99"
		}
	}
	return math.NaN(), "—"
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// baselines are the saturation baselines in table order.
func (r *Report) baselines() []*Baseline {
	var out []*Baseline
	if r.PgbenchSat != nil {
		out = append(out, r.PgbenchSat)
	}
	for _, b := range slices.Concat(r.Pooler, r.Upsert, r.WriteFunction, r.PeerUpsert) {
		if b != nil {
			out = append(out, b)
		}
	}
	if r.RedisGet != nil {
		out = append(out, r.RedisGet)
	}
	return out
}

// cpuRow is one line of the CPU table.
type cpuRow struct {
	name string
	cpu  *CPU
	// ref is the row whose server CPU this one is compared with.
	ref string
}

func (r *Report) cpuRows() []cpuRow {
	var rows []cpuRow
	for _, name := range scenarioOrder {
		run, ok := r.Saturation[name]
		if !ok {
			run, ok = r.Fixed[name] // a fixed-rate attack measured as one, such as HotAtPutRate
		}
		if !ok || run.CPU == nil {
			continue
		}
		ref := ""
		switch name {
		case FloorMW, Hot, L1, Mixed:
			ref = "`" + Floor + "`"
		case GRPC:
			ref = "`" + GRPCFloor + "`"
		case Miss:
			if b := r.PoolerReference(); b != nil {
				ref = b.Name
			}
		}
		rows = append(rows, cpuRow{name: "`" + name + "`", cpu: run.CPU, ref: ref})
	}
	for _, b := range r.baselines() {
		if b.CPU != nil {
			rows = append(rows, cpuRow{name: b.Name, cpu: b.CPU})
		}
	}
	return rows
}

// writeCPU writes the CPU per request of every process during each
// saturation attack.
func (r *Report) writeCPU(p func(string, ...any)) {
	rows := r.cpuRows()
	if len(rows) == 0 {
		return
	}
	byName := map[string]*CPU{}
	for _, row := range rows {
		byName[row.name] = row.cpu
	}
	p("## CPU per request\n\n")
	defer p("![CPU per request by process](%s/cpu.png)\n\n", r.chartDir)
	p("CPU time (user + system, from `/proc/<pid>/stat` before and after each saturation attack, and the fixed-rate `%s`) divided by the requests answered in it. ", HotAtPutRate)
	p("`server` is the process under test (warmcache, the floor process, or PostgreSQL's backends for pgbench); ")
	p("`postgres` sums the backends of the benchmark database (through PgBouncer: its server connections); `load` is the load generator (the harness, or pgbench). ")
	p("Ratios compare the `server` column with the reference row's, or, for `miss` against pgbench, the total without the load generator.\n\n")
	p("| attack | server | server µs/req | redis | postgres | pgbouncer | total (no load) | load | server cores | ratio | reference |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, row := range rows {
		c := row.cpu
		ratio := math.NaN()
		if ref, ok := byName[row.ref]; ok {
			if row.name == "`"+Miss+"`" {
				ratio = Ratio(c.TotalPerRequest(false), ref.TotalPerRequest(false))
			} else {
				ratio = Ratio(c.PerRequest(ProcServer), ref.PerRequest(ProcServer))
			}
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", row.name, orNA(c.Server),
			FormatMicros(c.PerRequest(ProcServer)), FormatMicros(c.PerRequest(ProcRedis)), FormatMicros(c.PerRequest(ProcPostgres)),
			FormatMicros(c.PerRequest(ProcPgBouncer)), FormatMicros(c.TotalPerRequest(false)), FormatMicros(c.PerRequest(ProcLoad)),
			formatCores(c.Cores(ProcServer)), FormatRatio(ratio), orDash(row.ref))
	}
	p("\n")
}

func formatCores(c float64) string {
	if math.IsNaN(c) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", c)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// writeProfiles writes the top entries of each path's CPU and allocation
// profiles.
func (r *Report) writeProfiles(p func(string, ...any)) {
	if len(r.Profiles) == 0 {
		return
	}
	p("## Profiles\n\n")
	p("CPU and allocation profiles of the service, each taken from its pprof listener during a separate attack on one path at saturation (not the measured one). ")
	p("Allocation profiles are deltas over the attack (`/debug/pprof/allocs?seconds=N`).\n\n")
	for _, pr := range r.Profiles {
		p("### `%s`\n\n", pr.Path)
		p("```sh\n%s\n```\n\n", pr.Command)
		if cores, ok := ProfiledCores(pr.Top); ok {
			p("The service kept %.2f cores busy on average during the profile.\n\n", cores)
		}
		if shares := SharesByPackage(pr.Top); len(shares) > 0 {
			p("Flat CPU by package (from the rows below):\n\n| package | flat |\n|---|---:|\n")
			for i, s := range shares {
				if i == 10 {
					break
				}
				p("| `%s` | %.1f%% |\n", s.Package, s.Percent)
			}
			p("\n")
		}
		var cum []string
		for _, f := range profileFrames {
			if pct, ok := CumulativeShare(pr.TopCum, f.fn); ok {
				cum = append(cum, fmt.Sprintf("| %s | `%s` | %.1f%% |\n", f.what, shortFrame(f.fn), pct))
			}
		}
		if len(cum) > 0 {
			p("Cumulative CPU of selected frames (from `-top -cum`):\n\n| what | frame | cum |\n|---|---|---:|\n%s\n", strings.Join(cum, ""))
		}
		p("CPU, top entries:\n\n```\n%s\n```\n\n", strings.TrimRight(pr.Top, "\n"))
		if pr.Allocs != "" {
			if total, ok := AllocTotal(pr.Allocs); ok && pr.Requests > 0 {
				p("Allocated during the profile: %s, about %s per request (%s requests).\n\n", formatBytes(total), formatBytes(total/float64(pr.Requests)), FormatRate(float64(pr.Requests)))
			}
			p("Allocations by space, top entries:\n\n```\n%s\n```\n\n", strings.TrimRight(pr.Allocs, "\n"))
		}
		if pr.AllocObjects != "" {
			if total, ok := AllocTotal(pr.AllocObjects); ok && pr.Requests > 0 {
				p("Allocated objects: about %.1f per request.\n\n", total/float64(pr.Requests))
			}
			p("Allocations by count, top entries:\n\n```\n%s\n```\n\n", strings.TrimRight(pr.AllocObjects, "\n"))
		}
	}
}

func formatBytes(b float64) string {
	switch {
	case math.IsNaN(b):
		return "n/a"
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

func formatPerBatch(keys, batches float64) string {
	if !(batches > 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", keys/batches)
}

// writeBeforeAfter compares the targets and the service's CPU per request
// with the Before run, each side's ratios from its own run.
func (r *Report) writeBeforeAfter(p func(string, ...any)) {
	b := r.Before
	if b == nil {
		return
	}
	p("## Before and after\n\n")
	p("The same harness on %s, run on %s (`%s`), against this run. Every ratio is from its own run, against that run's floors and baselines.\n\n",
		orNA(r.BeforeLabel), b.Env.Start.UTC().Format("2006-01-02 15:04 UTC"), b.Env.Command)
	p("| target | before | after |\n|---|---|---|\n")
	before := b.Targets()
	for i, t := range r.Targets() {
		was := "—"
		if i < len(before) && before[i].Scenario == t.Scenario {
			was = before[i].Measured + " (" + before[i].Verdict + ")"
		}
		p("| %s | %s | %s (%s) |\n", t.Scenario, was, t.Measured, t.Verdict)
	}
	p("\nCPU per request of each process during the saturation attacks, before → after:\n\n")
	p("| attack | server | redis | postgres | pgbouncer | total (no load) |\n|---|---:|---:|---:|---:|---:|\n")
	for _, name := range []string{Hot, L1, Miss, GRPC, Mixed, Put, PutIfMatch, Delete} {
		a, okA := r.Saturation[name]
		w, okB := b.Saturation[name]
		if !okA || !okB || a.CPU == nil || w.CPU == nil {
			continue
		}
		cell := func(f func(*CPU) float64) string {
			return FormatMicros(f(w.CPU)) + " → " + FormatMicros(f(a.CPU))
		}
		group := func(g string) func(*CPU) float64 { return func(c *CPU) float64 { return c.PerRequest(g) } }
		p("| `%s` | %s | %s | %s | %s | %s |\n", name, cell(group(ProcServer)), cell(group(ProcRedis)), cell(group(ProcPostgres)),
			cell(group(ProcPgBouncer)), cell(func(c *CPU) float64 { return c.TotalPerRequest(false) }))
	}
	p("\n")
	if f, g := b.Saturation[Miss].Fold, r.Saturation[Miss].Fold; f != nil && g != nil {
		p("Keys per warehouse query during `miss`: %s → %s; keys per Redis read batch: %s → %s.\n\n",
			formatPerBatch(f.SQLKeys, f.SQLQueries), formatPerBatch(g.SQLKeys, g.SQLQueries),
			formatPerBatch(f.RedisKeys, f.RedisBatches), formatPerBatch(g.RedisKeys, g.RedisBatches))
	}
}

// WriteJSON writes the report as JSON, for a later run to compare with
// (Before).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads a report that WriteJSON wrote.
func ReadJSON(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("bench: read report: %w", err)
	}
	return &r, nil
}
