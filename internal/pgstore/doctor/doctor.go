// Package doctor checks how the warehouse really executes each namespace's
// key lookup and writes, as pgstore sends them: it explains the statements
// on the store's pool (doctor.go) and judges the plans, the catalog's facts
// and the session settings with pure rules (explain.go), for `warmcache
// doctor` and the service's start.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Diagnosis is the doctor's verdict on one namespace's key lookup.
type Diagnosis struct {
	Namespace string
	Check     PlanCheck
	Findings  []Finding
}

// OK reports whether no finding is a warning.
func (d Diagnosis) OK() bool {
	return !slices.ContainsFunc(d.Findings, func(f Finding) bool { return f.Severity == SeverityWarn })
}

// Diagnose checks how every namespace's key lookup is really executed, the
// way the service runs it: the lookup statement is prepared with a
// parameter of the key's type and executed five times with a key from the
// table, and the sixth execution is explained, when PostgreSQL's plan cache
// may have switched to a generic plan. On PostgreSQL it also explains the
// lookup under plan_cache_mode=force_generic_plan (is a generic plan still
// pruned to one partition?), and, when the lookup reads the table without an
// index, with sequential scans disabled (is there an index at all?). On
// Greenplum it reads the session settings that direct dispatch needs. For a
// writable namespace it also explains the write (the upsert, or the UPDATE
// of an append-optimized table) for a key from the table, and reads the
// version sequence's cache. It compares the planner's row count
// (pg_class.reltuples) with a count of the table bounded to a little over
// twice that, to tell stale statistics.
//
// Each namespace runs in its own transaction on one connection, which is
// rolled back, and its prepared statements are deallocated, so the doctor
// works through PgBouncer in transaction pooling and changes nothing. The
// diagnoses come in namespace name order. The error reports a namespace the
// doctor could not check; the diagnoses before it are returned with it.
func Diagnose(ctx context.Context, s *pgstore.Store) ([]Diagnosis, error) {
	d := doctor{pool: s.Pool(), dialect: s.Dialect()}
	var out []Diagnosis
	for _, t := range s.Tables() {
		name := t.Namespace.Name
		check, err := d.checkLookup(ctx, t)
		if err != nil {
			return out, fmt.Errorf("pgstore: doctor %s: %w", name, err)
		}
		findings := append(check.Findings(), d.lookupFunctionFinding(t)...)
		out = append(out, Diagnosis{Namespace: name, Check: check, Findings: append(findings, d.writeFunctionFinding(t)...)})
	}
	return out, nil
}

// doctor is the pool and the dialect of the store it examines.
type doctor struct {
	pool    *pgxpool.Pool
	dialect dialect.Dialect
}

// lookupFunctionFinding says how t's batched lookups are planned on
// PostgreSQL: once per session through the lookup function, or at every
// query without it.
func (d doctor) lookupFunctionFinding(t pgstore.Table) []Finding {
	switch {
	case d.dialect != dialect.Postgres:
		return nil
	case t.Statements.LookupCall != "":
		return []Finding{{SeverityOK, fmt.Sprintf("lookups read through %s, whose plan each session keeps", t.Statements.LookupSignature())}}
	default:
		return []Finding{{SeverityNote, "lookups are planned at every query: no lookup function (--pg-lookup-function=off, or it could not be created or was dropped; see the service's log)"}}
	}
}

// writeFunctionFinding says how many round trips a write of t costs: one
// through the write function, else a transaction of its own.
func (d doctor) writeFunctionFinding(t pgstore.Table) []Finding {
	switch {
	case !t.Namespace.Writable:
		return nil
	case t.Statements.WriteCall != "":
		return []Finding{{SeverityOK, fmt.Sprintf("writes run through %s: a write of one key, conditional or not, or a delete, is one statement and one round trip, "+
			"and a transaction of several is one round trip", t.Statements.WriteSignature())}}
	case t.Statements.AppendOptimized:
		return nil
	default:
		return []Finding{{SeverityNote, "a write takes two round trips (its locks and version, then the write with its commit): no write function " +
			"(--pg-write-function=off, or it could not be created or was dropped; see the service's log)"}}
	}
}

// checkLookup gathers the PlanCheck of one namespace.
func (d doctor) checkLookup(ctx context.Context, t pgstore.Table) (PlanCheck, error) {
	ns := t.Namespace
	check := PlanCheck{Dialect: d.dialect, Table: ns.Table, KeyColumn: ns.KeyColumn, Packed: ns.Layout == warmcache.LayoutPacked}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return check, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // the doctor changes nothing
	// Rolled back with the transaction: a plan must not wait for locks.
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '2s'", pgx.QueryExecModeSimpleProtocol); err != nil {
		return check, err
	}
	if err := readTableFacts(ctx, tx, ns, &check); err != nil {
		return check, err
	}
	key, err := sampleKey(ctx, tx, ns)
	if err != nil {
		return check, err
	}
	err = explainLookups(ctx, tx, t, key, &check)
	return check, err
}

