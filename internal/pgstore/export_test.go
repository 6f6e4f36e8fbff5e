package pgstore

import "github.com/warmcache/warmcache/internal/warmcache"

// UseAppendOptimizedWrites switches namespace name to the writes of
// Greenplum's append-optimized tables (UPDATE then INSERT, UPDATE then
// DELETE), so that tests can run them on PostgreSQL. It is not safe for
// concurrent use with the store's methods.
func (s *Store) UseAppendOptimizedWrites(name string) error {
	t, err := s.table(&warmcache.Namespace{Name: name})
	if err != nil {
		return err
	}
	stmts, err := Statements(t.ns, true)
	if err != nil {
		return err
	}
	stmts.LookupFunction, stmts.LookupCall = t.stmts.LookupFunction, t.stmts.LookupCall
	stmts.lookupSignature, stmts.lookupBody = t.stmts.lookupSignature, t.stmts.lookupBody
	t.stmts = stmts
	return nil
}

// ClassifyErrorWrap exposes classify to the external tests.
var ClassifyErrorWrap = classify

// KeyLockHash is the advisory lock that a write of key in ns takes, for
// tests that hold it to make a write wait.
func KeyLockHash(ns *warmcache.Namespace, key warmcache.Key) int64 {
	return lockHash(ns, &key)
}

// The hash of segment lanes, for the tests that hold it against the
// server's.
var (
	HashInt8  = hashInt8
	HashBytes = hashBytes
	SegmentOf = segmentOf
	LaneSizes = laneSizes
)

// HasLanes reports whether namespace name's statements go through segment
// lanes.
func (s *Store) HasLanes(name string) bool {
	t, err := s.table(&warmcache.Namespace{Name: name})
	return err == nil && t.lanes
}
