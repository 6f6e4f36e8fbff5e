package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Loader = (*Store)(nil)

// The temporary tables of a load are these prefixes followed by the digest
// of their shape (see loadTables). Both are dropped at the end of the
// load's transaction, whatever its outcome.
const (
	loadStagePrefix  = "warmcache_load_stage_"
	loadSourcePrefix = "warmcache_load_source_"
)

// loadTables returns the column definitions of the staging table of a load
// into ns, and the names of the load's staging and source tables.
//
// The names carry a digest of those column definitions, so that a name
// always denotes one shape. pgx's CopyFrom sends its rows in the binary
// format, encoding each value by the column type that it learns by
// describing "select line, key, value from <staging table>"; in the
// cache_statement and cache_describe exec modes the connection keeps that
// description, keyed by the SQL text, for as long as it lives, and later
// COPYs into a table of the same name use it without asking the server
// again. Were tables of different shapes to share a name, a load of text
// keys on a connection that had loaded bigint keys would encode its keys
// as bigints (the text key "7234017283807667300" arriving as the eight
// bytes "dddddddd") and a load of bigint keys after text keys would send
// text where the server reads a bigint. With the shape in the name, what a
// connection has cached for a name is true of every table of that name, on
// every connection and in every exec mode, and no statement, temporary
// table or description is shared by loads of different shapes. Loads of
// namespaces with the same key type share the names, as they share the
// shape. The source table's columns follow from the staging table's, so
// it takes the same digest.
func loadTables(ns *warmcache.Namespace) (columns, stage, source string) {
	columns = fmt.Sprintf("line bigint NOT NULL, key %s NOT NULL, value text NOT NULL", ns.KeyType)
	sum := sha256.Sum256([]byte(columns))
	digest := hex.EncodeToString(sum[:8])
	return columns, loadStagePrefix + digest, loadSourcePrefix + digest
}

// loadTableLock takes the lock of a namespace's table ($1, lockHash)
// alone, until the load's transaction ends. Writes take it shared
// (StatementSet.TableLock).
const loadTableLock = "SELECT pg_advisory_xact_lock($1::bigint)"

// LoadStatements holds the SQL of a namespace's bulk load, in the order it
// runs inside one transaction. Existing, Update and Merge take one
// parameter, $1: the load's version, drawn once from the version sequence
// on the coordinator (NextVersion). A row that a load inserts or changes
// gets that version, or its old version + 1 when greater, so a key's
// versions keep growing and one load's rows share one version, as they
// share one commit.
type LoadStatements struct {
	// StageTable is the name of the staging table, the target of COPY. It
	// is named after its columns (see loadTables).
	StageTable string
	// Stage creates the temporary staging table that COPY fills:
	// (line bigint, key <key type>, value text).
	Stage string
	// Source creates the temporary table of the last line of each key,
	// with the value as jsonb. Its row count is the number of keys.
	Source string
	// NextVersion draws the load's version.
	NextVersion string
	// Existing counts the keys of Source already in the table. It is
	// empty with AppendOptimized.
	Existing string
	// Update sets the new value and version on the rows whose stored value
	// differs from Source and returns their keys: the updated keys. It is
	// set only with AppendOptimized, whose tables accept UPDATE ...
	// RETURNING but neither ON CONFLICT nor DELETE ... RETURNING.
	Update string
	// Merge writes Source into the table and returns the key of every
	// row it inserted or changed. Without AppendOptimized it is one INSERT
	// ... ON CONFLICT (key) DO UPDATE that leaves equal values alone; with
	// AppendOptimized, an INSERT of the keys that are not in the table.
	Merge string
	// Reltuples reads the planner's row count of the table (summed over
	// its leaf partitions), for the decision to analyze.
	Reltuples string
	// Analyze refreshes the table's statistics after a load that changed
	// at least a tenth of the rows the planner counts (see
	// analyzeFraction). Greenplum runs automatic statistics only on a
	// table's first insert and has autovacuum off, so without it a table
	// filled by later loads stays planned as a handful of rows and key
	// lookups turn into sequential scans.
	Analyze string
	// AppendOptimized says that the merge is Update then Merge, for
	// tables that reject ON CONFLICT (Greenplum's append-optimized tables).
	AppendOptimized bool
}