// readTableFacts fills check with what the catalog says of ns's table: on
// Greenplum its segments and the settings direct dispatch needs, then its
// leaf partitions, its GIN index, its statistics and, when ns is writable,
// the version sequence's cache.
func readTableFacts(ctx context.Context, tx pgx.Tx, ns *warmcache.Namespace, check *PlanCheck) error {
	const simple = pgx.QueryExecModeSimpleProtocol
	var relid uint32
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1)::oid", simple, tableIdent(ns.Table)).Scan(&relid); err != nil {
		return fmt.Errorf("look up table: %w", err)
	}
	var err error
	if check.Dialect == dialect.Greenplum {
		if check.Segments, err = dialect.Segments(ctx, tx); err != nil {
			return err
		}
		check.Settings, err = dialect.ReadSettings(ctx, tx, dialect.SettingNames(dialect.LookupSettings())...)
		if err != nil {
			return err
		}
	}
	err = tx.QueryRow(ctx, "SELECT count(*) FROM pg_partition_tree($1::oid::regclass) WHERE isleaf", simple, relid).Scan(&check.Partitions)
	if err != nil {
		return fmt.Errorf("count partitions: %w", err)
	}
	if check.GINIndex, err = ginIndex(ctx, tx, relid, ns); err != nil {
		return err
	}
	if err := readStatistics(ctx, tx, relid, ns, check); err != nil {
		return err
	}
	if ns.Writable {
		check.Writable = true
		err := tx.QueryRow(ctx, `SELECT coalesce((SELECT s.cache_size FROM pg_sequences s
WHERE s.sequencename = $1 AND s.schemaname = ANY (current_schemas(false))
ORDER BY array_position(current_schemas(false), s.schemaname) LIMIT 1), 0)`, simple, pgstore.VersionSequence).Scan(&check.SequenceCache)
		if err != nil {
			return fmt.Errorf("read the version sequence: %w", err)
		}
	}
	return nil
}

// sampleKey returns a key from ns's table, so that the plan is the one of a
// real hit, or key "0" when the table is empty.
func sampleKey(ctx context.Context, tx pgx.Tx, ns *warmcache.Namespace) (any, error) {
	var key any = "0"
	if ns.KeyType == warmcache.KeyBigint {
		key = int64(0)
	}
	err := tx.QueryRow(ctx, fmt.Sprintf("SELECT %s FROM %s LIMIT 1", pgx.Identifier{ns.KeyColumn}.Sanitize(), tableIdent(ns.Table)), pgx.QueryExecModeSimpleProtocol).Scan(&key)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return key, fmt.Errorf("sample a key: %w", err)
	}
	return key, nil
}

// explainLookups fills check's plans for key: the lookup after five
// executions, on partitioned PostgreSQL the generic plan, for a writable
// namespace the write, on Greenplum the batched lookup, and, when the
// lookup scans without an index, the plan with sequential scans disabled.
func explainLookups(ctx context.Context, tx pgx.Tx, t pgstore.Table, key any, check *PlanCheck) error {
	const simple = pgx.QueryExecModeSimpleProtocol
	// Prepared statements outlive a rollback: a savepoint keeps the
	// transaction usable after a failure so that they can be deallocated
	// on the same server connection.
	if _, err := tx.Exec(ctx, "SAVEPOINT warmcache_doctor", simple); err != nil {
		return err
	}
	e := &lookupExplainer{tx: tx, t: t, key: key, prefix: fmt.Sprintf("warmcache_doctor_%x", rand.Uint64())}
	defer e.release(context.WithoutCancel(ctx))
	var err error
	if check.Plan, err = e.explain(ctx, "_auto", 5); err != nil {
		return err
	}
	if check.Dialect == dialect.Postgres && check.Partitions > 1 {
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan", simple); err != nil {
			return err
		}
		if check.GenericPlan, err = e.explain(ctx, "_generic", 0); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = auto", simple); err != nil {
			return err
		}
	}
	if t.Namespace.Writable {
		if check.WritePlans, err = explainWrites(ctx, tx, t, key); err != nil {
			return err
		}
		check.WritePlan = check.WritePlans[0].Plan
	}
	if check.Dialect == dialect.Greenplum {
		if err := explainBatch(ctx, tx, t, check); err != nil {
			return err
		}
	}
	if slices.ContainsFunc(ParsePlan(check.Plan).Scans(), func(n PlanNode) bool { return !n.usesIndex() }) {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off", simple); err != nil {
			return err
		}
		if check.IndexPlan, err = e.explain(ctx, "_index", 0); err != nil {
			return err
		}
	}
	return nil
}

