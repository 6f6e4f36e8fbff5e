package doctor

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
)

// FleetShare is the share of the warehouse's connections that warmcache's
// sessions may reach before the doctor warns: the sessions open now by
// every instance, with what this instance may still open, above this share
// of what the server lets other roles than superusers open.
const FleetShare = 0.8

// ConnectionOptions is what the doctor cannot read from the store itself:
// how the serving instance is configured.
type ConnectionOptions struct {
	// PoolSize is the warehouse pool of `warmcache serve`
	// (--pg-max-conns), which may differ from the store's own.
	PoolSize int
	// Pooler is what sits between the instance and the warehouse.
	Pooler pgstore.Pooler
	// SegmentLanes is the instance's --gp-segment-lanes: on Greenplum
	// reached directly, a lane per segment beside the pool.
	SegmentLanes pgstore.LaneMode
	// Capture says whether the instance's change capture holds a plain
	// connection to the same server, beside its replication connection
	// (which counts against max_wal_senders, not max_connections).
	Capture bool
}

// Connections is the warehouse's connection budget as the doctor found it.
type Connections struct {
	// Dialect is the warehouse's; on Greenplum the limit is the
	// coordinator's.
	Dialect dialect.Dialect
	// ApplicationName is the name the instances' sessions carry, by which
	// they are counted.
	ApplicationName string
	ConnectionOptions
	// PgBouncerPool is how many server connections PgBouncer may open for
	// the database (pool_size + reserve_pool, within max_db_connections),
	// 0 when not through PgBouncer or when its admin console did not
	// answer; PgBouncerErr says why it did not.
	PgBouncerPool int
	PgBouncerErr  error
	// InstanceMax is how many server connections this instance may open:
	// its pool, or PgBouncer's pool when that is smaller, with its segment
	// lanes on Greenplum (pgstore.LaneConnections), and change capture's
	// plain connection.
	InstanceMax int
	// Segments counts the Greenplum segments whose lanes InstanceMax
	// counts; 0 without lanes.
	Segments int
	// Open counts the client sessions on the server whose
	// application_name is ApplicationName, but the doctor's own; Sessions
	// counts every session of a database.
	Open, Sessions int
	// MaxConnections is max_connections; Reserved the connections only
	// superusers (and, from PostgreSQL 16, pg_use_reserved_connections)
	// may take; Limit what is left for the others.
	MaxConnections, Reserved, Limit int
}

// Threshold is the number of warmcache sessions above which the doctor
// warns: FleetShare of Limit.
func (c Connections) Threshold() int {
	return int(math.Floor(FleetShare * float64(c.Limit)))
}

// Exhaustible reports whether the warmcache sessions open now and what
// this instance may open pass the threshold.
func (c Connections) Exhaustible() bool {
	return c.Open+c.InstanceMax > c.Threshold()
}

// CheckConnections reads the warehouse's connection budget on s's pool:
// the server's max_connections and reserved connections (on Greenplum the
// coordinator's), the sessions open now by every warmcache instance,
// counted by the application_name of s's sessions, and, through PgBouncer,
// the pool PgBouncer keeps for the database from its admin console (which
// the role may be refused; the check goes on without it). The store's own
// sessions are not counted when it connects directly; through PgBouncer
// they cannot be told apart, and PgBouncer's server connections count as
// open whichever client last used them.
func CheckConnections(ctx context.Context, s *pgstore.Store, o ConnectionOptions) (Connections, error) {
	const simple = pgx.QueryExecModeSimpleProtocol
	cc := s.Pool().Config().ConnConfig
	c := Connections{Dialect: s.Dialect(), ApplicationName: cc.RuntimeParams["application_name"], ConnectionOptions: o}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		return c, fmt.Errorf("pgstore: doctor connections: %w", err)
	}
	defer conn.Release()
	own := []int64{} // the store's sessions, when they are the server's
	if o.Pooler != pgstore.PoolerPgBouncer {
		for _, idle := range s.Pool().AcquireAllIdle(ctx) {
			own = append(own, int64(idle.Conn().PgConn().PID()))
			idle.Release()
		}
	}
	var reserved string
	err = conn.QueryRow(ctx, `SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int,
  coalesce(current_setting('reserved_connections', true), ''),
  count(*) FILTER (WHERE a.application_name = $1 AND a.pid <> pg_backend_pid() AND a.pid <> ALL ($2::int8[])),
  count(*) FILTER (WHERE a.datid IS NOT NULL)
FROM pg_stat_activity a
WHERE coalesce(a.backend_type, 'client backend') = 'client backend'`, simple, c.ApplicationName, own).
		Scan(&c.MaxConnections, &c.Reserved, &reserved, &c.Open, &c.Sessions)
	if err != nil {
		return c, fmt.Errorf("pgstore: doctor connections: %w", err)
	}
	if n, err := strconv.Atoi(reserved); err == nil { // PostgreSQL 16 and later
		c.Reserved += n
	}
	c.Limit = max(c.MaxConnections-c.Reserved, 0)
	c.InstanceMax = o.PoolSize
	if o.Pooler == pgstore.PoolerPgBouncer {
		c.PgBouncerPool, c.PgBouncerErr = pgBouncerPool(ctx, cc.Config)
		if c.PgBouncerPool > 0 {
			c.InstanceMax = min(c.InstanceMax, c.PgBouncerPool)
		}
	}
	if c.Dialect == dialect.Greenplum && o.Pooler != pgstore.PoolerPgBouncer && o.SegmentLanes != pgstore.LanesOff {
		segments, err := dialect.Segments(ctx, conn)
		if err != nil {
			return c, fmt.Errorf("pgstore: doctor connections: %w", err)
		}
		// LaneConnections counts no lanes on a cluster too small for them,
		// and Segments then stays 0.
		if c.InstanceMax = pgstore.LaneConnections(segments, o.PoolSize); c.InstanceMax > o.PoolSize {
			c.Segments = segments
		}
	}
	if o.Capture {
		c.InstanceMax++
	}
	return c, nil
}

