package advise

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// The recommendation's idea of "about as fast as the fastest": within
// these factors of the best p50 and p99, plus an allowance for timer noise.
const (
	fastP50Factor = 1.25
	fastP99Factor = 2.5
	noiseP50      = 30 * time.Microsecond
	noiseP99      = time.Millisecond
	// keepCurrent: a candidate must be smaller than this fraction of the
	// current storage to be recommended over it.
	keepCurrent = 0.95
	// toastThreshold is about where PostgreSQL's TOAST starts to compress
	// a value (TOAST_TUPLE_THRESHOLD).
	toastThreshold = 2000
)

func queryRank(q QuerySupport) int {
	switch q {
	case QueryIndexed:
		return 2
	case QueryScan:
		return 1
	default:
		return 0
	}
}

// recommend picks the smallest storage that migrate can create, that
// answers _query at least as well as the current one, and whose lookups are
// about as fast as the fastest candidate's.
func (r *Report) recommend() {
	bounds := r.speedBounds()
	need := r.neededQuery()
	r.Recommended = r.smallestFast(bounds, need)
	slowest := false
	if r.Recommended < 0 {
		// No candidate that keeps _query was within the speed bounds: on a
		// busy machine one slow round can stretch a p99. Fall back to the
		// fastest p50 among those that keep _query, and say so.
		if r.Recommended = r.fastestP50(need); r.Recommended < 0 {
			return
		}
		slowest = true
		r.Notes = append(r.Notes, "no candidate that keeps _query had lookups within the speed bounds of the fastest; "+
			"the recommendation is the one with the fastest p50 among them: rerun with more --lookups on a quieter machine")
	}
	r.Recommended = r.preferCurrent(bounds, r.Recommended)
	r.Why = r.why(bounds, need, slowest)
	r.Notes = append(r.Notes, r.sampleNotes()...)
	r.Notes = append(r.Notes, r.smallerNotes(bounds, need)...)
}

// speed is the best p50 and p99 among the candidates that were measured.
type speed struct {
	minP50, minP99 time.Duration
}

// speedBounds returns the best p50 and p99 among the results without an
// error.
func (r *Report) speedBounds() speed {
	var s speed
	for _, res := range r.Results {
		if res.Err != nil {
			continue
		}
		if s.minP50 == 0 || res.P50 < s.minP50 {
			s.minP50 = res.P50
		}
		if s.minP99 == 0 || res.P99 < s.minP99 {
			s.minP99 = res.P99
		}
	}
	return s
}

// fastP50 reports whether res's p50 is about as fast as the best.
func (s speed) fastP50(res Result) bool {
	return res.P50 <= time.Duration(fastP50Factor*float64(s.minP50))+noiseP50
}

// fast reports whether res's p50 and p99 are both about as fast as the
// best.
func (s speed) fast(res Result) bool {
	return s.fastP50(res) && res.P99 <= time.Duration(fastP99Factor*float64(s.minP99))+noiseP99
}

// neededQuery is how well the recommendation must answer _query: as well
// as the current storage, or by a scan when there is none.
func (r *Report) neededQuery() QuerySupport {
	if r.Current >= 0 {
		return r.Results[r.Current].Query
	}
	// A bytes namespace has no _query to keep.
	for _, res := range r.Results {
		if res.Layout == warmcache.LayoutBytes {
			return QueryNone
		}
	}
	return QueryScan
}

// keepsQuery reports whether res can be recommended: measured, creatable
// by migrate, and answering _query at least as well as need.
func keepsQuery(res Result, need QuerySupport) bool {
	return res.Err == nil && res.Migratable && queryRank(res.Query) >= queryRank(need)
}

// smallestFast returns the index of the smallest fast result that keeps
// _query, the faster p50 breaking a tie in size, or -1.
func (r *Report) smallestFast(bounds speed, need QuerySupport) int {
	best := -1
	for i, res := range r.Results {
		if keepsQuery(res, need) && bounds.fast(res) && r.better(i, best) {
			best = i
		}
	}
	return best
}

// better reports whether result i is smaller than result j, or as large
// and faster at p50; any result is better than none (j < 0).
func (r *Report) better(i, j int) bool {
	if j < 0 {
		return true
	}
	a, b := r.Results[i], r.Results[j]
	if a.Bytes != b.Bytes {
		return a.Bytes < b.Bytes
	}
	return a.P50 < b.P50
}

