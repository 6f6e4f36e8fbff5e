package warmcache

import "context"

// Tracer marks the steps of a request in its trace: the transports start
// the request's span and the tiers' clients their own; the core adds the
// steps only it sees. Outcomes and namespaces are recorded, never values
// or keys. Its implementations are safe for concurrent use.
type Tracer interface {
	// Start starts the span of one step of a read ("near": the near
	// cache; "flight": waiting for a shared warehouse read) as a child of
	// ctx's span. end ends it, recording outcome when it is not empty.
	Start(ctx context.Context, step string, ns *Namespace) (_ context.Context, end func(outcome string))
	// Outcome records on ctx's span (the request's) the namespace and how
	// the request was answered: hit-l1, hit, miss or stale for a read,
	// write for a write; found says whether the key exists.
	Outcome(ctx context.Context, ns *Namespace, outcome string, found bool)
}

// noEnd ends no span.
func noEnd(string) {}

// step starts a traced step of a request, or nothing without a Tracer.
func (s *Service) step(ctx context.Context, name string, ns *Namespace) (context.Context, func(string)) {
	if s.opts.Tracer == nil {
		return ctx, noEnd
	}
	return s.opts.Tracer.Start(ctx, name, ns)
}

// outcome records how a request was answered, without a Tracer nothing.
func (s *Service) outcome(ctx context.Context, ns *Namespace, outcome string, found bool) {
	if s.opts.Tracer != nil {
		s.opts.Tracer.Outcome(ctx, ns, outcome, found)
	}
}
