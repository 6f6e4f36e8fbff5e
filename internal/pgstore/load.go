package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Loader = (*Store)(nil)

// The temporary tables of a load. Both are dropped at the end of the load's
// transaction, whatever its outcome.
const (
	loadStage  = "warmcache_load_stage"
	loadSource = "warmcache_load_source"
)

// LoadStatements holds the SQL of a namespace's bulk load, in the order it
// runs inside one transaction. None takes parameters.
type LoadStatements struct {
	// Stage creates the temporary staging table that COPY fills:
	// (line bigint, key <key type>, value text).
	Stage string
	// Source creates the temporary table of the last line of each key,
	// with the value as jsonb. Its row count is the number of keys.
	Source string
	// Existing counts the keys of Source already in the table. It is
	// empty with DeleteInsert.
	Existing string
	// Remove deletes the rows whose stored value differs from Source; its
	// row count is the number of updated keys. It is set only with
	// DeleteInsert.
	Remove string
	// Merge writes Source into the table and returns the key of every
	// inserted or changed row, each at a new version from the version
	// sequence. Without DeleteInsert it is one INSERT ... ON CONFLICT (key)
	// DO UPDATE that leaves equal values alone; with DeleteInsert, an
	// INSERT of the keys that are not (or no longer) in the table.
	Merge string
	// DeleteInsert says that the merge is Remove then Merge, for tables
	// that reject ON CONFLICT (Greenplum's append-optimized tables).
	DeleteInsert bool
}

// BuildLoadStatements returns the SQL of ns's bulk load on dialect d. On
// Greenplum the temporary tables are distributed by the key, so that the
// merge joins rows on the segment that holds them. It needs no database and
// fails when the namespace is incomplete.
func BuildLoadStatements(d Dialect, ns *warmcache.Namespace, deleteInsert bool) (LoadStatements, error) {
	if err := checkNamespace(ns); err != nil {
		return LoadStatements{}, err
	}
	var (
		table   = tableIdent(ns.Table)
		key     = ident(ns.KeyColumn)
		version = ident(ns.VersionColumn)
		nextval = "nextval(" + quoteLiteral(VersionSequence) + ")"
		distrib = ""
	)
	if d == Greenplum {
		distrib = " DISTRIBUTED BY (key)"
	}
	ls := LoadStatements{
		Stage: fmt.Sprintf("CREATE TEMPORARY TABLE %s (line bigint NOT NULL, key %s NOT NULL, value text NOT NULL) ON COMMIT DROP%s",
			loadStage, ns.KeyType, distrib),
		Source: fmt.Sprintf("CREATE TEMPORARY TABLE %s ON COMMIT DROP AS SELECT DISTINCT ON (key) key, value::jsonb AS value FROM %s ORDER BY key, line DESC%s",
			loadSource, loadStage, distrib),
		DeleteInsert: deleteInsert,
	}

	// cols are the table's value columns, vals the expressions of a source
	// row s that fill them, and stored and incoming compare a stored row t
	// with an incoming one.
	var cols, vals []string
	var from string
	var stored, incoming, excluded string
	switch ns.Layout {
	case warmcache.LayoutPacked:
		cols = []string{ident(ns.ValueColumn)}
		vals = []string{"s.value"}
		from = loadSource + " AS s"
		stored = "t." + ident(ns.ValueColumn) + "::jsonb"
		incoming = "s.value"
		excluded = "EXCLUDED." + ident(ns.ValueColumn) + "::jsonb"
	case warmcache.LayoutColumns:
		for _, c := range ns.Columns {
			cols = append(cols, ident(c.Name))
			vals = append(vals, "r."+ident(c.Name))
		}
		// json_populate_record maps the object's fields onto a row of the
		// table's type, as a single write does.
		from = fmt.Sprintf("%s AS s, json_populate_record(NULL::%s, s.value::json) AS r", loadSource, table)
		stored = valueExpr(ns, "t.")
		incoming = valueExpr(ns, "r.")
		excluded = valueExpr(ns, "EXCLUDED.")
	}
	insert := fmt.Sprintf("INSERT INTO %s AS t (%s, %s, %s) SELECT s.key, %s, %s FROM %s",
		table, key, strings.Join(cols, ", "), version, strings.Join(vals, ", "), nextval, from)

	if !deleteInsert {
		ls.Existing = fmt.Sprintf("SELECT count(*) FROM %s AS s WHERE EXISTS (SELECT 1 FROM %s AS t WHERE t.%s = s.key)",
			loadSource, table, key)
		assign := make([]string, 0, len(cols)+1)
		for _, c := range cols {
			assign = append(assign, c+" = EXCLUDED."+c)
		}
		assign = append(assign, version+" = "+nextval)
		ls.Merge = fmt.Sprintf("%s ON CONFLICT (%s) DO UPDATE SET %s WHERE %s IS DISTINCT FROM %s RETURNING t.%s",
			insert, key, strings.Join(assign, ", "), stored, excluded, key)
		return ls, nil
	}
	if ns.Layout == warmcache.LayoutPacked {
		ls.Remove = fmt.Sprintf("DELETE FROM %s AS t USING %s AS s WHERE t.%s = s.key AND %s IS DISTINCT FROM %s",
			table, loadSource, key, stored, incoming)
	} else {
		ls.Remove = fmt.Sprintf("DELETE FROM %s AS t USING %s WHERE t.%s = s.key AND %s IS DISTINCT FROM %s",
			table, from, key, stored, incoming)
	}
	ls.Merge = fmt.Sprintf("%s WHERE NOT EXISTS (SELECT 1 FROM %s AS e WHERE e.%s = s.key) RETURNING t.%s",
		insert, table, key, key)
	return ls, nil
}

