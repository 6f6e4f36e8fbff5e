package main

import (
	"context"
	"fmt"
	mathrand "math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/loadtest/bench"
	"github.com/warmcache/warmcache/loadtest/pin"
)

// writeDoc is the document every write of the lane stores, the service's
// and pgbench's alike.
const writeDoc = `{"widget":{"id":"w","debug":"off","color":"teal","size":7,"note":"written by the write lane of gpbench, the same row for both"}}`

// plainUpsert is pgbench's reference of a PUT: a plain upsert of the same
// row on the same table, the version passed as a parameter (a value pgbench
// draws), so that the coordinator sends it to the key's segment alone.
const plainUpsert = `\set k random(1, %[1]d)
\set v random(1, 1000000000)
INSERT INTO widgets (key, value, version) VALUES (:k, '%[2]s'::jsonb, :v)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version;
`

// inlineUpsert draws the version inside the statement: its plan spans every
// segment, so it is shown but is no reference.
const inlineUpsert = `\set k random(1, %[1]d)
INSERT INTO widgets (key, value, version) VALUES (:k, '%[2]s'::jsonb, nextval('warmcache_version_seq'))
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version;
`

// writeRun is one measured write path: its rate, latencies and budget.
type writeRun struct {
	name    string
	clients int
	rate    float64
	p50     time.Duration
	p99     time.Duration
	errs    int
	cpu     budget
	writes  float64 // the writes the budget is divided by
	pgbench bool
}

// writes is the Greenplum write lane: PUT, If-Match PUT and DELETE on
// random keys against pgbench -M simple of a plain upsert of the same row
// on the same table, at the same concurrency, each with the CPU of every
// process per write. The service, the coordinator and the segments run on
// the servers' CPUs; gpbench's clients and pgbench on the others.
func (r *gpRun) writes(ctx context.Context) error {
	o := r.o
	place := pin.New(true)
	if err := r.pinCluster(place); err != nil {
		return err
	}
	defer r.releaseCluster(place)
	// Conditional PUTs and DELETEs take each key once, from disjoint
	// parts of a shuffled order: a sixth of the keys for each.
	order := mathrand.Perm(o.rows)
	part := o.rows / 6
	var runs []writeRun
	one, err := r.serviceWrites(ctx, "", r.kv, r.svcPID, order[:part], order[part:2*part])
	if err != nil {
		return err
	}
	runs = append(runs, one...)
	// The same service with the transaction of statements, before the
	// write function: what the function gains, in the same run.
	off, err := startService(append(slices.Clone(r.env), "WARMCACHE_PG_WRITE_FUNCTION=off", fmt.Sprintf("WARMCACHE_PG_MAX_CONNS=%d", 2*o.writeWorkers)), o.bin, r.nsFile)
	if err != nil {
		return err
	}
	defer off.stop()
	if err := place.PinServers(off.Pid()); err != nil {
		return err
	}
	two, err := r.serviceWrites(ctx, ", a transaction of statements (`--pg-write-function=off`)", off.base+"/v1/kv/widgets/", off.Pid(), order[2*part:3*part], order[3*part:4*part])
	if err != nil {
		return err
	}
	runs = append(runs, two...)
	reference := func(name, script string) (writeRun, error) {
		stop := meter(r.svcPID)
		pb, err := pgbenchOn(place.LoaderPrefix(), o, r.dsn, r.dir, "simple", o.writeWorkers, fmt.Sprintf(script, o.rows, writeDoc))
		if err != nil {
			return writeRun{}, err
		}
		b := stop()
		return writeRun{name: name, clients: o.writeWorkers, rate: pb.tps, p50: pb.latency, cpu: b, writes: pb.tps * o.duration.Seconds(), pgbench: true}, nil
	}
	plain, err := reference("`pgbench -M simple`: the plain upsert of the same row, the version a parameter", plainUpsert)
	if err != nil {
		return err
	}
	inline, err := reference("`pgbench -M simple`: the upsert with `nextval()` inline (no reference: every segment)", inlineUpsert)
	if err != nil {
		return err
	}
	runs = append(runs, plain, inline)
	r.writeReport(place, runs, plain)
	return nil
}

// serviceWrites measures the PUTs, the If-Match PUTs and the DELETEs of the
// service at kv (process pid), each name followed by suffix; the deleted
// keys are put back.
func (r *gpRun) serviceWrites(ctx context.Context, suffix, kv string, pid int, ifMatchKeys, deleteKeys []int) ([]writeRun, error) {
	o := r.o
	service := func(name string, next func() *http.Request) writeRun {
		stop := meter(pid)
		res := attack(r.client, o.writeWorkers, o.duration, next)
		return writeRun{name: name + suffix, clients: o.writeWorkers, rate: res.Rate(), p50: res.Quantile(0.5), p99: res.Quantile(0.99), errs: res.Errors, cpu: stop(), writes: float64(len(res.Latencies))}
	}
	put := func() *http.Request {
		req, _ := http.NewRequest(http.MethodPut, kv+strconv.Itoa(1+mathrand.IntN(o.rows)), strings.NewReader(writeDoc))
		return req
	}
	// A second unmeasured opens the service's connections and clients'.
	_ = attack(r.client, o.writeWorkers, time.Second, put)
	runs := []writeRun{service("service `PUT`, random keys", put)}
	versions, err := r.versions(ctx, ifMatchKeys)
	if err != nil {
		return nil, err
	}
	var next atomic.Int64
	runs = append(runs, service("service `PUT` with `If-Match` at the key's version", func() *http.Request {
		i := next.Add(1) - 1
		if i >= int64(len(ifMatchKeys)) {
			return nil
		}
		k := ifMatchKeys[i] + 1
		req, _ := http.NewRequest(http.MethodPut, kv+strconv.Itoa(k), strings.NewReader(writeDoc))
		req.Header.Set("If-Match", strconv.Quote(strconv.FormatInt(versions[k], 10)))
		return req
	}))
	next.Store(0)
	runs = append(runs, service("service `DELETE`", func() *http.Request {
		i := next.Add(1) - 1
		if i >= int64(len(deleteKeys)) {
			return nil
		}
		req, _ := http.NewRequest(http.MethodDelete, kv+strconv.Itoa(deleteKeys[i]+1), nil)
		return req
	}))
	return runs, r.restore(ctx, deleteKeys)
}

