package warmcache

import "time"

// CheckValue exposes checkValue to the external tests.
var CheckValue = checkValue

// CheckMatch exposes checkMatch to the external tests.
var CheckMatch = checkMatch

// Queued reports how many reads wait for a warehouse lane in namespace
// widgets.
func Queued(s *Service) int { return s.lanes["widgets"].warm.waiting() }

// HotQueued reports how many reads wait for a hot-tier lane in namespace
// widgets.
func HotQueued(s *Service) int { return s.lanes["widgets"].hot.waiting() }

// Waiters reports how many callers wait on the shared read of key in
// namespace widgets.
func Waiters(s *Service, key string) int {
	s.flights.mu.Lock()
	defer s.flights.mu.Unlock()
	c := s.flights.calls["widgets\x00"+key]
	if c == nil {
		return 0
	}
	return c.waiters
}

// NearLife exposes nearLife to the external tests.
func NearLife(s *Service, ns *Namespace, e Entry) time.Duration { return s.nearLife(ns, e) }

// SetMaxDoubts sets the bound on the keys in doubt.
func SetMaxDoubts(s *Service, n int) {
	s.trust.doubts.mu.Lock()
	s.trust.doubts.max = n
	s.trust.doubts.mu.Unlock()
}

// SetEchoWait sets how long Apply waits for a write under way to tell its
// version, so that a test on a loaded machine does not depend on 5 ms.
func SetEchoWait(s *Service, d time.Duration) { s.trust.echoes.wait = d }