// BuildLoadStatements returns the SQL of ns's bulk load on dialect d. On
// Greenplum the temporary tables are distributed by the key, so that the
// merge joins rows on the segment that holds them. It needs no database and
// fails when the namespace is incomplete, or stores opaque bytes (an error
// that wraps warmcache.ErrInvalidValue): load files carry JSON.
//
// The columns layout reads each source row's record with
// json_populate_record in the select list of a subquery that OFFSET 0
// keeps from being flattened. On Greenplum the same function in the FROM
// list, next to the version and RETURNING, was planned on the
// coordinator's entry process, which then did the whole merge alone; in
// the select list the merge runs on the segments
// (docs/warehouse.md#bulk-loads).
func BuildLoadStatements(d dialect.Dialect, ns *warmcache.Namespace, appendOptimized bool) (LoadStatements, error) {
	if err := checkNamespace(ns); err != nil {
		return LoadStatements{}, err
	}
	if ns.Layout == warmcache.LayoutBytes {
		return LoadStatements{}, fmt.Errorf("pgstore: namespace %q: %w: bulk loads carry JSON values, not opaque bytes", ns.Name, warmcache.ErrInvalidValue)
	}
	var (
		table   = tableIdent(ns.Table)
		key     = ident(ns.KeyColumn)
		version = ident(ns.VersionColumn)
		distrib = ""
	)
	if clause := d.DistributedBy("key"); clause != "" {
		distrib = " " + clause
	}
	columns, loadStage, loadSource := loadTables(ns)
	ls := LoadStatements{
		StageTable: loadStage,
		Stage:      fmt.Sprintf("CREATE TEMPORARY TABLE %s (%s) ON COMMIT DROP%s", loadStage, columns, distrib),
		Source: fmt.Sprintf("CREATE TEMPORARY TABLE %s ON COMMIT DROP AS SELECT DISTINCT ON (key) key, value::jsonb AS value FROM %s ORDER BY key, line DESC%s",
			loadSource, loadStage, distrib),
		NextVersion: "SELECT nextval(" + quoteLiteral(VersionSequence) + ")",
		Reltuples: fmt.Sprintf(`SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::float8 FROM pg_class c
WHERE c.oid = to_regclass(%[1]s) OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass(%[1]s)))`, quoteLiteral(table)),
		Analyze:         "ANALYZE " + table,
		AppendOptimized: appendOptimized,
	}

	v := loadValues(ns, table, loadSource)
	insert := fmt.Sprintf("INSERT INTO %s AS t (%s, %s, %s) SELECT s.key, %s, $1::bigint FROM %s",
		table, key, strings.Join(v.cols, ", "), version, strings.Join(v.vals, ", "), v.from)
	clearExp, changed := loadExpiry(ns)

	if !appendOptimized {
		ls.Existing = fmt.Sprintf("SELECT count(*) FROM %s AS s WHERE EXISTS (SELECT 1 FROM %s AS t WHERE t.%s = s.key)",
			loadSource, table, key)
		assign := make([]string, 0, len(v.cols)+2)
		for _, c := range v.cols {
			assign = append(assign, c+" = EXCLUDED."+c)
		}
		assign = append(assign, fmt.Sprintf("%s = GREATEST(EXCLUDED.%s, t.%s + 1)", version, version, version))
		assign = append(assign, clearExp...)
		ls.Merge = fmt.Sprintf("%s ON CONFLICT (%s) DO UPDATE SET %s WHERE %s RETURNING t.%s",
			insert, key, strings.Join(assign, ", "), changed(v.stored, v.excluded), key)
		return ls, nil
	}
	assign := make([]string, 0, len(v.cols)+2)
	for i, c := range v.cols {
		assign = append(assign, c+" = "+v.vals[i])
	}
	assign = append(assign, fmt.Sprintf("%s = GREATEST($1::bigint, t.%s + 1)", version, version))
	assign = append(assign, clearExp...)
	ls.Update = fmt.Sprintf("UPDATE %s AS t SET %s FROM %s WHERE t.%s = s.key AND %s RETURNING t.%s",
		table, strings.Join(assign, ", "), v.from, key, changed(v.stored, v.incoming), key)
	ls.Merge = fmt.Sprintf("%s WHERE NOT EXISTS (SELECT 1 FROM %s AS e WHERE e.%s = s.key) RETURNING t.%s",
		insert, table, key, key)
	return ls, nil
}