// fastestP50 returns the index of the result with the fastest p50 among
// those that keep _query, or -1.
func (r *Report) fastestP50(need QuerySupport) int {
	best := -1
	for i, res := range r.Results {
		if keepsQuery(res, need) && (best < 0 || res.P50 < r.Results[best].P50) {
			best = i
		}
	}
	return best
}

// preferCurrent returns the current storage rather than the recommended
// result rec unless rec is clearly smaller: equal sizes differ only by
// timer noise. The current storage must itself be measured and fast at p50.
func (r *Report) preferCurrent(bounds speed, rec int) int {
	if c := r.Current; c >= 0 && c != rec && r.Results[c].Err == nil &&
		bounds.fastP50(r.Results[c]) &&
		float64(r.Results[rec].Bytes) >= keepCurrent*float64(r.Results[c].Bytes) {
		return c
	}
	return rec
}

// why explains the recommendation: the fastest p50 when slowest (no
// candidate was within the speed bounds), the smallest fast one otherwise.
func (r *Report) why(bounds speed, need QuerySupport, slowest bool) string {
	rec := r.Results[r.Recommended]
	if slowest {
		return fmt.Sprintf("%s: the fastest p50 (%s) among the storages that keep _query at least as good as now (%s)",
			rec.Name, formatDuration(rec.P50), need)
	}
	return fmt.Sprintf("%s: the smallest storage (%s) among those whose lookups are within %.0f%% of the fastest p50 (%s) "+
		"and %.1fx its p99 (%s), and that keep _query at least as good as now (%s)",
		rec.Name, formatBytes(rec.Bytes), (fastP50Factor-1)*100, formatDuration(bounds.minP50), fastP99Factor, formatDuration(bounds.minP99), need)
}

// sampleNotes tells what the sample's values mean for compression: that
// TOAST leaves small values alone on PostgreSQL, and what a zstd
// dictionary gives.
func (r *Report) sampleNotes() []string {
	var notes []string
	if r.Dialect == dialect.Postgres && r.AvgValueBytes < toastThreshold {
		notes = append(notes, fmt.Sprintf("values average %d bytes: TOAST compresses only values over about 2 kB, "+
			"so pglz and lz4 store these as they are (compare their sizes above)", r.AvgValueBytes))
	}
	if r.DictBytes > 0 {
		notes = append(notes, fmt.Sprintf("a zstd dictionary of %s trained on this sample compresses single values %.1fx", formatBytes(int64(r.DictBytes)), r.DictRatio))
	} else {
		notes = append(notes, fmt.Sprintf("no zstd dictionary could be trained on this sample (too few or too uniform values): "+
			"the bytea candidate is compressed without one, %.1fx", r.DictRatio))
	}
	return notes
}

// smallerNotes tells, for each result at least 1.3x smaller than the
// recommendation, why it was not recommended.
func (r *Report) smallerNotes(bounds speed, need QuerySupport) []string {
	rec := r.Results[r.Recommended]
	var notes []string
	for _, res := range r.Results {
		if res.Err != nil || res.Bytes == 0 || float64(rec.Bytes)/float64(res.Bytes) < 1.3 {
			continue
		}
		if but := drawbacks(res, bounds, need); len(but) > 0 {
			notes = append(notes, fmt.Sprintf("%s is %.1fx smaller than the recommendation, but %s",
				res.Name, float64(rec.Bytes)/float64(res.Bytes), strings.Join(but, ", and ")))
		}
	}
	return notes
}

// drawbacks lists what res gives up against the recommendation: _query,
// lookup speed, or being creatable by migrate.
func drawbacks(res Result, bounds speed, need QuerySupport) []string {
	var but []string
	if queryRank(res.Query) < queryRank(need) {
		if res.Query == QueryNone {
			but = append(but, "gives up _query on this namespace")
		} else {
			but = append(but, "answers _query by "+string(res.Query)+" instead of "+string(need))
		}
	}
	if !bounds.fast(res) {
		but = append(but, fmt.Sprintf("its lookups are slower (p50 %s, p99 %s)", formatDuration(res.P50), formatDuration(res.P99)))
	}
	if !res.Migratable {
		but = append(but, "migrate cannot create it (a table of your own)")
	}
	return but
}

