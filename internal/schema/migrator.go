package schema

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/dialect"
)

// DB is what a Migrator needs from the server: *pgx.Conn and
// *pgxpool.Pool both satisfy it. Every statement runs inside a transaction
// in the simple protocol, so a PgBouncer in transaction pooling may stand in
// between.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// StepStatus is a step and whether it is applied.
type StepStatus struct {
	Step
	// Applied says whether the bookkeeping table records the step.
	Applied bool
	// AppliedAt is when the step was applied; zero when it is pending.
	AppliedAt time.Time
}

// The bookkeeping statements. All run with pgx's simple protocol.
const (
	// lockSQL serializes migrators on a database. The key is "warmcach" in
	// ASCII, 0x7761726d63616368.
	lockSQL        = `SELECT pg_advisory_xact_lock(8602282577398686568)`
	tableExistsSQL = `SELECT to_regclass('warmcache_schema_migrations') IS NOT NULL`
	appliedSQL     = `SELECT version, scope, name, applied_at FROM warmcache_schema_migrations ORDER BY version, scope`
	isAppliedSQL   = `SELECT EXISTS (SELECT 1 FROM warmcache_schema_migrations WHERE version = $1 AND scope = $2)`
	recordSQL      = `INSERT INTO warmcache_schema_migrations (version, scope, name) VALUES ($1, $2, $3)`
	forgetSQL      = `DELETE FROM warmcache_schema_migrations WHERE version = $1 AND scope = $2`
)

// Migrator applies and reverts the planned steps on one database. Each step
// runs in its own transaction together with its bookkeeping row, after
// taking a transaction-level advisory lock, so migrators running at the same
// time on the same database apply every step once. A Migrator is safe for
// concurrent use when its DB is (a pool is; a single *pgx.Conn is not).
type Migrator struct {
	db      DB
	dialect dialect.Dialect
	steps   []Step
	log     *slog.Logger
}

// NewMigrator returns a Migrator for the tables on a database of the
// given dialect. It plans the steps at once and returns Plan's error if a
// managed table is invalid. A nil log discards the log; otherwise each
// applied or reverted step is logged at Info.
func NewMigrator(db DB, d dialect.Dialect, tables []Table, log *slog.Logger) (*Migrator, error) {
	steps, err := Plan(d, tables)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Migrator{db: db, dialect: d, steps: steps, log: log}, nil
}

// OpenMigrator detects the server's dialect with dialect.Detect and
// returns NewMigrator's Migrator for it. Errors are the detection's or
// Plan's.
func OpenMigrator(ctx context.Context, db DB, tables []Table, log *slog.Logger) (*Migrator, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("schema: detect dialect: %w", err)
	}
	d, err := dialect.Detect(ctx, tx)
	if rbErr := tx.Rollback(ctx); err == nil && rbErr != nil {
		err = rbErr
	}
	if err != nil {
		return nil, fmt.Errorf("schema: detect dialect: %w", err)
	}
	return NewMigrator(db, d, tables, log)
}

// Dialect returns the dialect the Migrator renders for.
func (m *Migrator) Dialect() dialect.Dialect { return m.dialect }

// Steps returns the planned steps by ascending version.
func (m *Migrator) Steps() []Step { return slices.Clone(m.steps) }

// Up applies every pending step by ascending version and returns the steps
// it applied; none when everything is applied already. It creates the
// bookkeeping table when missing. On an error it stops: the steps applied
// before it stay applied and are returned, and the failed step is rolled
// back entirely.
func (m *Migrator) Up(ctx context.Context) ([]Step, error) {
	err := m.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, bookkeepingDDL(m.dialect))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("schema: up: create warmcache_schema_migrations: %w", err)
	}
	var applied []Step
	for _, s := range m.steps {
		done := false
		err := m.inTx(ctx, func(tx pgx.Tx) error {
			var exists bool
			if err := tx.QueryRow(ctx, isAppliedSQL, pgx.QueryExecModeSimpleProtocol, s.Version, s.Scope).Scan(&exists); err != nil {
				return err
			}
			if exists {
				return nil
			}
			if _, err := tx.Exec(ctx, s.Up); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, recordSQL, pgx.QueryExecModeSimpleProtocol, s.Version, s.Scope, s.Name); err != nil {
				return err
			}
			done = true
			return nil
		})
		if err != nil {
			return applied, fmt.Errorf("schema: up %s: %w", s.Label(), err)
		}
		if done {
			m.log.Info("schema: applied", "version", s.Version, "name", s.Name, "scope", s.Scope)
			applied = append(applied, s)
		}
	}
	return applied, nil
}