// loadShape is how a load writes a namespace's value: cols are the table's
// value columns, vals the expressions of a source row s that fill them,
// and from is the source; stored, incoming and excluded are the value of a
// stored row t, of the incoming row s and of an upsert's EXCLUDED row, to
// compare.
type loadShape struct {
	cols, vals                       []string
	from, stored, incoming, excluded string
}

// loadValues returns the loadShape of ns's layout, read from the source
// table loadSource, for its table.
func loadValues(ns *warmcache.Namespace, table, loadSource string) loadShape {
	if ns.Layout == warmcache.LayoutColumns {
		var v loadShape
		for _, c := range ns.Columns {
			v.cols = append(v.cols, ident(c.Name))
			v.vals = append(v.vals, "(s.r)."+ident(c.Name))
		}
		// json_populate_record maps the object's fields onto a row of the
		// table's type, as a single write does.
		v.from = fmt.Sprintf("(SELECT key, json_populate_record(NULL::%s, value::json) AS r FROM %s OFFSET 0) AS s", table, loadSource)
		v.stored, v.incoming, v.excluded = valueExpr(ns, "t."), valueExpr(ns, "(s.r)."), valueExpr(ns, "EXCLUDED.")
		return v
	}
	value := ident(ns.ValueColumn)
	return loadShape{cols: []string{value}, vals: []string{"s.value"}, from: loadSource + " AS s",
		stored: "t." + value + "::jsonb", incoming: "s.value", excluded: "EXCLUDED." + value + "::jsonb"}
}

// loadExpiry returns what a load does with ns's expiry column. A loaded
// row never expires: a load clears the expiry of the rows it writes
// (clear, the assignment; none without the column), and a row with an
// expiry is not left alone as unchanged (changed(a, b) is the condition of
// a write of b over a).
func loadExpiry(ns *warmcache.Namespace) (clear []string, changed func(a, b string) string) {
	if ns.ExpiresColumn == "" {
		return nil, func(a, b string) string { return a + " IS DISTINCT FROM " + b }
	}
	exp := ident(ns.ExpiresColumn)
	return []string{exp + " = NULL"}, func(a, b string) string {
		return "(" + a + " IS DISTINCT FROM " + b + " OR t." + exp + " IS NOT NULL)"
	}
}

// analyzeFraction is the share of the planner's row count that a load must
// change to be followed by ANALYZE, as PostgreSQL's autovacuum analyzes
// after a tenth of a table changed: a small load into a large table does
// not pay for sampling it again.
const analyzeFraction = 0.1