// migration tells how to move table t's namespace to the recommended
// storage.
func migration(d dialect.Dialect, t schema.Table, r Report) string {
	ns := t.Namespace
	if r.Recommended < 0 {
		return "no candidate could be measured; nothing to recommend"
	}
	if r.Recommended == r.Current {
		return fmt.Sprintf("namespace %q already has the recommended storage; nothing to migrate", ns.Name)
	}
	rec := r.Results[r.Recommended]
	var b strings.Builder
	fmt.Fprintf(&b, "to move namespace %q to %s, set in its namespaces file entry:\n", ns.Name, rec.Name)
	if rec.Layout == warmcache.LayoutColumns && ns.Layout != warmcache.LayoutColumns {
		b.WriteString("    value:\n      layout: columns\n      columns:\n")
		for _, c := range rec.Columns {
			fmt.Fprintf(&b, "        - {name: %s, type: %s}\n", c.Name, c.Type)
		}
	}
	b.WriteString("    storage:\n")
	st := rec.Storage
	if d == dialect.Postgres {
		fmt.Fprintf(&b, "      partitions: %d\n", st.Partitions)
	}
	fmt.Fprintf(&b, "      compression: %s\n", orNone(st.Compression))
	if st.CompressLevel != 0 {
		fmt.Fprintf(&b, "      compress_level: %d\n", st.CompressLevel)
	}
	if st.AppendOptimized {
		fmt.Fprintf(&b, "      appendoptimized: true\n      orientation: %s\n", orRow(st.Orientation))
	}
	if st.GINIndex {
		b.WriteString("      gin_index: true\n")
	}
	target := *ns
	target.Name, target.Table = ns.Name, ns.Table+"_new"
	target.Layout, target.Columns = rec.Layout, rec.Columns
	if target.ValueColumn == "" {
		target.ValueColumn = "value"
	}
	ddl, err := tableDDL(d, schema.Table{Namespace: &target, Managed: true, Storage: rec.Storage})
	if err != nil {
		fmt.Fprintf(&b, "(the DDL cannot be rendered: %v)\n", err)
		return b.String()
	}
	fmt.Fprintf(&b, "`warmcache migrate up` creates a new namespace's table that way. To convert the rows of the existing table\n"+
		"in place, build the new table beside it, copy, and swap the names in one transaction:\n\n%s", ddl)
	old, neu := tableIdent(ns.Table), tableIdent(target.Table)
	key, version := pgx.Identifier{ns.KeyColumn}.Sanitize(), pgx.Identifier{ns.VersionColumn}.Sanitize()
	if rec.Layout == warmcache.LayoutColumns && ns.Layout == warmcache.LayoutPacked {
		names := make([]string, len(rec.Columns))
		vals := make([]string, len(rec.Columns))
		for i, c := range rec.Columns {
			names[i] = pgx.Identifier{c.Name}.Sanitize()
			vals[i] = "(s.r)." + names[i]
		}
		// The record in a subquery's select list: on Greenplum, a record
		// function in FROM can be planned on the coordinator's entry
		// process, which ran for minutes on 20,000 rows.
		fmt.Fprintf(&b, "INSERT INTO %s (%s, %s, %s)\n    SELECT s.%s, %s, s.%s FROM (SELECT t.%s, t.%s, jsonb_populate_record(NULL::%s, t.%s::jsonb) AS r FROM %s AS t OFFSET 0) AS s;\n",
			neu, key, strings.Join(names, ", "), version, key, strings.Join(vals, ", "), version, key, version, neu, pgx.Identifier{ns.ValueColumn}.Sanitize(), old)
	} else {
		fmt.Fprintf(&b, "INSERT INTO %s SELECT * FROM %s;\n", neu, old)
	}
	_, base := splitTable(ns.Table)
	fmt.Fprintf(&b, "BEGIN;\nALTER TABLE %s RENAME TO %s;\nALTER TABLE %s RENAME TO %s;\nCOMMIT;\n",
		old, pgx.Identifier{base + "_old"}.Sanitize(), neu, pgx.Identifier{base}.Sanitize())
	return b.String()
}

func splitTable(table string) (schemaName, name string) {
	if s, n, ok := strings.Cut(table, "."); ok {
		return s, n
	}
	return "", table
}

