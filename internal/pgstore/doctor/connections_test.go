package doctor_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/pgstore/doctor"
	"github.com/warmcache/warmcache/internal/pgstore/pgstoretest"
	"github.com/warmcache/warmcache/internal/testenv"
)

// TestConnections holds the doctor's connection budget to the real
// server's figures: max_connections and the reserved connections (on
// Greenplum the coordinator's) read apart, the sessions of one
// application_name counted, the store's own left out, PgBouncer's pool read
// from its admin console; and the warning fires when real sessions with
// the fleet's application_name bring the fleet past the threshold, and not
// one session before.
func TestConnections(t *testing.T) {
	cases := []struct {
		name      string
		warehouse testenv.Warehouse
		pooler    pgstore.Pooler
	}{
		{"postgres/direct", testenv.Warehouses()[0], pgstore.PoolerNone},
		{"postgres/pgbouncer", testenv.Warehouses()[0], pgstore.PoolerPgBouncer},
		{"greenplum/direct", testenv.Warehouses()[1], pgstore.PoolerNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := pgstoretest.Context(t)
			app := "warmcache_test_" + testenv.RandomSuffix(t)
			direct := withApplicationName(t, tc.warehouse.NewDatabase(t), app)
			opts := pgstore.Options{DSN: direct, MaxConns: 2}
			if tc.pooler == pgstore.PoolerPgBouncer {
				opts.DSN = withApplicationName(t, testenv.PgBouncerDSN(t, testenv.DatabaseName(t, direct)), app)
				opts.Pooler = tc.pooler
			}
			s := openStore(t, opts)
			var maxConns, superuserReserved int
			pgstoretest.WithConn(t, direct, func(ctx context.Context, conn *pgx.Conn) {
				err := conn.QueryRow(ctx, "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int").
					Scan(&maxConns, &superuserReserved)
				if err != nil {
					t.Fatal(err)
				}
			})
			const poolSize = 8
			before, err := doctor.CheckConnections(ctx, s, doctor.ConnectionOptions{PoolSize: poolSize, Pooler: tc.pooler})
			if err != nil {
				t.Fatalf("CheckConnections: %v", err)
			}
			if before.MaxConnections != maxConns || before.Reserved < superuserReserved || before.Limit != maxConns-before.Reserved {
				t.Fatalf("budget %+v, the server says max_connections %d, superuser_reserved_connections %d", before, maxConns, superuserReserved)
			}
			if before.ApplicationName != app || before.Open > 1 { // through PgBouncer, a server connection it keeps may count
				t.Fatalf("counted %d sessions of %q before any was opened: %+v", before.Open, before.ApplicationName, before)
			}
			wantMax := poolSize
			if tc.warehouse.Greenplum && tc.pooler == pgstore.PoolerNone {
				// A lane per segment beside the pool (--gp-segment-lanes).
				if before.Segments < 2 || !strings.Contains(formatFindings(before.Findings()), fmt.Sprintf("a lane per segment (%d segments", before.Segments)) {
					t.Fatalf("the lanes of %d segments not counted:\n%s", before.Segments, formatFindings(before.Findings()))
				}
				wantMax = pgstore.LaneConnections(before.Segments, poolSize)
			}
			if tc.pooler == pgstore.PoolerPgBouncer {
				if before.PgBouncerPool <= 0 {
					t.Fatalf("PgBouncer's pool not read: %v", before.PgBouncerErr)
				}
				wantMax = min(poolSize, before.PgBouncerPool)
			}
			if before.InstanceMax != wantMax {
				t.Fatalf("this instance may open %d, want %d: %+v", before.InstanceMax, wantMax, before)
			}
			if before.Exhaustible() || strings.Contains(formatFindings(before.Findings()), "warn") {
				t.Fatalf("a warning with %d of %d open:\n%s", before.Open, before.Limit, formatFindings(before.Findings()))
			}

			// A pool that brings the fleet to 2 below the threshold, then 4
			// sessions of the fleet: 2 above it.
			const held = 4
			o := doctor.ConnectionOptions{PoolSize: before.Threshold() - before.Open - held/2, Pooler: pgstore.PoolerNone, SegmentLanes: pgstore.LanesOff}
			at, err := doctor.CheckConnections(ctx, s, o)
			if err != nil || at.Exhaustible() || strings.Contains(formatFindings(at.Findings()), "warn") {
				t.Fatalf("below the threshold: %v\n%s", err, formatFindings(at.Findings()))
			}
			for range held {
				conn, err := pgx.Connect(ctx, direct)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = conn.Close(context.Background()) })
			}
			after, err := doctor.CheckConnections(ctx, s, o)
			if err != nil {
				t.Fatal(err)
			}
			got := formatFindings(after.Findings())
			// The store's own idle session may close between the two
			// counts: the held ones must all be counted, and no more.
			if after.Open < held || after.Open > at.Open+held || !after.Exhaustible() || !strings.Contains(got, "warn  connections: the fleet can exhaust") {
				t.Fatalf("with %d more sessions of %q open: %d counted (%d before), findings:\n%s", held, app, after.Open, at.Open, got)
			}
			t.Log(got)
		})
	}
}

// withApplicationName returns dsn with its application_name set to name.
func withApplicationName(t testing.TB, dsn, name string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}