// Load bulk-loads rows into ns in one transaction: COPY into a temporary
// staging table, keep the last line of each key, then merge by key (see
// LoadStatements). Every inserted or changed row takes a new version from
// the version sequence; a row whose stored value is equal keeps its
// version and counts as unchanged. If rows.Err() reports an error after the
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
	ls, err := BuildLoadStatements(s.dialect, ns, t.stmts.DeleteInsert)
	if err != nil {
		return warmcache.LoadCounts{}, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return warmcache.LoadCounts{}, fmt.Errorf("pgstore: load %s: %w", ns.Name, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // the error that matters is err
		}
	}()
	fail := func(step string, err error) (warmcache.LoadCounts, error) {
		if ie := writeError("load", ns, warmcache.Key{}, err); isRequestError(ie) {
			return warmcache.LoadCounts{}, ie
		}
		return warmcache.LoadCounts{}, fmt.Errorf("pgstore: load %s: %s: %w", ns.Name, step, err)
	}
	const simple = pgx.QueryExecModeSimpleProtocol
	if _, err = tx.Exec(ctx, ls.Stage, simple); err != nil {
		return fail("create staging table", err)
	}
	if _, err = tx.CopyFrom(ctx, pgx.Identifier{loadStage}, []string{"line", "key", "value"}, &copySource{ns: ns, rows: rows}); err != nil {
		if rowsErr := rows.Err(); rowsErr != nil {
			return warmcache.LoadCounts{}, rowsErr
		}
		return fail("copy", err)
	}
	tag, err := tx.Exec(ctx, ls.Source, simple)
	if err != nil {
		return fail("deduplicate keys", err)
	}
	keys := tag.RowsAffected()
	var existing, updated int64
	if ls.DeleteInsert {
		tag, err = tx.Exec(ctx, ls.Remove, simple)
		if err != nil {
			return fail("remove changed rows", err)
		}
		updated = tag.RowsAffected()
	} else if err = tx.QueryRow(ctx, ls.Existing, simple).Scan(&existing); err != nil {
		return fail("count existing keys", err)
	}
	merged, err := tx.Query(ctx, ls.Merge, simple)
	if err != nil {
		return fail("merge", err)
	}
	if ns.KeyType == warmcache.KeyBigint {
		var k int64
		_, err = pgx.ForEachRow(merged, []any{&k}, func() error {
			counts.Changed = append(counts.Changed, warmcache.Key{Text: strconv.FormatInt(k, 10), Int: k})
			return nil
		})
	} else {
		var k string
		_, err = pgx.ForEachRow(merged, []any{&k}, func() error {
			counts.Changed = append(counts.Changed, warmcache.Key{Text: k})
			return nil
		})
	}
	if err != nil {
		return fail("merge", err)
	}
	if err = tx.Commit(ctx); err != nil {
		return fail("commit", err)
	}
	changed := int64(len(counts.Changed))
	if ls.DeleteInsert {
		counts.Inserted = changed - updated
	} else {
		counts.Inserted = keys - existing
	}
	counts.Updated = changed - counts.Inserted
	counts.Unchanged = keys - changed
	return counts, nil
}

// copySource adapts LoadRows to pgx.CopyFromSource.
type copySource struct {
	ns   *warmcache.Namespace
	rows warmcache.LoadRows
	vals [3]any
}

func (c *copySource) Next() bool { return c.rows.Next() }

func (c *copySource) Values() ([]any, error) {
	r := c.rows.Row()
	c.vals[0], c.vals[1], c.vals[2] = r.Line, keyArg(c.ns, r.Key), string(r.Value)
	return c.vals[:], nil
}

func (c *copySource) Err() error { return c.rows.Err() }
