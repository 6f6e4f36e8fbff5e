package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
)

// PlanNode is one node of a text EXPLAIN, as the doctor reads it.
type PlanNode struct {
	// Type is the node type, such as "Index Scan", "Seq Scan", "Append"
	// or "Gather Motion".
	Type string
	// Relation is the table a scan reads; Index the index it uses.
	Relation string
	Index    string
	// Senders and Receivers are the Greenplum motion's "N:M"; Segments
	// is the slice's "segments: N".
	Senders, Receivers, Segments int
	// Cond holds the node's Index Cond, Recheck Cond and Filter lines.
	Cond []string
}

// Plan is what the doctor reads from the text of an EXPLAIN: the nodes in
// order, and the lines about the whole plan.
type Plan struct {
	Nodes []PlanNode
	// SubplansRemoved sums the "Subplans Removed: N" lines of Append
	// nodes: partitions pruned when the executor started, which is how a
	// generic plan on a hash-partitioned table reads one partition.
	SubplansRemoved int
	// Optimizer is the text of Greenplum's "Optimizer:" or "Optimizer
	// status:" line, empty on PostgreSQL.
	Optimizer string
	// Settings is the text of Greenplum's "Settings:" line.
	Settings string
}

// ParsePlan reads the text of an EXPLAIN (FORMAT TEXT), of PostgreSQL or
// Greenplum. Lines it does not know are ignored; it never fails.
func ParsePlan(text string) Plan {
	var p Plan
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "QUERY PLAN") || strings.Trim(line, "-") == "" || strings.HasPrefix(line, "(") {
			continue
		}
		isNode := strings.HasPrefix(line, "->") || len(p.Nodes) == 0
		if !isNode {
			name, value, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			value = strings.TrimSpace(value)
			switch name {
			case "Subplans Removed":
				n, _ := strconv.Atoi(value)
				p.SubplansRemoved += n
			case "Optimizer", "Optimizer status":
				p.Optimizer = value
			case "Settings":
				p.Settings = value
			case "Index Cond", "Recheck Cond", "Filter", "Hash Cond":
				last := &p.Nodes[len(p.Nodes)-1]
				last.Cond = append(last.Cond, value)
			}
			continue
		}
		p.Nodes = append(p.Nodes, parseNode(strings.TrimSpace(strings.TrimPrefix(line, "->"))))
	}
	return p
}

// parseNode reads a node line such as
// "Index Scan using widgets_p3_pkey on widgets_p3 widgets  (cost=...)" or
// "Gather Motion 1:1  (slice1; segments: 1)  (cost=...)".
func parseNode(line string) PlanNode {
	head, rest, _ := strings.Cut(line, "  (")
	var n PlanNode
	if strings.Contains(head, " Motion ") {
		typ, ratio, _ := strings.Cut(head, " Motion ")
		n.Type = typ + " Motion"
		s, r, _ := strings.Cut(ratio, ":")
		n.Senders, _ = strconv.Atoi(strings.TrimSpace(s))
		n.Receivers, _ = strconv.Atoi(strings.TrimSpace(r))
		if _, seg, ok := strings.Cut(rest, "segments: "); ok {
			end := strings.IndexFunc(seg, func(r rune) bool { return r < '0' || r > '9' })
			if end < 0 {
				end = len(seg)
			}
			n.Segments, _ = strconv.Atoi(seg[:end])
		}
		return n
	}
	if typ, idx, ok := strings.Cut(head, " using "); ok {
		n.Type = typ
		n.Index, n.Relation, _ = strings.Cut(idx, " on ")
		n.Relation = firstWord(n.Relation)
		return n
	}
	if typ, rel, ok := strings.Cut(head, " on "); ok {
		n.Type = typ
		if strings.Contains(typ, "Index Scan") { // Bitmap Index Scan on <index>
			n.Index = firstWord(rel)
		} else {
			n.Relation = firstWord(rel)
		}
		return n
	}
	n.Type = head
	return n
}

