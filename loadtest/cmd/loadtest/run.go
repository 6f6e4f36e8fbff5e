package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// benchRun is the state of one run, carried from step to step: the
// servers it started, the clients it opened, the keys it asks for and the
// results that later steps depend on.
type benchRun struct {
	*harness
	sample string        // the value of key 1, as PostgreSQL prints it
	rdb    *redis.Client // the shared Redis
	client *http.Client  // the client of the HTTP attacks

	hotKeys                    []int64           // the Zipf sequence of hot keys
	distinct                   []int64           // its distinct keys, pre-warmed
	perm                       bench.Permutation // the order of the cold keys
	coldNext                   atomic.Uint64     // the next cold key to ask for
	floor                      *process          // the floors' process
	svc                        *service          // the service under test; nil once stopped
	floorURL, mwURL, grpcFloor string            // the floors' addresses
	peer                       *process          // the peer: the hand-written cache-aside
	peerURL                    string            // the peer's address

	halfHot float64   // half the hot saturation throughput: the fixed rate
	missRun bench.Run // the miss saturation run
}

// prepare fills the database, finds the shared servers, flushes the
// service's Redis prefix and draws the keys of the run.
func (h *harness) prepare(ctx context.Context, start time.Time) (*benchRun, error) {
	o := h.opts
	sample, err := h.prepareDatabase(ctx)
	if err != nil {
		return nil, err
	}
	h.report.Env.ValueBytes = len(sample)
	h.findServers()

	r := &benchRun{harness: h, sample: sample, rdb: redis.NewClient(&redis.Options{Addr: o.RedisAddr}), client: newAttackClient(4 * o.Workers)}
	if err := r.drawKeys(ctx, start); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// drawKeys reads Redis's version, flushes the prefix and draws the hot
// keys and the order of the cold ones.
func (r *benchRun) drawKeys(ctx context.Context, start time.Time) error {
	o := r.opts
	if info, err := r.rdb.InfoMap(ctx, "server").Result(); err == nil {
		r.report.Env.Redis = info["Server"]["redis_version"]
	}
	if n, err := flushPrefix(ctx, r.rdb, o.RedisPrefix); err != nil {
		return err
	} else if n > 0 {
		r.logf("flushed %d Redis keys under %q", n, o.RedisPrefix)
	}
	hotKeys, err := bench.ZipfKeys(o.HotSamples, uint64(o.Rows), o.ZipfS, 42)
	if err != nil {
		return err
	}
	r.hotKeys, r.distinct = hotKeys, bench.Distinct(hotKeys)
	r.report.Env.HotKeys = len(r.distinct)
	// A new order of the cold keys every run, so that a run does not find
	// the rows the previous one read still in PostgreSQL's buffers.
	r.perm, err = bench.NewPermutation(uint64(o.Rows), uint64(start.UnixNano()))
	return err
}

// close stops what the run started and closes its clients.
func (r *benchRun) close() {
	r.client.CloseIdleConnections()
	if r.svc != nil {
		_ = r.svc.stop()
	}
	if r.floor != nil {
		_ = r.floor.stop()
	}
	if r.peer != nil {
		_ = r.peer.stop()
	}
	_ = r.rdb.Close()
}

// startFloors starts the floors in one process of their own like the
// service: the plain floor, the floor behind the service's middleware,
// the gRPC floor.
func (r *benchRun) startFloors(ctx context.Context) error {
	var floorAddr, mwAddr, grpcFloorAddr string
	for _, a := range []*string{&floorAddr, &mwAddr, &grpcFloorAddr} {
		var err error
		if *a, err = freeAddr(); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	r.floor, err = r.startProcess("floor", self, []string{"floor", "-addr", floorAddr, "-mw-addr", mwAddr, "-grpc-addr", grpcFloorAddr,
		"-bytes", fmt.Sprint(r.opts.FloorBytes)}, cleanEnv())
	if err != nil {
		return err
	}
	r.floorURL, r.mwURL, r.grpcFloor = "http://"+floorAddr, "http://"+mwAddr, grpcFloorAddr
	if err := r.floor.waitReady(ctx, r.floorURL+"/healthz"); err != nil {
		return err
	}
	if err := r.floor.waitReady(ctx, r.mwURL+"/healthz"); err != nil {
		return err
	}
	if !r.want("peer") {
		return nil
	}
	return r.startPeer(ctx, self)
}

// startPeer starts the hand-written cache-aside in a process of its own,
// on the same Redis and on PostgreSQL directly, with its own pool.
func (r *benchRun) startPeer(ctx context.Context, self string) error {
	o := r.opts
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	if n, err := flushPrefix(ctx, r.rdb, o.PeerPrefix); err != nil {
		return err
	} else if n > 0 {
		r.logf("flushed %d Redis keys under %q", n, o.PeerPrefix)
	}
	r.peer, err = r.startProcess("peer", self, []string{"peer", "-addr", addr, "-redis", o.RedisAddr,
		"-postgres", dsn(o.PGHost, o.Database), "-prefix", o.PeerPrefix, "-conns", fmt.Sprint(o.Workers)}, cleanEnv())
	if err != nil {
		return err
	}
	r.peerURL = "http://" + addr
	return r.peer.waitReady(ctx, r.peerURL+"/healthz")
}

// scenarios runs the chosen scenarios in their order: the stampede on a
// cold cache first, then the floors, the hits, the batches and the misses.
func (r *benchRun) scenarios(ctx context.Context) error {
	if r.want(bench.Stampede) {
		r.stampedeScenario(ctx)
	}
	if err := r.floorScenarios(ctx); err != nil {
		return err
	}
	if r.want(bench.Hot) || r.want(bench.MGet) || r.want(bench.Mixed) || r.want(bench.GRPC) {
		if err := r.prewarm(ctx, r.svc, r.distinct); err != nil {
			return err
		}
	}
	r.hotScenario(ctx)
	if r.want("peer") && r.want(bench.Hot) {
		if err := r.peerHotScenario(ctx); err != nil {
			return err
		}
	}
	if r.want(bench.GRPC) {
		if err := r.grpcScenario(ctx); err != nil {
			return err
		}
	}
	// The near cache's hits run right after the Redis hits, close in time
	// to the floors they are held against.
	if r.want(bench.L1) {
		if err := r.l1Scenario(ctx); err != nil {
			return err
		}
	}
	r.batchScenarios(ctx)
	if r.want(bench.Miss) {
		if err := r.missScenario(ctx); err != nil {
			return err
		}
		if r.want("peer") {
			if err := r.peerMissScenario(ctx); err != nil {
				return err
			}
		}
	}
	if r.want("monitor") {
		if err := r.monitorScenario(ctx); err != nil {
			return err
		}
	}
	// The writes come last: they change rows that the reads above read.
	if r.want("writes") {
		return r.writeScenarios(ctx)
	}
	return nil
}