// WriteTable prints the report as a table, the recommendation, the notes
// and the migration.
func (r Report) WriteTable(w io.Writer) error {
	ok := 0
	for _, res := range r.Results {
		if res.Err == nil {
			ok++
		}
	}
	fmt.Fprintf(w, "warmcache advise %s: %s, %d sampled rows, values %d bytes on average; %d of %d candidates measured in %s\n\n",
		r.Namespace, r.Dialect, r.Rows, r.AvgValueBytes, ok, len(r.Results), r.Elapsed.Round(100*time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "candidate\t size\t vs now\t load\t rows/s\t p50\t p99\t _query\t \t")
	var base int64
	if r.Current >= 0 {
		base = r.Results[r.Current].Bytes
	}
	for i, res := range r.Results {
		mark := ""
		switch {
		case i == r.Recommended && i == r.Current:
			mark = "current, recommended"
		case i == r.Recommended:
			mark = "recommended"
		case i == r.Current:
			mark = "current"
		}
		if res.Err != nil {
			fmt.Fprintf(tw, "%s\t -\t -\t -\t -\t -\t -\t %s\t %s\t\n", res.Name, res.Query, "not measured: "+res.Err.Error())
			continue
		}
		vs := "-"
		if base > 0 {
			vs = fmt.Sprintf("%.2fx", float64(res.Bytes)/float64(base))
		}
		rate := float64(r.Rows) / max(res.Load.Seconds(), 1e-9)
		fmt.Fprintf(tw, "%s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", res.Name, formatBytes(res.Bytes), vs,
			res.Load.Round(time.Millisecond), formatCount(rate), formatDuration(res.P50), formatDuration(res.P99), res.Query, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Recommended >= 0 {
		fmt.Fprintf(w, "\nrecommended: %s\n", r.Why)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	_, err := fmt.Fprintf(w, "\nmigration: %s\n", r.Migration)
	return err
}

// JSONResult is a Result as JSON: sizes in bytes, times in seconds.
type JSONResult struct {
	Name        string  `json:"name"`
	Layout      string  `json:"layout"`
	Value       string  `json:"value"`
	Compression string  `json:"compression"`
	Level       int     `json:"compress_level,omitempty"`
	AO          bool    `json:"appendoptimized,omitempty"`
	Orientation string  `json:"orientation,omitempty"`
	Query       string  `json:"query"`
	Bytes       int64   `json:"bytes"`
	LoadSeconds float64 `json:"load_seconds"`
	P50Seconds  float64 `json:"p50_seconds"`
	P99Seconds  float64 `json:"p99_seconds"`
	Error       string  `json:"error,omitempty"`
	Current     bool    `json:"current,omitempty"`
	Recommended bool    `json:"recommended,omitempty"`
}

// JSONReport is a Report as JSON, for charts and for comparing runs.
type JSONReport struct {
	Namespace     string       `json:"namespace"`
	Dialect       string       `json:"dialect"`
	Rows          int          `json:"rows"`
	AvgValueBytes int          `json:"avg_value_bytes"`
	DictBytes     int          `json:"dict_bytes"`
	DictRatio     float64      `json:"dict_ratio"`
	Results       []JSONResult `json:"results"`
	Why           string       `json:"why"`
	Notes         []string     `json:"notes"`
}

// JSON returns the report as indented JSON.
func (r Report) JSON() ([]byte, error) {
	out := JSONReport{Namespace: r.Namespace, Dialect: r.Dialect.String(), Rows: r.Rows, AvgValueBytes: r.AvgValueBytes,
		DictBytes: r.DictBytes, DictRatio: r.DictRatio, Why: r.Why, Notes: r.Notes}
	for i, res := range r.Results {
		jr := JSONResult{Name: res.Name, Layout: string(res.Layout), Value: string(res.Value),
			Compression: orNone(res.Storage.Compression), Level: res.Storage.CompressLevel, AO: res.Storage.AppendOptimized,
			Orientation: res.Storage.Orientation, Query: string(res.Query), Bytes: res.Bytes,
			LoadSeconds: res.Load.Seconds(), P50Seconds: res.P50.Seconds(), P99Seconds: res.P99.Seconds(),
			Current: i == r.Current, Recommended: i == r.Recommended}
		if res.Err != nil {
			jr.Error = res.Err.Error()
		}
		out.Results = append(out.Results, jr)
	}
	return json.MarshalIndent(out, "", "  ")
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

func formatDuration(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}

func formatCount(f float64) string {
	switch {
	case f >= 1e6:
		return fmt.Sprintf("%.1fM", f/1e6)
	case f >= 1e3:
		return fmt.Sprintf("%.0fk", f/1e3)
	default:
		return fmt.Sprintf("%.0f", f)
	}
}