func firstWord(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, ' '); i >= 0 {
		return s[:i]
	}
	return s
}

// Scans returns the nodes that read a table: sequential, index,
// index-only and bitmap heap scans (a bitmap heap scan's index is the
// bitmap index scan below it).
func (p Plan) Scans() []PlanNode {
	var out []PlanNode
	for i, n := range p.Nodes {
		if n.Relation == "" || !strings.Contains(n.Type, "Scan") {
			continue
		}
		if strings.Contains(n.Type, "Bitmap Heap Scan") && n.Index == "" {
			for _, below := range p.Nodes[i+1:] {
				if strings.Contains(below.Type, "Bitmap Index Scan") {
					n.Index = below.Index
					break
				}
			}
		}
		out = append(out, n)
	}
	return out
}

// usesIndex reports whether a table scan goes through an index.
func (n PlanNode) usesIndex() bool {
	return n.Index != "" && (strings.Contains(n.Type, "Index") || strings.Contains(n.Type, "Bitmap"))
}

// Motion returns the first Greenplum Gather Motion of the plan.
func (p Plan) Motion() (PlanNode, bool) {
	for _, n := range p.Nodes {
		if n.Type == "Gather Motion" {
			return n, true
		}
	}
	return PlanNode{}, false
}

// Generic reports whether a scan condition still holds a parameter ($1):
// the plan is generic, not planned for one key.
func (p Plan) Generic() bool {
	for _, n := range p.Nodes {
		for _, c := range n.Cond {
			if strings.Contains(c, "$1") {
				return true
			}
		}
	}
	return false
}

// ORCA reports whether Greenplum's GPORCA optimizer made the plan.
func (p Plan) ORCA() bool {
	o := strings.ToLower(p.Optimizer)
	return strings.Contains(o, "orca") || strings.Contains(o, "pqo") || strings.Contains(o, "pivotal optimizer")
}

// Severity grades a Finding.
type Severity string

// The severities, from best to worst.
const (
	// SeverityOK: the lookup runs as it should.
	SeverityOK Severity = "ok"
	// SeverityNote: worth knowing, nothing to fix.
	SeverityNote Severity = "note"
	// SeverityWarn: lookups are slower than they need to be; the text
	// says what to change.
	SeverityWarn Severity = "warn"
)

// Finding is one sentence of the doctor's verdict.
type Finding struct {
	Severity Severity
	Text     string
}

// String returns "warn  <text>".
func (f Finding) String() string { return fmt.Sprintf("%-5s %s", f.Severity, f.Text) }

// PlanCheck is everything the doctor learned about one namespace's key
// lookup; Findings turns it into plain words. It needs no database, so
// Greenplum plans can be checked from their text.
type PlanCheck struct {
	Dialect dialect.Dialect
	// Table and KeyColumn name what is looked up.
	Table     string
	KeyColumn string
	// Partitions is the number of leaf partitions of the table on
	// PostgreSQL: 1 when it is not partitioned.
	Partitions int
	// Segments is the number of primary segments on Greenplum.
	Segments int
	// Settings are Greenplum's session settings as the lookup saw them:
	// optimizer, gp_enable_direct_dispatch, plan_cache_mode.
	Settings map[string]string
	// Plan is the EXPLAIN of the lookup as the service runs it: a
	// prepared statement with a parameter, at its sixth execution, when
	// the plan cache may have switched to a generic plan.
	Plan string
	// GenericPlan is the EXPLAIN under plan_cache_mode=force_generic_plan
	// on PostgreSQL; empty when not checked.
	GenericPlan string
	// IndexPlan is the EXPLAIN with sequential scans disabled, taken when
	// Plan reads the table without an index: it tells whether an index
	// could serve the lookup. Empty when not checked.
	IndexPlan string
	// GINIndex is the GIN index on the value column that serves _query,
	// empty when there is none. Packed says whether the value is one
	// column (the columns layout has no containment index).
	GINIndex string
	Packed   bool

	// Writable says whether the namespace takes writes; WritePlan is then
	// the EXPLAIN of its write (the upsert, or the UPDATE of an
	// append-optimized table), and SequenceCache the CACHE of the version
	// sequence it draws from (0 when not found).
	Writable  bool
	WritePlan string
	// WritePlans are the EXPLAIN of every statement of a write, the plain
	// write (WritePlan) first; on Greenplum Findings judges the dispatch
	// of each.
	WritePlans    []StatementPlan
	SequenceCache int64
	// Reltuples is the planner's row count of the table, summed over its
	// leaf partitions; NeverAnalyzed says that no leaf has statistics.
	Reltuples     float64
	NeverAnalyzed bool
	// RowsAtLeast is a count of the table's rows, stopped a little over
	// twice Reltuples; StatsCounted says whether it was taken (a table the
	// planner takes for more than 500,000 rows is not counted).
	RowsAtLeast  int64
	StatsCounted bool

	// BatchPlan is the EXPLAIN, on Greenplum, of the batched lookup (the
	// `= ANY` of folded misses and _mget) of BatchKeys keys that live on
	// BatchSegments segments, sent in the service's read mode; empty when
	// not checked.
	BatchPlan     string
	BatchKeys     int
	BatchSegments int
}

