package warmcache

import (
	"context"
	"sync"
	"time"
)

// TierState is the readiness of one tier.
type TierState struct {
	// Tier is "redis" or "sql".
	Tier string
	// Err is nil when the tier answered.
	Err error
}

// readinessTTL is how long a readiness answer is reused: probes, however
// many, cost at most one ping of each tier per readinessTTL.
const readinessTTL = time.Second

// readiness caches the last answer of Readiness and runs one probe at a
// time.
type readiness struct {
	mu      sync.Mutex
	at      time.Time
	states  []TierState
	running chan struct{} // closed when the probe under way ends; nil if none
}

// Readiness reports each tier's state. It pings both tiers, each under its
// own deadline, at most once per second: callers within a second of the
// last probe get its answer, and callers during a probe wait for it. So a
// flood of readiness probes never takes more than one warehouse connection.
// The probe runs to its end even if its caller goes away.
func (s *Service) Readiness(ctx context.Context) []TierState {
	r := &s.ready
	r.mu.Lock()
	if r.states != nil && s.opts.Now().Sub(r.at) < readinessTTL {
		states := r.states
		r.mu.Unlock()
		return states
	}
	running := r.running
	if running == nil {
		running = make(chan struct{})
		r.running = running
		go s.probe(running)
	}
	r.mu.Unlock()
	select {
	case <-running:
	case <-ctx.Done():
		return []TierState{{Tier: "redis", Err: ctx.Err()}, {Tier: "sql", Err: ctx.Err()}}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states
}

// probe pings both tiers and records the answer.
func (s *Service) probe(done chan struct{}) {
	hctx, cancel := context.WithTimeout(context.Background(), 4*s.opts.HotTimeout)
	defer cancel()
	wctx, wcancel := context.WithTimeout(context.Background(), s.opts.WarmTimeout)
	defer wcancel()
	states := []TierState{
		{Tier: "redis", Err: s.hot.Ping(hctx)},
		{Tier: "sql", Err: s.warm.Ping(wctx)},
	}
	r := &s.ready
	r.mu.Lock()
	r.states, r.at, r.running = states, s.opts.Now(), nil
	r.mu.Unlock()
	close(done)
}