// pgBouncerPool asks PgBouncer's admin console (the database "pgbouncer"
// of the same address and role) how many server connections it may open
// for cfg's database: its pool_size and reserve_pool, within its
// max_connections when that is set.
func pgBouncerPool(ctx context.Context, cfg pgconn.Config) (int, error) {
	admin := cfg.Copy()
	database := admin.Database
	admin.Database = "pgbouncer"
	conn, err := pgconn.ConnectConfig(ctx, admin)
	if err != nil {
		return 0, fmt.Errorf("PgBouncer's admin console: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	results, err := conn.Exec(ctx, "SHOW DATABASES").ReadAll()
	if err != nil {
		return 0, fmt.Errorf("PgBouncer's SHOW DATABASES: %w", err)
	}
	for _, r := range results {
		column := map[string]int{}
		for i, f := range r.FieldDescriptions {
			column[f.Name] = i
		}
		field := func(row [][]byte, name string) int {
			i, ok := column[name]
			if !ok {
				return 0
			}
			n, _ := strconv.Atoi(string(row[i]))
			return n
		}
		for _, row := range r.Rows {
			if i, ok := column["name"]; !ok || string(row[i]) != database {
				continue
			}
			pool := field(row, "pool_size") + field(row, "reserve_pool")
			if limit := field(row, "max_connections"); limit > 0 {
				pool = min(pool, limit)
			}
			return pool, nil
		}
	}
	return 0, fmt.Errorf("PgBouncer lists no database %q", database)
}

// Findings says what this instance may open, what is open, what the
// server allows, and warns when the fleet can exhaust it.
func (c Connections) Findings() []Finding {
	server := "the server"
	if c.Dialect == dialect.Greenplum {
		server = "the coordinator"
	}
	var parts []string
	switch {
	case c.Segments > 0:
		parts = append(parts, fmt.Sprintf("a pool of %d, direct, and a lane per segment (%d segments, %d connections; --gp-segment-lanes)", c.PoolSize, c.Segments, c.InstanceMax-c.PoolSize))
	case c.Pooler != pgstore.PoolerPgBouncer:
		parts = append(parts, fmt.Sprintf("a pool of %d, direct", c.PoolSize))
	case c.PgBouncerPool > 0:
		parts = append(parts, fmt.Sprintf("a pool of %d through PgBouncer (whose pool for the database is %d)", c.PoolSize, c.PgBouncerPool))
	default:
		parts = append(parts, fmt.Sprintf("a pool of %d through PgBouncer, whose own pool is unknown (%v)", c.PoolSize, c.PgBouncerErr))
	}
	if c.Capture {
		parts = append(parts, "1 of change capture")
	}
	out := []Finding{{SeverityOK, fmt.Sprintf("connections: this instance may open %d on %s: %s; sessions open now: %d of warmcache (application_name %q), %d in all; %s allows %d (max_connections %d, %d reserved)",
		c.InstanceMax, server, strings.Join(parts, " and "), c.Open, c.ApplicationName, c.Sessions, server, c.Limit, c.MaxConnections, c.Reserved)}}
	if c.ApplicationName == "" {
		out = append(out, Finding{SeverityNote, "connections: the sessions carry no application_name, so other instances' cannot be counted"})
	}
	if c.Exhaustible() {
		out = append(out, Finding{SeverityWarn, fmt.Sprintf("connections: the fleet can exhaust %s: %d open by warmcache + %d this instance may open = %d, above %.0f%% of %d (%d); "+
			"lower --pg-max-conns, put PgBouncer in front, or raise max_connections (docs/operations.md, \"Sizing\")",
			server, c.Open, c.InstanceMax, c.Open+c.InstanceMax, FleetShare*100, c.Limit, c.Threshold())})
	}
	return out
}
