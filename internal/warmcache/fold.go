package warmcache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
)

// Folder is a warehouse that can apply independent writes together: in
// one round trip and one commit, each with its own outcome. The core folds
// concurrent writes of one key each into it, as it folds concurrent reads
// into one LookupMany (see batcher).
type Folder interface {
	// FoldsWrites reports whether writes of ns fold (WriteEach is worth
	// more than one Write each).
	FoldsWrites(ns *Namespace) bool
	// WriteEach applies writes, each as a Write of its own would, with
	// distinct keys: entries[i] and errs[i] are writes[i]'s outcome, as
	// Write gives it. One write's failure never fails another.
	WriteEach(ctx context.Context, ns *Namespace, writes []Write) (entries []Entry, errs []error)
}

// writeCall is one single-write Transact waiting for its fold.
type writeCall struct {
	ctx   context.Context
	write Write
	item  Item
	err   error
	done  chan struct{}
}

// newWriteLane returns the lane that folds ns's single writes, or nil when
// they do not fold: folding is off (WriteFold 1), or the warehouse does not
// fold ns's writes.
func (s *Service) newWriteLane(ns *Namespace) *batcher[*writeCall] {
	f, ok := s.warm.(Folder)
	if !ok || s.opts.WriteFold <= 1 || !ns.Writable || !f.FoldsWrites(ns) {
		return nil
	}
	return &batcher[*writeCall]{lanes: s.opts.WriteLanes, maxBatch: s.opts.WriteFold, linger: s.opts.WriteFoldWait,
		size: func(*writeCall) int { return 1 },
		key:  func(c *writeCall) string { return c.write.Key.Text },
		run:  func(calls []*writeCall) { s.runWrites(ns, f, calls) }}
}

// fold applies one write through ns's write lane, where it goes to the
// warehouse with the writes that wait beside it, and returns its item.
func (s *Service) fold(ctx context.Context, lane *batcher[*writeCall], w Write) (Item, error) {
	c := &writeCall{ctx: ctx, write: w, done: make(chan struct{})}
	lane.runHere(c)
	// A write runs to its end even if the client goes away, as alone.
	<-c.done
	return c.item, c.err
}

// runWrites is the body of a batch of single writes of distinct keys: one
// WriteEach, under the circuit breaker and the warehouse deadline, then
// the caches' update of every write that committed in one round trip.
// Each call gets its own outcome.
func (s *Service) runWrites(ns *Namespace, f Folder, calls []*writeCall) {
	defer func() {
		for _, c := range calls {
			close(c.done)
		}
	}()
	s.metrics.foldWrites.Observe(float64(len(calls)))
	writes := make([]Write, len(calls))
	keys := make([]Key, len(calls))
	for i, c := range calls {
		writes[i], keys[i] = c.write, c.write.Key
	}
	// The batch runs for all its callers; with a Tracer, it carries its
	// first caller's context values.
	ctx := context.Background()
	if s.opts.Tracer != nil {
		ctx = context.WithoutCancel(calls[0].ctx)
	}
	st := s.stamp()
	var entries []Entry
	var errs []error
	begun := false
	err := s.warmWrite(ctx, func(wctx context.Context) error {
		s.trust.doubts.begin(ns, keys, s.opts.Now())
		begun = true
		entries, errs = f.WriteEach(wctx, ns, writes)
		if len(entries) != len(writes) || len(errs) != len(writes) {
			return fmt.Errorf("warmcache: the warehouse answered %d of %d writes", min(len(entries), len(errs)), len(writes))
		}
		// The breaker counts the batch as one call: failing when a write
		// failed for the warehouse's sake, not for its own.
		var first error
		for i, e := range errs {
			if e != nil && !refused(e) {
				errs[i] = unavailable(wctx, e, s.opts.WarmTimeout)
				first = cmp.Or(first, errs[i])
			}
		}
		return first
	})
	if !begun || len(errs) != len(writes) {
		for _, c := range calls {
			c.err = err
		}
		if begun {
			s.trust.doubts.unknown(ns, keys, s.opts.Now())
			s.trust.doubts.end(ns, keys)
		}
		return
	}
	var unknown []Key
	var doneWrites []Write
	var doneEntries []Entry
	for i, c := range calls {
		e := errs[i]
		switch {
		case e == nil:
			doneWrites, doneEntries = append(doneWrites, writes[i]), append(doneEntries, entries[i])
			c.item = ns.item(keys[i])
			c.item.Entry, c.item.Source = entries[i], SourceWarm
		case refused(e):
			c.err = e
		default:
			c.err = e
			unknown = append(unknown, keys[i])
		}
	}
	if len(unknown) > 0 {
		s.trust.doubts.unknown(ns, unknown, s.opts.Now())
	}
	if len(doneWrites) > 0 {
		s.updated(ctx, ns, doneWrites, doneEntries, st)
	}
	for _, c := range calls {
		if c.err == nil {
			s.outcome(c.ctx, ns, "write", true)
		}
	}
	s.trust.doubts.end(ns, keys)
}

// unavailable returns err of a warehouse call whose context is ctx as the
// client sees it: a failing warehouse, or its deadline running out,
// wraps ErrUnavailable; any other error passes unchanged.
func unavailable(ctx context.Context, err error, timeout time.Duration) error {
	class := Classify(err)
	if ctx.Err() != nil && class != ClassNone {
		class = ClassUnavailable
	}
	if class != ClassUnavailable || errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: the warehouse did not answer within %v: %w", ErrUnavailable, timeout, err)
}
