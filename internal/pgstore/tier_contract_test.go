package pgstore_test

import (
	"testing"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

// TestWarmTierContract holds the store to the warm tier's contract on
// every packed storage of the lane, on PostgreSQL and on Greenplum; on
// PostgreSQL also with the append-optimized tables' writes on a heap
// table, on a hash-partitioned table and with text keys.
func TestWarmTierContract(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			tables := packedLaneTables()
			dsn := migrated(t, w, tables)
			namespaces := namespacesOf(tables)
			s := laneStore(t, dsn, namespaces...)
			for _, ns := range namespaces {
				t.Run(ns.Name, func(t *testing.T) { warmContract(t, s, ns) })
			}
			if w.Greenplum {
				return
			}
			t.Run("heap_packed_append_optimized_writes", func(t *testing.T) {
				ns := namespaces[0]
				ao := laneStore(t, dsn, ns)
				if err := ao.UseAppendOptimizedWrites(ns.Name); err != nil {
					t.Fatal(err)
				}
				warmContract(t, ao, ns)
			})
			widgets, sessions := widgetsNamespace(), sessionsNamespace()
			other := laneStore(t, newDatabase(t, schema), widgets, sessions)
			for _, ns := range []*warmcache.Namespace{widgets, sessions} {
				t.Run(ns.Name, func(t *testing.T) { warmContract(t, other, ns) })
			}
		})
	}
}

// warmContract runs the warm tier's contract on s's namespace ns.
func warmContract(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace) {
	tiertest.Warm(t, func(*testing.T) tiertest.WarmTier {
		return tiertest.WarmTier{Warm: s, Namespace: ns, Invalid: []byte(`not json`)}
	})
}
