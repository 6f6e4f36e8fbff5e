package warmcache

import (
	"context"
	"fmt"
	"time"
)

// warmRead reads keys from the warehouse within the concurrency bound.
func (s *Service) warmRead(ctx context.Context, ns *Namespace, keys []Key) ([]Entry, error) {
	wctx, cancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
	defer cancel()
	if err := s.takeWarmSlot(ctx, wctx); err != nil {
		return nil, err
	}
	defer s.freeWarmSlot()
	if ok, wait := s.breaker.allow(); !ok {
		return nil, fmt.Errorf("%w: warehouse circuit breaker open for %v", ErrUnavailable, wait.Round(time.Millisecond))
	}

	entries, err := s.warm.LookupMany(wctx, ns, keys)
	if err == nil && len(entries) != len(keys) {
		err = fmt.Errorf("warmcache: the warehouse answered %d of %d keys", len(entries), len(keys))
	}
	if err == nil {
		for _, e := range entries {
			result := resultMiss
			if e.Found {
				result = resultHit
			}
			s.lookup(ns, tierSQL, result).Inc()
		}
	} else {
		s.lookup(ns, tierSQL, resultError).Add(float64(len(keys)))
	}
	if err := s.warmOutcome(ctx, wctx, err); err != nil {
		return nil, err
	}
	return entries, nil
}

// takeWarmSlot takes one of the MaxWarmInflight slots of warehouse reads,
// waiting until wctx, the read's deadline, is done. It returns ctx's error
// when the caller went away meanwhile, and ErrOverloaded when no slot
// freed in time. The caller frees the slot with freeWarmSlot once the
// read is over.
func (s *Service) takeWarmSlot(ctx, wctx context.Context) error {
	select {
	case s.warmSlots <- struct{}{}:
		return nil
	case <-wctx.Done():
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: too many warehouse reads in flight", ErrOverloaded)
	}
}

// freeWarmSlot frees a slot that takeWarmSlot took.
func (s *Service) freeWarmSlot() { <-s.warmSlots }

// warmWrite runs one warehouse write under the warehouse deadline and the
// circuit breaker (see warmOutcome).
func (s *Service) warmWrite(ctx context.Context, write func(context.Context) error) error {
	if ok, wait := s.breaker.allow(); !ok {
		return fmt.Errorf("%w: warehouse circuit breaker open for %v", ErrUnavailable, wait.Round(time.Millisecond))
	}
	// A write runs to its end even if the client goes away, so that a
	// commit is always followed by its cache update.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.WarmTimeout)
	defer cancel()
	return s.warmOutcome(context.WithoutCancel(ctx), wctx, write(wctx))
}

// warmOutcome tells the circuit breaker how a warehouse call that it let
// through ended, and returns the call's error for the client. The adapter
// has classified err once (see Classify); this only reads the class:
//   - the caller went away (ctx done), or the call was cancelled: nothing
//     is counted;
//   - the warehouse is failing (ClassUnavailable) or the warehouse deadline
//     ran out: a failure, answered as ErrUnavailable;
//   - any other answer, a client error, a conflict or a bug: the warehouse
//     answered, a success; the error passes unchanged.
func (s *Service) warmOutcome(ctx, wctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		s.breaker.release()
		return ctx.Err()
	}
	err = unavailable(wctx, err, s.opts.WarmTimeout)
	switch Classify(err) {
	case ClassUnavailable:
		s.breaker.done(false)
		return err
	case ClassCanceled:
		s.breaker.release()
		return err
	}
	s.breaker.done(true)
	return err
}
