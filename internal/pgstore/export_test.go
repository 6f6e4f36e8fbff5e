package pgstore

import "github.com/warmcache/warmcache/internal/warmcache"

// UseDeleteInsert switches namespace name to DELETE + INSERT writes, the
// path of Greenplum's append-optimized tables, so that tests can run it on
// PostgreSQL. It is not safe for concurrent use with the store's methods.
func (s *Store) UseDeleteInsert(name string) error {
	t, err := s.table(&warmcache.Namespace{Name: name})
	if err != nil {
		return err
	}
	stmts, err := Statements(t.ns, true)
	if err != nil {
		return err
	}
	t.stmts = stmts
	return nil
}
