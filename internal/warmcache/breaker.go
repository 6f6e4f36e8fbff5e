package warmcache

import (
	"sync"
	"time"
)

// breaker keeps the service from hammering a warehouse that is failing.
// After threshold consecutive failures it opens: calls fail at once for the
// cooldown. Then it lets one call through (half-open); a success closes it,
// a failure opens it again with the cooldown doubled, up to maxCooldown.
// A breaker is safe for concurrent use.
type breaker struct {
	threshold   int
	cooldown    time.Duration
	maxCooldown time.Duration
	now         func() time.Time

	mu       sync.Mutex
	failures int
	openedAt time.Time
	wait     time.Duration // the current cooldown; zero while closed
	probing  bool
}

// allow reports whether a call may go to the warehouse now, and if not, how
// long until it may.
func (b *breaker) allow() (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wait == 0 {
		return true, 0
	}
	left := b.openedAt.Add(b.wait).Sub(b.now())
	if left > 0 {
		return false, left
	}
	if b.probing {
		return false, b.cooldown
	}
	b.probing = true
	return true, 0
}

// done records the outcome of a call that allow let through.
func (b *breaker) done(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		b.failures, b.wait, b.probing = 0, 0, false
		return
	}
	b.failures++
	switch {
	case b.probing:
		b.wait = min(2*b.wait, b.maxCooldown)
	case b.wait == 0 && b.failures >= b.threshold:
		b.wait = b.cooldown
	default:
		return
	}
	b.openedAt, b.probing = b.now(), false
}

// release records that a call allow let through ended without telling
// anything about the warehouse (its caller went away): the failure count
// stays as it is, and a half-open probe may be taken again.
func (b *breaker) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// open reports whether the breaker refuses calls now.
func (b *breaker) open() bool {
	ok, _ := b.allow0()
	return !ok
}

// allow0 is allow without taking the half-open probe.
func (b *breaker) allow0() (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wait == 0 {
		return true, 0
	}
	left := b.openedAt.Add(b.wait).Sub(b.now())
	return left <= 0 && !b.probing, max(left, 0)
}
