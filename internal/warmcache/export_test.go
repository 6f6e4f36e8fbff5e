package warmcache

// CheckValue exposes checkValue to the external tests.
var CheckValue = checkValue

// Queued reports how many reads wait for a warehouse lane in namespace
// widgets.
func Queued(s *Service) int {
	b := s.batches["widgets"].warm
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}