// Findings returns the verdict on the lookup in plain words: one finding
// per question (how many partitions or segments it reaches, whether it
// uses an index, the Greenplum settings, _query's index). A finding with
// SeverityWarn says what to change.
func (c PlanCheck) Findings() []Finding {
	var out []Finding
	add := func(s Severity, format string, args ...any) {
		out = append(out, Finding{Severity: s, Text: fmt.Sprintf(format, args...)})
	}
	plan := ParsePlan(c.Plan)
	kind := "custom plan"
	if plan.Generic() {
		kind = "generic plan"
	}
	scans := plan.Scans()
	if len(scans) == 0 {
		add(SeverityWarn, "the lookup plan reads no table; the doctor cannot judge it")
		return out
	}

	switch c.Dialect {
	case dialect.Greenplum:
		c.greenplumDispatch(plan, add)
	default:
		c.postgresPartitions(plan, scans, kind, add)
	}
	c.indexUse(scans, kind, add)
	c.statistics(add)
	if c.Dialect == dialect.Greenplum {
		c.greenplumBatch(add)
		c.greenplumSettings(plan, add)
	}
	if c.Writable {
		c.writes(add)
	}
	switch {
	case c.GINIndex != "":
		add(SeverityOK, "_query: containment (@>) is served by the GIN index %s", c.GINIndex)
	case c.Packed:
		add(SeverityNote, "_query: no GIN index on the value column, so containment queries read the whole table; "+
			"add one (storage.gin_index, or CREATE INDEX ON %s USING gin (<value> jsonb_path_ops))", c.Table)
	default:
		add(SeverityNote, "_query: the columns layout builds each row's JSON to compare it, so containment queries read the whole table")
	}
	return out
}

// postgresPartitions judges how many hash partitions the lookup reads,
// under the plan the service gets and under a generic plan.
func (c PlanCheck) postgresPartitions(plan Plan, scans []PlanNode, kind string, add func(Severity, string, ...any)) {
	if c.Partitions <= 1 {
		add(SeverityNote, "the table is not partitioned; the lookup reads %s (%s)", scans[0].Relation, kind)
		return
	}
	c.partitionVerdict(plan, scans, "the lookup ("+kind+" at the 6th execution)", add)
	if c.GenericPlan != "" && !plan.Generic() {
		gp := ParsePlan(c.GenericPlan)
		c.partitionVerdict(gp, gp.Scans(), "with a generic plan (plan_cache_mode=force_generic_plan), the lookup", add)
	}
}

