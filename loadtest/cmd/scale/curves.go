package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/warmcache/warmcache/internal/nearcache"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/loadtest/bench"
)

// curves are every curve of one run.
type curves struct {
	byRows, bySize, gpRows []point
	batches                []batchPoint
	instances              []instancePoint
	near                   []nearPoint
}

// batchPoint is the _mget curve at one batch size: keys per second and the
// service's CPU per key, for cold keys (one warehouse query per batch)
// and for the same keys in Redis (one pipeline per batch).
type batchPoint struct {
	keys                     int
	missKeys, hitKeys        float64 // keys per second
	missCPUPerKey, hitCPUKey float64 // µs
}

// instancePoint is the fleet curve at one instance count: requests per
// second of all instances and their CPU per request.
type instancePoint struct {
	n               int
	miss, hit       float64
	missCPU, hitCPU float64 // µs per request, summed over the instances
}

// nearPoint is the near cache's Go heap per entry at one entry count and
// value size.
type nearPoint struct {
	entries, valueBytes int
	heapPerEntry        float64 // bytes
	weightPerEntry      float64 // bytes, as the cache counts them against its bound
}

// batchCurve reads the table of rows keys through _mget at each batch size
// of o.batches: first cold (after a flush of the service's prefix), each
// key once, then the same keys again as hits.
func batchCurve(ctx context.Context, o options, base string, pid, rows int) ([]batchPoint, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.workers * 2}, Timeout: 30 * time.Second}
	var out []batchPoint
	for _, size := range o.batches {
		flush(ctx, o)
		perm := rand.New(rand.NewPCG(uint64(size), 2)).Perm(rows)
		var next atomic.Int64
		body := func(keys []int) *http.Request { return mgetRequest(base, keys) }
		miss, missCPU := attackN(ctx, client, []int{pid}, o, func() *http.Request {
			i := int(next.Add(1)-1) * size
			if i+size > len(perm) {
				return nil
			}
			return body(perm[i : i+size])
		})
		read := int(min(next.Load()*int64(size), int64(len(perm))))
		hit, hitCPU := attackN(ctx, client, []int{pid}, o, func() *http.Request {
			i := rand.IntN(max(read/size, 1)) * size
			return body(perm[i:min(i+size, len(perm))])
		})
		p := batchPoint{keys: size, missKeys: miss * float64(size), hitKeys: hit * float64(size),
			missCPUPerKey: missCPU / float64(size), hitCPUKey: hitCPU / float64(size)}
		fmt.Printf("    _mget of %d: %8.0f cold keys/s (%.1f µs per key), %8.0f hot keys/s (%.1f µs per key)\n",
			size, p.missKeys, p.missCPUPerKey, p.hitKeys, p.hitCPUKey)
		out = append(out, p)
	}
	flush(ctx, o)
	return out, nil
}

// instanceCurve serves db of w from each count of o.instances of warmcache
// serve, all on the servers' CPUs and sharing one Redis prefix, and
// attacks them together: misses (each key once, after a flush) and hits
// (the keys the misses read), the clients spread evenly.
func instanceCurve(ctx context.Context, o options, w warehouse, db string, rows int, log io.Writer) ([]instancePoint, error) {
	dir, env, err := pointEnv(o, w, db)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.workers * 2}, Timeout: 30 * time.Second}
	var out []instancePoint
	for _, n := range o.instances {
		fmt.Fprintf(log, "==> %d instances on %s\n", n, db)
		var pids []int
		var bases []string
		var stop []func()
		for range n {
			serve, err := startServe(ctx, o, env, w, db)
			if err != nil {
				for _, s := range stop {
					s()
				}
				return nil, err
			}
			pids, bases = append(pids, serve.Pid()), append(bases, serve.HTTP())
			stop = append(stop, func() { _ = serve.Stop(syscall.SIGTERM, time.Minute) })
		}
		flush(ctx, o)
		perm := rand.New(rand.NewPCG(uint64(n), 3)).Perm(rows)
		var next, turn atomic.Int64
		get := func(k int) *http.Request {
			b := bases[int(turn.Add(1))%len(bases)]
			req, _ := http.NewRequest(http.MethodGet, b+"/v1/kv/widgets/"+strconv.Itoa(k+1), nil)
			return req
		}
		p := instancePoint{n: n}
		p.miss, p.missCPU = attackN(ctx, client, pids, o, func() *http.Request {
			i := next.Add(1) - 1
			if i >= int64(len(perm)) {
				return nil
			}
			return get(perm[i])
		})
		read := int(min(next.Load(), int64(len(perm))))
		p.hit, p.hitCPU = attackN(ctx, client, pids, o, func() *http.Request { return get(perm[rand.IntN(max(read, 1))]) })
		for _, s := range stop {
			s()
		}
		fmt.Fprintf(log, "    miss %8.0f req/s %7.1f µs per request; hit %8.0f req/s %7.1f µs per request\n", p.miss, p.missCPU, p.hit, p.hitCPU)
		out = append(out, p)
	}
	flush(ctx, o)
	return out, nil
}

