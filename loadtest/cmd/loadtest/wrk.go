package main

import (
	"context"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
	"github.com/warmcache/warmcache/loadtest/wrk"
)

// wrkPaths gives the request paths of an attack that wrk sends: the whole
// ring for a ring of GETs, or the next n cold keys for an attack that asks
// for each key once (n bounds how many requests the attack can send before
// it starts over, which would turn misses into hits: the X-Cache counts
// would show it). Saturation attacks of plain GETs use wrk; fixed-rate
// attacks, bodies (PUT, _mget) and gRPC stay with the harness's clients.
type wrkPaths func(n int) []string

// wrkAttack runs wrk against base for d with conns connections on the
// load generators' CPUs.
func (h *harness) wrkAttack(ctx context.Context, scenario, base string, paths []string, header map[string]string, conns int, d time.Duration) (bench.Run, error) {
	return wrk.Run(ctx, wrk.Spec{Scenario: scenario, Base: base, Paths: paths, Header: header, Conns: conns, Duration: d,
		Dir: h.opts.ArtifactDir, Prefix: h.pin.LoaderPrefix()})
}