func (c PlanCheck) partitionVerdict(plan Plan, scans []PlanNode, subject string, add func(Severity, string, ...any)) {
	switch n := len(scans); {
	case n == 1 && plan.SubplansRemoved > 0:
		add(SeverityOK, "%s reads 1 of %d partitions (%s): the others are pruned when it starts (Subplans Removed: %d)",
			subject, c.Partitions, scans[0].Relation, plan.SubplansRemoved)
	case n == 1:
		add(SeverityOK, "%s reads 1 of %d partitions (%s)", subject, c.Partitions, scans[0].Relation)
	case n >= c.Partitions:
		add(SeverityWarn, "%s scans all %d partitions: partition pruning did not happen. The table must be "+
			"partitioned by %q, and the key must be passed with the column's exact type", subject, c.Partitions, c.KeyColumn)
	default:
		add(SeverityWarn, "%s scans %d of %d partitions; a key lives in one", subject, n, c.Partitions)
	}
}

// greenplumBatch judges how many segments the batched lookup is sent to.
// With the keys in the query's text (the simple protocol) or a custom plan,
// Greenplum's planner sends an `= ANY` of fewer than 3 × segments distinct
// keys (dialect.TargetedBatchKeys) only to the segments that hold them, so
// one query for a batch is as narrow as one query per segment's keys would
// be, and cheaper for the coordinator; a larger batch, a generic plan, or
// GPORCA, sends it to every segment.
func (c PlanCheck) greenplumBatch(add func(Severity, string, ...any)) {
	if c.BatchPlan == "" {
		return
	}
	m, ok := ParsePlan(c.BatchPlan).Motion()
	switch {
	case !ok:
		add(SeverityNote, "the batched lookup plan has no Gather Motion: it runs on the coordinator alone")
	case m.Senders <= c.BatchSegments && c.Segments > 0:
		add(SeverityOK, "a batched lookup of %d keys on %d segments is dispatched to those segments only (Gather Motion %d:%d): "+
			"folded misses need no grouping by segment. A batch of up to %d distinct keys goes to its keys' segments, a larger one to all %d",
			c.BatchKeys, c.BatchSegments, m.Senders, max(m.Receivers, 1), dialect.TargetedBatchKeys(c.Segments), c.Segments)
	case m.Senders <= c.BatchSegments:
		add(SeverityOK, "a batched lookup of %d keys on %d segments is dispatched to those segments only (Gather Motion %d:%d): "+
			"folded misses need no grouping by segment", c.BatchKeys, c.BatchSegments, m.Senders, max(m.Receivers, 1))
	default:
		add(SeverityWarn, "a batched lookup of %d keys on %d segments is dispatched to %d segments (Gather Motion %d:%d): "+
			"every folded miss costs each segment a query. The keys must reach the planner as constants: the simple protocol "+
			"(exec mode auto or simple_protocol), optimizer=off, no plan_cache_mode=force_generic_plan",
			c.BatchKeys, c.BatchSegments, m.Senders, m.Senders, max(m.Receivers, 1))
	}
}

// greenplumDispatch judges how many segments the lookup is sent to.
func (c PlanCheck) greenplumDispatch(plan Plan, add func(Severity, string, ...any)) {
	m, ok := plan.Motion()
	switch {
	case !ok:
		add(SeverityNote, "the lookup plan has no Gather Motion: it runs on the coordinator alone")
	case m.Senders == 1:
		add(SeverityOK, "the lookup is direct-dispatched to one segment (Gather Motion 1:1)")
	default:
		segs := m.Senders
		if c.Segments > 0 {
			segs = c.Segments
		}
		add(SeverityWarn, "the lookup is dispatched to all %d segments (Gather Motion %d:%d), not to the one that holds the key. "+
			"Check that the table is DISTRIBUTED BY (%s), that the key is passed with the column's exact type, "+
			"and the session settings below", segs, m.Senders, max(m.Receivers, 1), c.KeyColumn)
	}
}

