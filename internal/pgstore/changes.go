package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// The tables that the migrations create for change capture (0004_freshness).
const (
	// GenerationsTable holds one row per namespace with its generation.
	GenerationsTable = "warmcache_generations"
	// DeletesTable logs the keys deleted outside the service, each at a new
	// version.
	DeletesTable = "warmcache_deletes"
)

// ChangeStatements are the SQL of the watermark poll and of the
// namespace generations. Every query on a namespace table or the delete log
// reads the index over the version column: `version > $1 ORDER BY version
// LIMIT $2` is an index range scan on each PostgreSQL partition or Greenplum
// segment (the rows of a version range are on every segment, so it cannot be
// direct-dispatched, but each segment reads only the index entries above the
// watermark), and the newest version is a backward index scan with LIMIT 1,
// not an aggregate over the table.
type ChangeStatements struct {
	// Changed returns the key (as text) and version of the rows whose
	// version is above $1, oldest first, at most $2 of them.
	Changed string
	// Newest returns the highest version of the table; no row when empty.
	Newest string
}

// The change statements of the delete log and the generations, the
// same for every namespace and both dialects.
const (
	// DeletedSQL returns the namespace, key and version of the delete
	// log's rows whose version is above $1, oldest first, at most $2.
	DeletedSQL = "SELECT namespace, key, version FROM " + DeletesTable +
		" WHERE version > $1::bigint ORDER BY version LIMIT $2::bigint"
	// NewestDeletedSQL returns the delete log's highest version.
	NewestDeletedSQL = "SELECT version FROM " + DeletesTable + " ORDER BY version DESC LIMIT 1"
	// PruneDeletedSQL removes the delete log's rows older than $1 seconds.
	PruneDeletedSQL = "DELETE FROM " + DeletesTable + " WHERE deleted_at < now() - make_interval(secs => $1::bigint)"
	// GenerationsSQL returns every namespace's generation.
	GenerationsSQL = "SELECT namespace, generation FROM " + GenerationsTable
	// BumpSQL increments the generation of namespace $1 and returns it;
	// no row when the namespace has none yet. On Greenplum it goes to the
	// namespace's segment only.
	BumpSQL = "UPDATE " + GenerationsTable + " SET generation = generation + 1, bumped_at = now()" +
		" WHERE namespace = $1::text RETURNING generation"
	// BumpInsertSQL gives namespace $1 its first generation, 1.
	BumpInsertSQL = "INSERT INTO " + GenerationsTable + " (namespace, generation) VALUES ($1::text, 1) RETURNING generation"
)

// BuildChangeStatements builds the change statements of a namespace. The statements
// are the same on PostgreSQL and Greenplum.
func BuildChangeStatements(ns *warmcache.Namespace) (ChangeStatements, error) {
	if err := checkNamespace(ns); err != nil {
		return ChangeStatements{}, err
	}
	table, key, version := tableIdent(ns.Table), ident(ns.KeyColumn), ident(ns.VersionColumn)
	return ChangeStatements{
		Changed: fmt.Sprintf("SELECT %s::text, %s FROM %s WHERE %s > $1::bigint ORDER BY %s LIMIT $2::bigint",
			key, version, table, version, version),
		Newest: fmt.Sprintf("SELECT %s FROM %s ORDER BY %s DESC LIMIT 1", version, table, version),
	}, nil
}

func (s *Store) changeStatements(ns *warmcache.Namespace) (ChangeStatements, error) {
	t, err := s.table(ns)
	if err != nil {
		return ChangeStatements{}, err
	}
	return BuildChangeStatements(t.ns)
}

// Changed returns the keys of ns whose version is above after, oldest
// first, at most limit of them.
func (s *Store) Changed(ctx context.Context, ns *warmcache.Namespace, after int64, limit int) ([]warmcache.ChangedKey, error) {
	st, err := s.changeStatements(ns)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, st.Changed, s.modes.Read, after, int64(limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: changes of %q: %w", ns.Name, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (warmcache.ChangedKey, error) {
		kv := warmcache.ChangedKey{Namespace: ns.Name}
		return kv, r.Scan(&kv.Key, &kv.Version)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: changes of %q: %w", ns.Name, err)
	}
	return out, nil
}

// Newest returns the highest version of ns's table, zero when it is empty.
func (s *Store) Newest(ctx context.Context, ns *warmcache.Namespace) (int64, error) {
	st, err := s.changeStatements(ns)
	if err != nil {
		return 0, err
	}
	return s.newest(ctx, st.Newest)
}

func (s *Store) newest(ctx context.Context, sql string) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, sql, s.modes.Read).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: newest version: %w", err)
	}
	return v, nil
}

// Deleted returns the delete log's keys whose version is above after,
// oldest first, at most limit of them.
func (s *Store) Deleted(ctx context.Context, after int64, limit int) ([]warmcache.ChangedKey, error) {
	rows, err := s.pool.Query(ctx, DeletedSQL, s.modes.Read, after, int64(limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: delete log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (warmcache.ChangedKey, error) {
		var kv warmcache.ChangedKey
		return kv, r.Scan(&kv.Namespace, &kv.Key, &kv.Version)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: delete log: %w", err)
	}
	return out, nil
}

// NewestDeleted returns the delete log's highest version, zero when it is
// empty.
func (s *Store) NewestDeleted(ctx context.Context) (int64, error) {
	return s.newest(ctx, NewestDeletedSQL)
}

// PruneDeleted removes the delete log's rows older than age and returns
// how many it removed.
func (s *Store) PruneDeleted(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, PruneDeletedSQL, s.modes.Write, int64(age/time.Second))
	if err != nil {
		return 0, fmt.Errorf("pgstore: prune delete log: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Generations returns every namespace's generation, by namespace name.
func (s *Store) Generations(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, GenerationsSQL, s.modes.Read)
	if err != nil {
		return nil, fmt.Errorf("pgstore: generations: %w", err)
	}
	out := map[string]int64{}
	var name string
	var gen int64
	_, err = pgx.ForEachRow(rows, []any{&name, &gen}, func() error {
		out[name] = gen
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: generations: %w", err)
	}
	return out, nil
}

// BumpGeneration increments the generation of the namespace called name,
// creating its row at 1 when it has none, and returns the new generation.
func (s *Store) BumpGeneration(ctx context.Context, name string) (int64, error) {
	var gen int64
	err := s.pool.QueryRow(ctx, BumpSQL, s.modes.Write, name).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.pool.QueryRow(ctx, BumpInsertSQL, s.modes.Write, name).Scan(&gen)
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: bump generation of %q: %w", name, err)
	}
	return gen, nil
}