// Load bulk-loads rows into ns in one transaction: COPY into a temporary
// staging table, keep the last line of each key, then merge by key (see
// LoadStatements), and ANALYZE the table when the load changed at least a
// tenth of the rows the planner counts. Every inserted
// or changed row takes the load's version; a row whose stored value is
// equal keeps its version and counts as unchanged. Each statement is bound
// by Options.LoadStatementTimeout. If rows.Err() reports an error after the
// last row, the COPY is aborted, nothing is committed, and the error wraps
// it. A value the table rejects (a field of the wrong type) gives an error
// that wraps warmcache.ErrInvalidValue. Other errors are the warehouse's,
// wrapped. The statements run in the simple protocol, so that a load works
// through PgBouncer in transaction pooling.
func (s *Store) Load(ctx context.Context, ns *warmcache.Namespace, rows warmcache.LoadRows) (counts warmcache.LoadCounts, err error) {
	t, err := s.table(ns)
	if err != nil {
		return warmcache.LoadCounts{}, err
	}
	defer func(start time.Time) { t.metrics[opLoad].observe(start, err) }(time.Now())
	ls, err := BuildLoadStatements(s.dialect, ns, t.stmts.AppendOptimized)
	if err != nil {
		return warmcache.LoadCounts{}, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return warmcache.LoadCounts{}, fmt.Errorf("pgstore: load %s: %w", ns.Name, classify(err))
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // the error that matters is err
		}
	}()
	l := &loadTx{tx: tx, ns: ns, ls: ls, maxRow: t.maxRow}
	keys, err := l.stage(ctx, s.loadTimeout, rows)
	if err != nil {
		return warmcache.LoadCounts{}, err
	}
	updated, existing, err := l.merge(ctx)
	if err != nil {
		return warmcache.LoadCounts{}, err
	}
	if err = l.analyze(ctx); err != nil {
		return warmcache.LoadCounts{}, err
	}
	if err = tx.Commit(ctx); err != nil {
		return warmcache.LoadCounts{}, loadError(ns, "commit", err)
	}
	return l.counts(keys, updated, existing), nil
}

// loadTx is one load's transaction: its statements, its version and the
// keys it changed so far.
type loadTx struct {
	tx      pgx.Tx
	ns      *warmcache.Namespace
	ls      LoadStatements
	version int64
	changed []warmcache.Key
	// maxRow is the table's table.maxRow.
	maxRow int
}

// loadError returns the error of a load's step: a request error as it is,
// any other wrapped with the namespace and the step.
func loadError(ns *warmcache.Namespace, step string, err error) error {
	if err = classify(err); isRequestError(err) {
		return err
	}
	return fmt.Errorf("pgstore: load %s: %s: %w", ns.Name, step, err)
}

// stage bounds each statement by timeout, copies rows into the staging
// table and keeps the last line of each key, and returns how many keys the
// load has. An error of rows after the last row comes back as it is.
func (l *loadTx) stage(ctx context.Context, timeout time.Duration, rows warmcache.LoadRows) (keys int64, err error) {
	const simple = pgx.QueryExecModeSimpleProtocol
	if _, err = l.tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", timeout.Milliseconds()), simple); err != nil {
		return 0, loadError(l.ns, "set statement_timeout", err)
	}
	if _, err = l.tx.Exec(ctx, l.ls.Stage, simple); err != nil {
		return 0, loadError(l.ns, "create staging table", err)
	}
	if _, err = l.tx.CopyFrom(ctx, pgx.Identifier{l.ls.StageTable}, []string{"line", "key", "value"}, &copySource{ns: l.ns, rows: rows, maxRow: l.maxRow}); err != nil {
		if rowsErr := rows.Err(); rowsErr != nil {
			return 0, rowsErr
		}
		return 0, loadError(l.ns, "copy", err)
	}
	tag, err := l.tx.Exec(ctx, l.ls.Source, simple)
	if err != nil {
		return 0, loadError(l.ns, "deduplicate keys", err)
	}
	return tag.RowsAffected(), nil
}