// indexUse judges whether the lookup reads through an index.
func (c PlanCheck) indexUse(scans []PlanNode, kind string, add func(Severity, string, ...any)) {
	var seq []string
	var idx []string
	for _, s := range scans {
		if s.usesIndex() {
			idx = append(idx, s.Index)
		} else {
			seq = append(seq, s.Relation)
		}
	}
	if len(seq) == 0 {
		add(SeverityOK, "the lookup reads by index (%s)", strings.Join(dedupe(idx), ", "))
		return
	}
	if c.IndexPlan != "" {
		ip := ParsePlan(c.IndexPlan)
		usable := true
		var names []string
		for _, s := range ip.Scans() {
			usable = usable && s.usesIndex()
			names = append(names, s.Index)
		}
		if usable && len(names) > 0 && c.Dialect == dialect.Greenplum {
			// Greenplum's planner goes by pg_class alone: automatic
			// statistics run on a table's first insert and autovacuum is
			// off, so a table that grows stays a sequential scan until
			// ANALYZE.
			add(SeverityNote, "the lookup reads %s sequentially because the planner takes it for %.0f rows; the index %s is usable. "+
				"Greenplum re-plans only after ANALYZE (automatic statistics run on a table's first insert, autovacuum is off): "+
				"run ANALYZE %s after loading it by other means than warmcache load", strings.Join(dedupe(seq), ", "), c.Reltuples,
				strings.Join(dedupe(names), ", "), c.Table)
			return
		}
		if usable && len(names) > 0 {
			add(SeverityNote, "the lookup reads %s sequentially because it is small enough that this is cheaper; "+
				"the index %s is usable and the planner takes it as the table grows", strings.Join(dedupe(seq), ", "), strings.Join(dedupe(names), ", "))
			return
		}
	}
	add(SeverityWarn, "the lookup reads %s sequentially: there is no usable index on %q, so every lookup reads the whole table. "+
		"Add a primary key or an index: CREATE INDEX ON %s (%s)", strings.Join(dedupe(seq), ", "), c.KeyColumn, c.Table, c.KeyColumn)
}

// statistics judges whether the planner's row count is far below the
// table's real size. On Greenplum that is a warning: its planner takes the
// row count from pg_class alone, automatic statistics run only on a table's
// first insert and autovacuum is off, so lookups stay planned for a tiny
// table (sequential scans) until ANALYZE. PostgreSQL's planner scales the
// count by the table's current size and autovacuum analyzes it soon, so
// there it is a note.
func (c PlanCheck) statistics(add func(Severity, string, ...any)) {
	if !c.StatsCounted || c.RowsAtLeast <= staleLimit(c.Reltuples) {
		return
	}
	sev, why := SeverityNote, "PostgreSQL's planner scales the estimate by the table's current size, and autovacuum analyzes it soon"
	if c.Dialect == dialect.Greenplum {
		sev, why = SeverityWarn, "Greenplum runs automatic statistics only on a table's first insert and has autovacuum off, "+
			"so lookups may be planned as sequential scans until then"
	}
	if c.NeverAnalyzed {
		add(sev, "%s has never been analyzed and holds at least %d rows; run ANALYZE %s after loading it "+
			"(%s; warmcache load analyzes after each load)", c.Table, c.RowsAtLeast, c.Table, why)
		return
	}
	add(sev, "statistics of %s are stale: the planner takes it for %.0f rows, it holds at least %d; run ANALYZE %s after loading it "+
		"(%s; warmcache load analyzes after each load)", c.Table, c.Reltuples, c.RowsAtLeast, c.Table, why)
}