// writeReport writes the lane's tables and targets.
func (r *gpRun) writeReport(place pin.Placement, runs []writeRun, plain writeRun) {
	fmt.Fprintf(&r.b, "Writes, %s, %d clients, %s each, on random keys of the %s widgets (`If-Match` and `DELETE` take each key once):\n\n",
		place.String(), r.o.writeWorkers, r.o.duration, num(float64(r.o.rows)))
	fmt.Fprintf(&r.b, "| write | req/s | p50 | p99 | ratio | baseline |\n|---|---:|---:|---:|---:|---|\n")
	for _, w := range runs {
		p50, p99 := ms(w.p50), ms(w.p99)
		if w.pgbench {
			p50, p99 = ms(w.p50)+" (mean)", ""
		}
		errs := ""
		if w.errs > 0 {
			errs = fmt.Sprintf(", %d errors", w.errs)
		}
		fmt.Fprintf(&r.b, "| %s%s | %s | %s | %s | %.2f | the plain upsert |\n", w.name, errs, num(w.rate), p50, p99, w.rate/plain.rate)
	}
	fmt.Fprintf(&r.b, "\nCPU per write, µs, from /proc over each run (the coordinator and the segments: every process of the cluster, the backends that ended included; no PgBouncer in either path):\n\n")
	procs := []string{"warmcache", "coordinator", "segments", "gpbench", "pgbench"}
	fmt.Fprintf(&r.b, "| write | %s | total |\n|---|%s---:|\n", strings.Join(procs, " | "), strings.Repeat("---:|", len(procs)))
	for _, w := range runs {
		var cells []string
		var total time.Duration
		for _, p := range procs {
			total += w.cpu[p]
			cells = append(cells, fmt.Sprintf("%.0f", float64(w.cpu[p].Microseconds())/max(w.writes, 1)))
		}
		fmt.Fprintf(&r.b, "| %s | %s | %.0f |\n", w.name, strings.Join(cells, " | "), float64(total.Microseconds())/max(w.writes, 1))
	}
	fmt.Fprintln(&r.b)
	for _, w := range runs[:3] {
		r.targets = append(r.targets, target("writes", w.name+" ≥ 0.8 × the plain upsert of `pgbench -M simple`", w.rate/plain.rate, 0.8))
	}
	fmt.Fprintf(&r.b, "The service's writes through the write function against the same service's transaction of statements: `PUT` %.2f×, `If-Match` %.2f×, `DELETE` %.2f×.\n\n",
		runs[0].rate/runs[3].rate, runs[1].rate/runs[4].rate, runs[2].rate/runs[5].rate)
}

// pinCluster moves the service and every process of the cluster to the
// servers' CPUs, and gpbench to the load generators'; a backend forked
// later inherits its postmaster's CPUs.
func (r *gpRun) pinCluster(place pin.Placement) error {
	if !place.On() {
		return nil
	}
	if err := place.PinServers(append(bench.FindCluster("").Pids(), r.svcPID)...); err != nil {
		r.releaseCluster(place)
		return err
	}
	return place.PinSelf()
}

// releaseCluster gives the cluster, the service and gpbench every CPU
// again, the backends forked while pinned too.
func (r *gpRun) releaseCluster(place pin.Placement) {
	if place.On() {
		_ = place.Release(append(bench.FindCluster("").Pids(), r.svcPID, os.Getpid())...)
	}
}

// versions reads the version of each key (0-based indexes of the widgets).
func (r *gpRun) versions(ctx context.Context, idx []int) (map[int]int64, error) {
	conn, err := pgx.Connect(ctx, r.dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	keys := make([]int64, len(idx))
	for i, k := range idx {
		keys[i] = int64(k + 1)
	}
	rows, err := conn.Query(ctx, "SELECT key, version FROM widgets WHERE key = ANY($1)", keys)
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(keys))
	var k, v int64
	_, err = pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[int(k)] = v; return nil })
	return out, err
}

// restore puts back the deleted widgets (0-based indexes).
func (r *gpRun) restore(ctx context.Context, idx []int) error {
	conn, err := pgx.Connect(ctx, r.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	keys := make([]int64, len(idx))
	for i, k := range idx {
		keys[i] = int64(k + 1)
	}
	_, err = conn.Exec(ctx, `INSERT INTO widgets (key, value, version)
SELECT k, $2::jsonb, nextval('warmcache_version_seq') FROM unnest($1::bigint[]) AS k ON CONFLICT (key) DO NOTHING`, keys, writeDoc)
	if err != nil {
		return fmt.Errorf("restore deleted rows: %w", err)
	}
	return nil
}