// lookupExplainer prepares a table's lookup under names that start with
// prefix, and remembers them so that release can deallocate them.
type lookupExplainer struct {
	tx       pgx.Tx
	t        pgstore.Table
	key      any
	prefix   string
	prepared []string
}

// explain prepares the lookup as prefix+suffix, executes it executions
// times with the key and returns the plan of the next execution.
func (e *lookupExplainer) explain(ctx context.Context, suffix string, executions int) (string, error) {
	const simple = pgx.QueryExecModeSimpleProtocol
	name := e.prefix + suffix
	if _, err := e.tx.Exec(ctx, fmt.Sprintf("PREPARE %s (%s) AS %s", name, e.t.Namespace.KeyType, e.t.Statements.Lookup), simple); err != nil {
		return "", fmt.Errorf("prepare the lookup: %w", err)
	}
	e.prepared = append(e.prepared, name)
	for range executions {
		if _, err := e.tx.Exec(ctx, "EXECUTE "+name+"($1)", simple, e.key); err != nil {
			return "", fmt.Errorf("execute the lookup: %w", err)
		}
	}
	rows, err := e.tx.Query(ctx, "EXPLAIN EXECUTE "+name+"($1)", simple, e.key)
	if err != nil {
		return "", fmt.Errorf("explain the lookup: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explain the lookup: %w", err)
	}
	return strings.Join(lines, "\n"), nil
}

// release rolls back to the savepoint and deallocates the prepared lookups.
func (e *lookupExplainer) release(ctx context.Context) {
	const simple = pgx.QueryExecModeSimpleProtocol
	_, _ = e.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT warmcache_doctor", simple)
	for _, name := range e.prepared {
		_, _ = e.tx.Exec(ctx, "DEALLOCATE "+name, simple)
	}
}

// batchSampleKeys is how many keys the doctor's batched lookup asks for.
const batchSampleKeys = 4