// writes judges the write plan and the version sequence.
func (c PlanCheck) writes(add func(Severity, string, ...any)) {
	if c.SequenceCache > 1 {
		add(SeverityWarn, "the version sequence %s has CACHE %d: each session hands out values from its own block, so versions drawn "+
			"on different connections are not ordered. Writes still keep each key's versions growing, but a key written again after "+
			"its delete may get a version below the delete's; run ALTER SEQUENCE %s CACHE 1", pgstore.VersionSequence, c.SequenceCache, pgstore.VersionSequence)
	}
	if c.WritePlan == "" {
		return
	}
	if c.Dialect != dialect.Greenplum {
		add(SeverityOK, "the write is planned on %s alone", c.Table)
		return
	}
	plans := c.WritePlans
	if len(plans) == 0 {
		plans = []StatementPlan{{Name: "upsert", Plan: c.WritePlan}}
	}
	add(SeverityOK, "a write first takes its locks and draws its version in one round trip on the coordinator alone (they read no table), "+
		"then sends its statements with the version as a parameter")
	for i, p := range plans {
		sev, text := writeDispatch(ParsePlan(p.Plan))
		if i == 0 && sev == SeverityOK && strings.Contains(text, "Gather Motion 1:1") {
			text += "; nextval() inside the write would be evaluated on a segment, add a Redistribute Motion and ask the coordinator for every value"
		}
		add(sev, "%s: %s", p.Name, text)
	}
}

// writeDispatch judges the dispatch of one write statement's plan on
// Greenplum.
func writeDispatch(plan Plan) (Severity, string) {
	var redistribute, gather PlanNode
	for _, n := range plan.Nodes {
		switch {
		case n.Type == "Redistribute Motion" && redistribute.Type == "":
			redistribute = n
		case n.Type == "Gather Motion" && gather.Type == "":
			gather = n
		}
	}
	switch {
	case redistribute.Type != "":
		return SeverityNote, fmt.Sprintf("not direct-dispatched: the plan is a Gather Motion %d:%d over a Redistribute Motion %d:%d. "+
			"Greenplum builds the row in one slice and sends it to the segment that owns the key, and every segment takes part "+
			"in the statement, so a write costs more than a lookup however the key is passed; that is how Greenplum plans it, "+
			"not a setting to fix",
			gather.Senders, max(gather.Receivers, 1), redistribute.Senders, redistribute.Receivers)
	case gather.Type != "" && gather.Senders > 1:
		return SeverityNote, fmt.Sprintf("dispatched to all %d segments (Gather Motion %d:%d)", gather.Senders, gather.Senders, max(gather.Receivers, 1))
	case gather.Type != "":
		return SeverityOK, "direct-dispatched to one segment (Gather Motion 1:1, custom plan): its version comes as a parameter, drawn on the coordinator first"
	default:
		return SeverityOK, "dispatched to the segment that holds the key"
	}
}

// greenplumSettings judges the session settings that key lookups need.
func (c PlanCheck) greenplumSettings(plan Plan, add func(Severity, string, ...any)) {
	if plan.ORCA() || c.Settings["optimizer"] == "on" {
		add(SeverityWarn, "GPORCA plans the lookup (optimizer=on): it adds about 2 ms of planning to each lookup and cannot plan parameters; "+
			"set optimizer=off for the service's role (ALTER ROLE ... SET optimizer = off)")
	} else {
		add(SeverityOK, "the legacy planner plans the lookup (optimizer=off)")
	}
	switch v := c.Settings["gp_enable_direct_dispatch"]; v {
	case "on":
		add(SeverityOK, "direct dispatch is enabled (gp_enable_direct_dispatch=on)")
	case "":
		add(SeverityNote, "gp_enable_direct_dispatch could not be read")
	default:
		add(SeverityWarn, "direct dispatch is disabled (gp_enable_direct_dispatch=%s): every lookup goes to all segments; set it on", v)
	}
	switch v := c.Settings["plan_cache_mode"]; v {
	case "force_generic_plan":
		add(SeverityWarn, "plan_cache_mode=force_generic_plan sends every prepared lookup to all segments; set it to auto")
	case "":
	default:
		add(SeverityOK, "plan_cache_mode=%s keeps custom plans, which can be direct-dispatched", v)
	}
}

func dedupe(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