// nearCurve measures the near cache's Go heap per entry: for each value
// size and entry count, the live heap after a collection, with the cache
// full of distinct values, against the heap before it was made.
func nearCurve(o options) ([]nearPoint, error) {
	ns := &warmcache.Namespace{Name: "widgets"}
	var out []nearPoint
	for _, size := range o.nearSizes {
		for _, n := range o.nearCounts {
			before := liveHeap()
			c, err := nearcache.New(nearcache.Options{MaxBytes: uint64(n) * uint64(size+1024) * 2}, nil)
			if err != nil {
				return nil, err
			}
			value := bytes.Repeat([]byte("x"), size)
			for i := range n {
				k := strconv.Itoa(i + 1)
				v := bytes.Clone(value)
				c.Set(ns, warmcache.Key{Text: k, Int: int64(i + 1)}, warmcache.Entry{Value: v, Version: int64(i + 1), Found: true}, time.Hour)
			}
			c.CleanUp()
			after := liveHeap()
			p := nearPoint{entries: n, valueBytes: size, heapPerEntry: float64(after-before) / float64(n), weightPerEntry: float64(c.Bytes()) / float64(n)}
			runtime.KeepAlive(c)
			fmt.Printf("    near cache, %d entries of %d B: %.0f B of heap per entry (%.0f B counted)\n", n, size, p.heapPerEntry, p.weightPerEntry)
			out = append(out, p)
		}
	}
	return out, nil
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// attackN is attack over several processes: the requests of next with
// o.workers workers for o.duration, and the CPU of every pid per
// successful request.
func attackN(ctx context.Context, client *http.Client, pids []int, o options, next func() *http.Request) (float64, float64) {
	cpu0 := bench.ProcessCPU(pids...)
	res := bench.ClosedLoop(ctx, client, o.workers, o.duration, next)
	n := float64(len(res.Latencies))
	return res.Rate(), (bench.ProcessCPU(pids...) - cpu0).Seconds() * 1e6 / max(n, 1)
}

// draw writes the PNGs of the batch, fleet and near-cache curves.
func (c curves) draw(dir string) error {
	type line struct {
		name string
		xys  plotter.XYs
	}
	save := func(file, title, xLabel, yLabel string, logXY bool, lines []line) error {
		if len(lines) == 0 || len(lines[0].xys) == 0 {
			return nil
		}
		pl := plot.New()
		pl.Title.Text = title
		pl.X.Label.Text, pl.Y.Label.Text = xLabel, yLabel
		if logXY {
			pl.X.Scale, pl.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
			pl.Y.Scale, pl.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
		}
		var args []any
		for _, l := range lines {
			args = append(args, l.name, l.xys)
		}
		if err := plotutil.AddLinePoints(pl, args...); err != nil {
			return err
		}
		return pl.Save(vg.Points(640), vg.Points(360), filepath.Join(dir, file))
	}
	var missK, hitK, missC, hitC plotter.XYs
	for _, b := range c.batches {
		missK = append(missK, plotter.XY{X: float64(b.keys), Y: b.missKeys})
		hitK = append(hitK, plotter.XY{X: float64(b.keys), Y: b.hitKeys})
		missC = append(missC, plotter.XY{X: float64(b.keys), Y: b.missCPUPerKey})
		hitC = append(hitC, plotter.XY{X: float64(b.keys), Y: b.hitCPUKey})
	}
	if err := save("batches.png", "_mget: keys/s by keys per request", "keys per request", "keys/s", true,
		[]line{{"cold keys", missK}, {"hot keys", hitK}}); err != nil {
		return err
	}
	if err := save("batches-cpu.png", "_mget: service CPU µs per key by keys per request", "keys per request", "µs per key", true,
		[]line{{"cold keys", missC}, {"hot keys", hitC}}); err != nil {
		return err
	}
	var miss, hit, mcpu, hcpu plotter.XYs
	for _, p := range c.instances {
		miss = append(miss, plotter.XY{X: float64(p.n), Y: p.miss})
		hit = append(hit, plotter.XY{X: float64(p.n), Y: p.hit})
		mcpu = append(mcpu, plotter.XY{X: float64(p.n), Y: p.missCPU})
		hcpu = append(hcpu, plotter.XY{X: float64(p.n), Y: p.hitCPU})
	}
	if err := save("instances.png", "instances sharing one Redis and one warehouse: requests/s", "instances", "requests/s (all instances)", false,
		[]line{{"miss", miss}, {"hit", hit}}); err != nil {
		return err
	}
	if err := save("instances-cpu.png", "instances sharing one Redis and one warehouse: CPU µs per request", "instances", "µs per request (all instances)", false,
		[]line{{"miss", mcpu}, {"hit", hcpu}}); err != nil {
		return err
	}
	bySize := map[int]plotter.XYs{}
	var sizes []int
	for _, p := range c.near {
		if _, ok := bySize[p.valueBytes]; !ok {
			sizes = append(sizes, p.valueBytes)
		}
		bySize[p.valueBytes] = append(bySize[p.valueBytes], plotter.XY{X: float64(p.entries), Y: p.heapPerEntry})
	}
	var lines []line
	for _, s := range sizes {
		lines = append(lines, line{fmt.Sprintf("%d B values", s), bySize[s]})
	}
	return save("near.png", "near cache: Go heap bytes per entry by entries", "entries", "heap bytes per entry", true, lines)
}