// explainBatch explains, on Greenplum, the batched lookup of a few keys
// from two segments (one when the table lives on one), in the service's
// read mode, and records on how many segments the keys live.
func explainBatch(ctx context.Context, tx pgx.Tx, t pgstore.Table, check *PlanCheck) error {
	ns := t.Namespace
	const simple = pgx.QueryExecModeSimpleProtocol
	// Two keys from each of the two lowest segments that hold rows.
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT k::text, seg FROM (
  SELECT %[1]s AS k, gp_segment_id AS seg, row_number() OVER (PARTITION BY gp_segment_id ORDER BY %[1]s) AS n
  FROM (SELECT %[1]s, gp_segment_id FROM %[2]s LIMIT 1000) AS sample) AS numbered
WHERE n <= %[3]d ORDER BY seg, k LIMIT %[4]d`, pgx.Identifier{ns.KeyColumn}.Sanitize(), tableIdent(ns.Table), batchSampleKeys/2, batchSampleKeys), simple)
	if err != nil {
		return fmt.Errorf("sample keys for the batched lookup: %w", err)
	}
	var (
		keys  []int64 // of a bigint key
		texts []string
	)
	segments := map[int]bool{}
	var text string
	var seg int
	_, err = pgx.ForEachRow(rows, []any{&text, &seg}, func() error {
		k, err := ns.ParseKey(text)
		if err != nil {
			return err
		}
		keys, texts = append(keys, k.Int), append(texts, k.Text)
		segments[seg] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("sample keys for the batched lookup: %w", err)
	}
	if len(keys) == 0 {
		return nil // an empty table: nothing to judge
	}
	var arg any = texts // the key array, in the key column's type
	if ns.KeyType == warmcache.KeyBigint {
		arg = keys
	}
	plan, err := tx.Query(ctx, "EXPLAIN "+t.Statements.LookupMany, t.ReadMode, arg)
	if err != nil {
		return fmt.Errorf("explain the batched lookup: %w", err)
	}
	lines, err := pgx.CollectRows(plan, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("explain the batched lookup: %w", err)
	}
	check.BatchPlan, check.BatchKeys, check.BatchSegments = strings.Join(lines, "\n"), len(keys), len(segments)
	return nil
}

// StatementPlan is the EXPLAIN of one statement the service runs.
type StatementPlan struct {
	// Name says what the statement does, such as "upsert".
	Name string
	Plan string
}

// explainWrites returns the EXPLAIN of each statement of the namespace's
// writes of key, the one of a plain write first: the upsert, the
// conditional update and the deletes, or on an append-optimized table the
// UPDATE, the INSERT after it, and the UPDATE and DELETE of a delete. Each
// runs with its versions as parameters, as the service sends them.
func explainWrites(ctx context.Context, tx pgx.Tx, t pgstore.Table, key any) ([]StatementPlan, error) {
	st := t.Statements
	// ttl is the TTL parameter of the statements that set an expiry.
	ttl := func(args ...any) []any {
		if st.Expiring {
			return append(args, (*int64)(nil))
		}
		return args
	}
	type statement struct {
		name, sql string
		args      []any
	}
	var statements []statement
	if st.AppendOptimized {
		statements = []statement{
			{"update", st.Update, ttl(key, "{}", int64(1))},
			{"insert after an update of no row", st.Insert, ttl(key, "{}", int64(1))},
			{"conditional update", st.UpdateIfMatch, ttl(key, "{}", int64(1), int64(2))},
			{"delete: retire", st.Retire, []any{key, int64(1)}},
			{"delete: remove", st.Remove, []any{key}},
		}
	} else {
		statements = []statement{
			{"upsert", st.Upsert, ttl(key, "{}", int64(1))},
			{"conditional update", st.UpdateIfMatch, ttl(key, "{}", int64(1), int64(2))},
			{"delete", st.Delete, []any{key, int64(1)}},
			{"conditional delete", st.DeleteIfMatch, []any{key, int64(1), int64(2)}},
		}
	}
	plans := make([]StatementPlan, 0, len(statements))
	for _, s := range statements {
		rows, err := tx.Query(ctx, "EXPLAIN "+s.sql, append([]any{pgx.QueryExecModeSimpleProtocol}, s.args...)...)
		if err != nil {
			return nil, fmt.Errorf("explain the %s: %w", s.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("explain the %s: %w", s.name, err)
		}
		plans = append(plans, StatementPlan{Name: s.name, Plan: strings.Join(lines, "\n")})
	}
	return plans, nil
}

// maxStatsCount bounds the rows the doctor counts to judge statistics.
const maxStatsCount = 1_000_000

// readStatistics reads the planner's row count of the namespace's table
// (summed over the leaves of a partitioned table), and counts the table's
// rows up to a little over twice that (at most maxStatsCount), so that
// Findings can tell statistics far below the real size.
func readStatistics(ctx context.Context, tx pgx.Tx, relid uint32, ns *warmcache.Namespace, check *PlanCheck) error {
	const simple = pgx.QueryExecModeSimpleProtocol
	err := tx.QueryRow(ctx, `SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::float8, coalesce(bool_and(c.reltuples < 0 OR c.relpages = 0), true)
FROM pg_class c
WHERE c.relkind <> 'p' AND (c.oid = $1 OR c.oid IN (SELECT relid FROM pg_partition_tree($1::oid::regclass)))`, simple, relid).
		Scan(&check.Reltuples, &check.NeverAnalyzed)
	if err != nil {
		return fmt.Errorf("read statistics: %w", err)
	}
	limit := staleLimit(check.Reltuples)
	if limit > maxStatsCount {
		return nil
	}
	err = tx.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %d) AS s", tableIdent(ns.Table), limit+1), simple).Scan(&check.RowsAtLeast)
	if err != nil {
		return fmt.Errorf("count rows: %w", err)
	}
	check.StatsCounted = true
	return nil
}

// staleLimit is the row count above which statistics of reltuples rows
// are stale: a little over twice as many.
func staleLimit(reltuples float64) int64 {
	return 2*int64(reltuples) + 1000
}

// ginIndex returns the name of a GIN index whose first column is the
// namespace's packed jsonb value, or "".
func ginIndex(ctx context.Context, tx pgx.Tx, relid uint32, ns *warmcache.Namespace) (string, error) {
	if ns.Layout != warmcache.LayoutPacked {
		return "", nil
	}
	var name string
	err := tx.QueryRow(ctx, `SELECT c.relname FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = $1 AND am.amname = 'gin' AND a.attname = $2 AND a.atttypid = 'jsonb'::regtype
ORDER BY c.relname LIMIT 1`, pgx.QueryExecModeSimpleProtocol, relid, ns.ValueColumn).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("look up the GIN index: %w", err)
	}
	return name, nil
}

// tableIdent quotes a table name, qualified or not.
func tableIdent(table string) string {
	return pgx.Identifier(strings.Split(table, ".")).Sanitize()
}
