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
	r.Recommended = -1
	var minP50, minP99 time.Duration
	for _, res := range r.Results {
		if res.Err != nil {
			continue
		}
		if minP50 == 0 || res.P50 < minP50 {
			minP50 = res.P50
		}
		if minP99 == 0 || res.P99 < minP99 {
			minP99 = res.P99
		}
	}
	need := QueryScan
	if r.Current >= 0 {
		need = r.Results[r.Current].Query
	}
	fast := func(res Result) bool {
		return res.P50 <= time.Duration(fastP50Factor*float64(minP50))+noiseP50 &&
			res.P99 <= time.Duration(fastP99Factor*float64(minP99))+noiseP99
	}
	better := func(i, j int) bool { // is i better than j
		if j < 0 {
			return true
		}
		a, b := r.Results[i], r.Results[j]
		if a.Bytes != b.Bytes {
			return a.Bytes < b.Bytes
		}
		return a.P50 < b.P50
	}
	for i, res := range r.Results {
		if res.Err == nil && res.Migratable && fast(res) && queryRank(res.Query) >= queryRank(need) && better(i, r.Recommended) {
			r.Recommended = i
		}
	}
	slowest := false
	if r.Recommended < 0 {
		// No candidate that keeps _query was within the speed bounds: on a
		// busy machine one slow round can stretch a p99. Fall back to the
		// fastest p50 among those that keep _query, and say so.
		for i, res := range r.Results {
			if res.Err == nil && res.Migratable && queryRank(res.Query) >= queryRank(need) &&
				(r.Recommended < 0 || res.P50 < r.Results[r.Recommended].P50) {
				r.Recommended = i
			}
		}
		if r.Recommended < 0 {
			return
		}
		slowest = true
		r.Notes = append(r.Notes, "no candidate that keeps _query had lookups within the speed bounds of the fastest; "+
			"the recommendation is the one with the fastest p50 among them: rerun with more --lookups on a quieter machine")
	}
	// Keep the current storage unless the winner is clearly smaller: equal
	// sizes differ only by timer noise.
	if c := r.Current; c >= 0 && c != r.Recommended && r.Results[c].Err == nil &&
		r.Results[c].P50 <= time.Duration(fastP50Factor*float64(minP50))+noiseP50 &&
		float64(r.Results[r.Recommended].Bytes) >= keepCurrent*float64(r.Results[c].Bytes) {
		r.Recommended = c
	}
	rec := r.Results[r.Recommended]
	if slowest {
		r.Why = fmt.Sprintf("%s: the fastest p50 (%s) among the storages that keep _query at least as good as now (%s)",
			rec.Name, formatDuration(rec.P50), need)
	} else {
		r.Why = fmt.Sprintf("%s: the smallest storage (%s) among those whose lookups are within %.0f%% of the fastest p50 (%s) "+
			"and %.1fx its p99 (%s), and that keep _query at least as good as now (%s)",
			rec.Name, formatBytes(rec.Bytes), (fastP50Factor-1)*100, formatDuration(minP50), fastP99Factor, formatDuration(minP99), need)
	}
	if r.Dialect == dialect.Postgres && r.AvgValueBytes < toastThreshold {
		r.Notes = append(r.Notes, fmt.Sprintf("values average %d bytes: TOAST compresses only values over about 2 kB, "+
			"so pglz and lz4 store these as they are (compare their sizes above)", r.AvgValueBytes))
	}
	if r.DictBytes > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("a zstd dictionary of %s trained on this sample compresses single values %.1fx", formatBytes(int64(r.DictBytes)), r.DictRatio))
	} else {
		r.Notes = append(r.Notes, fmt.Sprintf("no zstd dictionary could be trained on this sample (too few or too uniform values): "+
			"the bytea candidate is compressed without one, %.1fx", r.DictRatio))
	}
	for _, res := range r.Results {
		if res.Err != nil || res.Bytes == 0 || float64(rec.Bytes)/float64(res.Bytes) < 1.3 {
			continue
		}
		var but []string
		if queryRank(res.Query) < queryRank(need) {
			if res.Query == QueryNone {
				but = append(but, "gives up _query on this namespace")
			} else {
				but = append(but, "answers _query by "+string(res.Query)+" instead of "+string(need))
			}
		}
		if !fast(res) {
			but = append(but, fmt.Sprintf("its lookups are slower (p50 %s, p99 %s)", formatDuration(res.P50), formatDuration(res.P99)))
		}
		if !res.Migratable {
			but = append(but, "migrate cannot create it (a table of your own)")
		}
		if len(but) > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s is %.1fx smaller than the recommendation, but %s",
				res.Name, float64(rec.Bytes)/float64(res.Bytes), strings.Join(but, ", and ")))
		}
	}
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
