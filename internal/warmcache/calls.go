package warmcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// fill stores fills in the hot tier in one round trip. A failure is
// counted and logged but not returned: the warehouse already answered, and
// versions keep a later fill from being overtaken by this one. The fill
// runs to its end, under the hot-tier deadline, even if the caller goes
// away.
func (s *Service) fill(ctx context.Context, ns *Namespace, reason string, fills []Fill) {
	s.fillRead(ctx, ns, reason, fills, 0, 0)
}

// fillRead is fill for the fills of a warehouse read that began after the
// doubt mark readMark (see doubts.settle; zero for none), when the hot
// tier had met servers servers (see fillHotMark).
func (s *Service) fillRead(ctx context.Context, ns *Namespace, reason string, fills []Fill, readMark, servers uint64) {
	if err := s.fillHotMark(ctx, ns, reason, s.opts.HotTimeout, fills, readMark, servers); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "hot tier fill failed",
			slog.String("namespace", ns.Name), slog.String("reason", reason), slog.Any("err", err))
	}
}

// fillHot stores fills in the hot tier in one round trip, under timeout,
// to its end even if the caller goes away, and counts them under reason.
// The keys of fills that fail are put in doubt (see doubts), and fills that
// land settle the doubts they answer.
func (s *Service) fillHot(ctx context.Context, ns *Namespace, reason string, timeout time.Duration, fills []Fill) error {
	return s.fillHotMark(ctx, ns, reason, timeout, fills, 0, 0)
}

// fillHotMark is fillHot for the fills of a warehouse read that began
// after the doubt mark readMark (zero for none), when the hot tier had met
// servers server processes (zero: count from now). A read's, a write's or
// a repair's fill that lands after the hot tier met a new server since
// then is not trusted: the count is the one taken before the warehouse
// read or write, so that a server met by any connection meanwhile, or
// between it and the fill, counts.
func (s *Service) fillHotMark(ctx context.Context, ns *Namespace, reason string, timeout time.Duration, fills []Fill, readMark, servers uint64) error {
	return s.fillHotBy(ctx, ns, reason, timeout, fills, readMark, servers, s.hot.FillMany)
}

// fillHotBy is fillHotMark with fill in place of the hot tier's FillMany,
// such as a FillPublisher's fill that publishes the invalidations too.
func (s *Service) fillHotBy(ctx context.Context, ns *Namespace, reason string, timeout time.Duration, fills []Fill, readMark, servers uint64,
	fill func(context.Context, *Namespace, []Fill) error) error {
	if len(fills) == 0 {
		return nil
	}
	if servers == 0 {
		servers = s.hotServers()
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	err := fill(hctx, ns, fills)
	cancel()
	result := "ok"
	now := s.opts.Now()
	switch {
	case err != nil:
		result = "error"
		s.doubts.raise(ns, fills, false, now)
	case s.newServer(servers) && (reason == "read" || reason == "repair" || reason == string(retireWrite)):
		// The fill may have gone to a Redis that restarted empty, where
		// the update of a newer write was lost: it is not trusted until a
		// newer version, or a later read's fill, lands.
		s.doubts.raise(ns, fills, true, now)
	default:
		s.doubts.settle(ns, fills, readMark)
		if s.opts.Sampler != nil {
			for _, f := range fills {
				s.opts.Sampler.Sample(ns, f.Key, reason)
			}
		}
	}
	s.hotWrites.WithLabelValues(ns.Name, reason, result).Add(float64(len(fills)))
	return err
}

// newServer reports whether the hot tier met a server since it reported
// servers: a Redis that may have restarted empty. The first server met
// is none: no update can have been lost before it.
func (s *Service) newServer(servers uint64) bool {
	return servers != 0 && s.hotServers() != servers
}

// serverCounter is a hot tier that counts the server processes it met: a
// new one may be a Redis that restarted empty.
type serverCounter interface{ Servers() uint64 }

// hotServers returns the hot tier's count of server processes met, or zero
// when it does not count them.
func (s *Service) hotServers() uint64 {
	if c, ok := s.hot.(serverCounter); ok {
		return c.Servers()
	}
	return 0
}

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
	class := Classify(err)
	if wctx.Err() != nil && class != ClassNone {
		class = ClassUnavailable
	}
	switch class {
	case ClassUnavailable:
		s.breaker.done(false)
		if !errors.Is(err, ErrUnavailable) {
			return fmt.Errorf("%w: the warehouse did not answer within %v: %w", ErrUnavailable, s.opts.WarmTimeout, err)
		}
		return err
	case ClassCanceled:
		s.breaker.release()
		return err
	}
	s.breaker.done(true)
	return err
}