// Down reverts the highest applied version, for every scope applied at it,
// and returns the steps it reverted; none when nothing is applied. One call
// reverts one version. It fails before reverting anything if a scope applied
// at that version is not a managed namespace of the Migrator (its Down SQL
// is unknown). Each step is reverted in its own transaction; on an error the
// steps reverted before it stay reverted and are returned.
func (m *Migrator) Down(ctx context.Context) ([]Step, error) {
	rows, err := m.applied(ctx)
	if err != nil {
		return nil, fmt.Errorf("schema: down: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	top := 0
	for _, r := range rows {
		top = max(top, r.Version)
	}
	for _, r := range rows {
		planned := slices.ContainsFunc(m.steps, func(s Step) bool { return s.Version == r.Version && s.Scope == r.Scope })
		if r.Version == top && !planned {
			return nil, fmt.Errorf("schema: down %s: not in the plan; declare its namespace as managed again to revert it", r.Label())
		}
	}
	// Revert in the reverse of the order Up applies.
	var targets []Step
	for _, s := range slices.Backward(m.steps) {
		if s.Version == top && slices.ContainsFunc(rows, func(r StepStatus) bool { return r.Version == s.Version && r.Scope == s.Scope }) {
			targets = append(targets, s)
		}
	}

	var reverted []Step
	for _, s := range targets {
		done := false
		err := m.inTx(ctx, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, forgetSQL, pgx.QueryExecModeSimpleProtocol, s.Version, s.Scope)
			if err != nil || tag.RowsAffected() == 0 {
				return err // reverted meanwhile by another migrator
			}
			if _, err := tx.Exec(ctx, s.Down); err != nil {
				return err
			}
			done = true
			return nil
		})
		if err != nil {
			return reverted, fmt.Errorf("schema: down %s: %w", s.Label(), err)
		}
		if done {
			m.log.Info("schema: reverted", "version", s.Version, "name", s.Name, "scope", s.Scope)
			reverted = append(reverted, s)
		}
	}
	return reverted, nil
}

// Status returns every planned step with whether it is applied, by
// ascending version, followed by applied steps that are not in the plan
// (a namespace no longer managed), which have no Up or Down SQL. It changes
// nothing: before the first Up every step is pending.
func (m *Migrator) Status(ctx context.Context) ([]StepStatus, error) {
	rows, err := m.applied(ctx)
	if err != nil {
		return nil, fmt.Errorf("schema: status: %w", err)
	}
	out := make([]StepStatus, 0, len(m.steps))
	for _, s := range m.steps {
		st := StepStatus{Step: s}
		i := slices.IndexFunc(rows, func(r StepStatus) bool { return r.Version == s.Version && r.Scope == s.Scope })
		if i >= 0 {
			st.Applied, st.AppliedAt = true, rows[i].AppliedAt
			rows = slices.Delete(rows, i, i+1)
		}
		out = append(out, st)
	}
	return append(out, rows...), nil
}

// applied reads the bookkeeping table; it returns nothing when the table
// does not exist yet.
func (m *Migrator) applied(ctx context.Context) ([]StepStatus, error) {
	var out []StepStatus
	err := m.inTx(ctx, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, tableExistsSQL, pgx.QueryExecModeSimpleProtocol).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return nil
		}
		rows, err := tx.Query(ctx, appliedSQL, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (StepStatus, error) {
			s := StepStatus{Applied: true}
			err := row.Scan(&s.Version, &s.Scope, &s.Name, &s.AppliedAt)
			return s, err
		})
		return err
	})
	return out, err
}

// inTx runs fn in a transaction that holds the migrators' advisory lock,
// and commits when fn succeeds.
func (m *Migrator) inTx(ctx context.Context, fn func(tx pgx.Tx) error) (err error) {
	tx, err := m.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if rbErr := tx.Rollback(ctx); err == nil && rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			err = rbErr
		}
	}()
	if _, err := tx.Exec(ctx, lockSQL); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