// merge takes the table's lock alone, so that the writes in flight commit
// first and later ones wait for the load's commit, then draws the load's
// version and merges the staged rows into the table: every version a row
// gets is above every version its key had, its deletes included. On an append-optimized table it first updates the changed rows
// and returns how many it updated; otherwise it returns how many of the
// load's keys the table already has.
func (l *loadTx) merge(ctx context.Context) (updated, existing int64, err error) {
	const simple = pgx.QueryExecModeSimpleProtocol
	if _, err = l.tx.Exec(ctx, loadTableLock, simple, lockHash(l.ns, nil)); err != nil {
		return 0, 0, loadError(l.ns, "lock the table", err)
	}
	if err = l.tx.QueryRow(ctx, l.ls.NextVersion, simple).Scan(&l.version); err != nil {
		return 0, 0, loadError(l.ns, "draw the load's version", err)
	}
	if l.ls.AppendOptimized {
		if updated, err = l.collect(ctx, l.ls.Update); err != nil {
			return 0, 0, loadError(l.ns, "update changed rows", err)
		}
	} else if err = l.tx.QueryRow(ctx, l.ls.Existing, simple).Scan(&existing); err != nil {
		return 0, 0, loadError(l.ns, "count existing keys", err)
	}
	if _, err = l.collect(ctx, l.ls.Merge); err != nil {
		return 0, 0, loadError(l.ns, "merge", err)
	}
	return updated, existing, nil
}

// collect runs sql with the load's version, adds the keys it returns to the
// changed keys, and returns how many it added.
func (l *loadTx) collect(ctx context.Context, sql string) (int64, error) {
	rows, err := l.tx.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol, l.version)
	if err != nil {
		return 0, err
	}
	before := len(l.changed)
	if l.ns.KeyType == warmcache.KeyBigint {
		var k int64
		_, err = pgx.ForEachRow(rows, []any{&k}, func() error {
			l.changed = append(l.changed, warmcache.Key{Text: strconv.FormatInt(k, 10), Int: k})
			return nil
		})
	} else {
		var k string
		_, err = pgx.ForEachRow(rows, []any{&k}, func() error {
			l.changed = append(l.changed, warmcache.Key{Text: k})
			return nil
		})
	}
	return int64(len(l.changed) - before), err
}

// analyze analyzes the table when the load changed at least analyzeFraction
// of the rows the planner counts.
func (l *loadTx) analyze(ctx context.Context) error {
	const simple = pgx.QueryExecModeSimpleProtocol
	changed := int64(len(l.changed))
	if changed == 0 {
		return nil
	}
	var reltuples float64
	if err := l.tx.QueryRow(ctx, l.ls.Reltuples, simple).Scan(&reltuples); err != nil {
		return loadError(l.ns, "read statistics", err)
	}
	if float64(changed) >= analyzeFraction*reltuples {
		if _, err := l.tx.Exec(ctx, l.ls.Analyze, simple); err != nil {
			return loadError(l.ns, "analyze", err)
		}
	}
	return nil
}

// counts tells what the load did to its keys: inserted, updated, or
// unchanged, and which it changed.
func (l *loadTx) counts(keys, updated, existing int64) warmcache.LoadCounts {
	changed := int64(len(l.changed))
	counts := warmcache.LoadCounts{Changed: l.changed}
	if l.ls.AppendOptimized {
		counts.Inserted = changed - updated
	} else {
		counts.Inserted = keys - existing
	}
	counts.Updated = changed - counts.Inserted
	counts.Unchanged = keys - changed
	return counts
}

// copySource adapts LoadRows to pgx.CopyFromSource.
type copySource struct {
	ns     *warmcache.Namespace
	rows   warmcache.LoadRows
	vals   [3]any
	maxRow int
}

func (c *copySource) Next() bool { return c.rows.Next() }

func (c *copySource) Values() ([]any, error) {
	r := c.rows.Row()
	if err := checkRow(c.ns, c.maxRow, r.Key, r.Value); err != nil {
		return nil, fmt.Errorf("line %d: %w", r.Line, err)
	}
	c.vals[0], c.vals[1], c.vals[2] = r.Line, keyArg(c.ns, r.Key), string(r.Value)
	return c.vals[:], nil
}

func (c *copySource) Err() error { return c.rows.Err() }
