package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// FoldsWrites reports whether independent writes of ns go to PostgreSQL
// together (WriteEach): its table writes through its write function. On
// Greenplum a write of one key goes to its segment alone (direct
// dispatch), where a transaction of keys on several segments would need a
// two-phase commit: there every write goes alone.
func (s *Store) FoldsWrites(ns *warmcache.Namespace) bool {
	t, err := s.table(ns)
	return err == nil && s.dialect == dialect.Postgres && t.stmts.WriteCall != ""
}

// WriteEach applies independent writes of distinct keys, each with its own
// outcome as a Write of it alone would give: one round trip of BEGIN, one
// call of the write function per write and COMMIT. The calls run in the
// order of their keys' lock hashes, as a transaction's locks are taken,
// so that two folds, or a fold and a transaction, cannot deadlock. When a
// write is refused (a failed If-Match, the delete of an absent key, a
// value the table rejects), the transaction is rolled back, the refusal is
// that write's answer, and the others go again together. Any other
// failure of one write sends each of the others alone; a failure of the
// transaction itself (a lost connection, a failed commit) is every
// write's answer. Writes that only create (IfAbsent) go alone.
func (s *Store) WriteEach(ctx context.Context, ns *warmcache.Namespace, writes []warmcache.Write) ([]warmcache.Entry, []error) {
	entries := make([]warmcache.Entry, len(writes))
	errs := make([]error, len(writes))
	t, err := s.table(ns)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return entries, errs
	}
	var together []int
	for i, w := range writes {
		if err := s.alone(ns, t, w); err != nil {
			errs[i] = err
		} else if w.IfAbsent || !t.byFunction(writes[i:i+1]) {
			entries[i], errs[i] = s.writeAlone(ctx, ns, w)
		} else {
			together = append(together, i)
		}
	}
	hashes := make([]int64, len(writes))
	for _, i := range together {
		hashes[i] = lockHash(ns, &writes[i].Key)
	}
	slices.SortStableFunc(together, func(a, b int) int { return cmp.Compare(hashes[a], hashes[b]) })
	for len(together) > 1 {
		at, err := s.fold(ctx, t, writes, together, entries)
		if err == nil {
			return entries, errs
		}
		if at < 0 {
			for _, i := range together {
				errs[i] = writeError(opTransaction.String(), ns, writes[i].Key, err)
			}
			return entries, errs
		}
		refusal := writeError(opPut.String(), ns, writes[at].Key, writeResultError(writes[at], err))
		if warmcache.Classify(refusal) != warmcache.ClassClient {
			break // each goes alone, and answers for itself
		}
		errs[at] = refusal
		together = slices.DeleteFunc(together, func(i int) bool { return i == at })
	}
	for _, i := range together {
		entries[i], errs[i] = s.writeAlone(ctx, ns, writes[i])
	}
	return entries, errs
}

// alone checks what Write checks of a write before the warehouse sees it.
func (s *Store) alone(ns *warmcache.Namespace, t *table, w warmcache.Write) error {
	if w.Delete {
		return nil
	}
	return checkRow(ns, t.maxRow, w.Key, w.Value)
}

// writeAlone is a Write of w alone.
func (s *Store) writeAlone(ctx context.Context, ns *warmcache.Namespace, w warmcache.Write) (warmcache.Entry, error) {
	e, err := s.Write(ctx, ns, []warmcache.Write{w})
	if err != nil {
		return warmcache.Entry{}, err
	}
	return e[0], nil
}

// fold runs the writes at indexes in one transaction and fills their
// entries: first in one statement (FoldCall), which calls the write
// function for each; when a write fails it, in one round trip of BEGIN, a
// call per write and COMMIT, whose failed call names the write. On failure
// it returns the index of the write that failed with its error, or -1 when
// the transaction failed as a whole; then nothing was written.
func (s *Store) fold(ctx context.Context, t *table, writes []warmcache.Write, indexes []int, entries []warmcache.Entry) (at int, err error) {
	defer func(start time.Time) {
		if at >= 0 {
			t.metrics[opFold].observe(start, nil) // a write's refusal
		} else {
			t.metrics[opFold].observe(start, err)
		}
	}(time.Now())
	err = s.foldStatement(ctx, t, writes, indexes, entries)
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return -1, err
	}
	return s.foldCalls(ctx, t, writes, indexes, entries)
}

// foldStatement runs the writes at indexes in one statement, FoldCall, and
// fills their entries. A write that fails fails the statement, and then
// nothing was written.
func (s *Store) foldStatement(ctx context.Context, t *table, writes []warmcache.Write, indexes []int, entries []warmcache.Entry) error {
	keys := make([]warmcache.Key, len(indexes))
	values := make([]any, len(indexes)) // NULL for a delete
	ifMatch := make([]*int64, len(indexes))
	deletes := make([]bool, len(indexes))
	ttls := make([]*int64, len(indexes))
	absentOK := make([]bool, len(indexes))
	locks := make([]int64, len(indexes))
	for j, i := range indexes {
		w := writes[i]
		keys[j], ifMatch[j], deletes[j], absentOK[j] = w.Key, w.IfMatch, w.Delete, w.AbsentOK
		locks[j] = lockHash(t.ns, &w.Key)
		values[j], ttls[j] = t.writeValue(w)
	}
	rows, err := s.pool.Query(ctx, t.stmts.FoldCall, s.modes.Write, keyArray(t.ns, keys), values, ifMatch, deletes, ttls, absentOK, lockHash(t.ns, nil), locks)
	if err != nil {
		return err
	}
	r := newWriteResult(t)
	j := 0
	_, err = pgx.ForEachRow(rows, r.dest, func() error {
		if j == len(indexes) {
			return fmt.Errorf("the fold of %d writes returned more rows", len(indexes))
		}
		entries[indexes[j]] = r.entry(t, writes[indexes[j]])
		j++
		return nil
	})
	if err == nil && j != len(indexes) {
		err = fmt.Errorf("the fold of %d writes returned %d rows", len(indexes), j)
	}
	if err != nil {
		for _, i := range indexes {
			entries[i] = warmcache.Entry{}
		}
	}
	return err
}

// foldCalls runs the writes at indexes in one round trip of BEGIN, one
// call of the write function per write and COMMIT, as fold returns.
func (s *Store) foldCalls(ctx context.Context, t *table, writes []warmcache.Write, indexes []int, entries []warmcache.Entry) (at int, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return -1, classify(err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for _, i := range indexes {
		w := writes[i]
		b.Queue(t.stmts.WriteCall, s.writeFunctionArgs(t, w, keyLocks(t, writes[i:i+1]), false)[1:]...)
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	at, err = func() (int, error) {
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return -1, err
		}
		for _, i := range indexes {
			rows, err := br.Query()
			if err == nil {
				entries[i], err = readWriteResult(t, writes[i], rows)
			}
			if err != nil {
				return i, err
			}
		}
		tag, err := br.Exec()
		if err == nil && tag.String() != "COMMIT" {
			err = fmt.Errorf("the transaction ended with %s", tag)
		}
		return -1, err
	}()
	if err != nil {
		rollback(ctx, conn)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			at = -1
		}
		for _, i := range indexes {
			entries[i] = warmcache.Entry{}
		}
	}
	return at, err
}
