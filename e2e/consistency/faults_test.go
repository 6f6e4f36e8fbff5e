package consistency_test

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/e2e/internal/faultproxy"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
)

// faultRig is what a fault schedule acts on: proxies between the service
// and Redis and between the service and PostgreSQL, Redis itself, and the
// run's recorder, where each fault is noted.
type faultRig struct {
	t     *testing.T
	redis *testproc.Redis
	rp    *faultproxy.Proxy // to Redis
	pp    *faultproxy.Proxy // to PostgreSQL
	rec   *recorder
	// from is where in the run the schedule's times start: a schedule
	// repeated over a long run starts each cycle later.
	from time.Duration
}

func (f *faultRig) note(format string, args ...any) { f.rec.note(fmt.Sprintf(format, args...)) }

// at waits until d into the schedule.
func (f *faultRig) at(d time.Duration) { time.Sleep(time.Until(f.rec.base.Add(f.from + d))) }

// redisLatency delays Redis's traffic each way.
func (f *faultRig) redisLatency(up, down time.Duration) {
	f.rp.SetLatency(up, down)
	f.note("Redis latency %v up, %v down", up, down)
}

func (f *faultRig) restartRedis() {
	f.note("Redis stopped")
	f.redis.Stop(f.t)
	f.redis.Start(f.t)
	f.note("Redis restarted, empty")
}

// faultScenario is one schedule of faults over a run of length d; its
// faults end by d.
type faultScenario struct {
	name string
	desc string
	run  func(f *faultRig, d time.Duration)
}

// faultScenarios are the schedules of the fault pass. The service's hot
// tier deadline is the default, 50ms.
var faultScenarios = []faultScenario{
	{"bursts", "Redis slowed by 80ms a round trip for 300ms of every second, beyond the 50ms deadline", func(f *faultRig, d time.Duration) {
		for at := 200 * time.Millisecond; at+300*time.Millisecond < d; at += time.Second {
			f.at(at)
			f.redisLatency(40*time.Millisecond, 40*time.Millisecond)
			f.at(at + 300*time.Millisecond)
			f.redisLatency(0, 0)
		}
	}},
	{"deadline", "commands reach Redis 70ms late, after their deadline, and still apply (an overloaded client or server), for 400ms of every second", func(f *faultRig, d time.Duration) {
		for at := 300 * time.Millisecond; at+400*time.Millisecond < d; at += time.Second {
			f.at(at)
			f.redisLatency(70*time.Millisecond, 0)
			f.at(at + 400*time.Millisecond)
			f.redisLatency(0, 0)
		}
	}},
	{"restart", "Redis restarted empty three times a run, while writes and misses overlap", func(f *faultRig, d time.Duration) {
		for _, frac := range []float64{0.25, 0.5, 0.75} {
			f.at(time.Duration(float64(d) * frac))
			f.restartRedis()
		}
	}},
	{"mixed", "latency bursts, late commands, a stall (half-open), resets and a restart of Redis; latency and resets of PostgreSQL", func(f *faultRig, d time.Duration) {
		step := d / 10
		f.at(1 * step)
		f.redisLatency(40*time.Millisecond, 40*time.Millisecond)
		f.at(2 * step)
		f.redisLatency(0, 0)
		f.note("Redis reset: %d connections", f.rp.Reset())
		f.at(3 * step)
		f.rp.Stall()
		f.note("Redis stalled (half-open)")
		f.at(3*step + 300*time.Millisecond)
		f.rp.Resume()
		f.note("Redis resumed")
		f.pp.SetLatency(30*time.Millisecond, 0)
		f.note("PostgreSQL latency 30ms")
		f.at(4 * step)
		f.pp.SetLatency(0, 0)
		f.note("PostgreSQL reset: %d connections", f.pp.Reset())
		f.at(5 * step)
		f.restartRedis()
		f.at(6 * step)
		f.redisLatency(70*time.Millisecond, 0)
		f.at(7 * step)
		f.redisLatency(0, 0)
		f.note("Redis reset: %d connections", f.rp.Reset())
		f.at(8 * step)
		f.restartRedis()
		f.note("PostgreSQL reset: %d connections", f.pp.Reset())
	}},
}

// testFaults runs the workload through one instance while its tiers fail,
// as each scenario schedules, with change capture and the near cache on
// and off, and fails on any history that is not linearizable, any read
// older than its client's own acknowledged write, and any read older than
// one the instance answered before it began. WARMCACHE_TEST_FAULTS names
// the scenarios (a comma-separated list, or "all"; "mixed" by default, as
// `make test` runs it) and WARMCACHE_TEST_FAULT_RUN the length of each run
// (4s by default; `make soak` runs 20s).
func testFaults(t *testing.T, c *cluster, w workload) {
	names := []string{"mixed"}
	if v := os.Getenv("WARMCACHE_TEST_FAULTS"); v == "all" {
		names = nil
		for _, sc := range faultScenarios {
			names = append(names, sc.name)
		}
	} else if v != "" {
		names = strings.Split(v, ",")
	}
	w.d = 4 * time.Second
	if v := os.Getenv("WARMCACHE_TEST_FAULT_RUN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("WARMCACHE_TEST_FAULT_RUN: %v", err)
		}
		w.d = d
	}
	for _, name := range names {
		i := slices.IndexFunc(faultScenarios, func(sc faultScenario) bool { return sc.name == name })
		if i < 0 {
			t.Fatalf("WARMCACHE_TEST_FAULTS: no scenario %q", name)
		}
		for _, cfg := range []runConfig{{}, {near: true}, {capture: true}, {capture: true, near: true}} {
			t.Run("faults/"+name+"/"+cfg.String(), func(t *testing.T) {
				testUnderFaults(t, c, cfg, w, faultScenarios[i])
			})
		}
	}
}

// testUnderFaults runs the workload through one instance under one
// scenario.
func testUnderFaults(t *testing.T, c *cluster, cfg runConfig, w workload, sc faultScenario) {
	// The consistency monitor checks one cache update in ten.
	rig, in, admin := startUnderFaults(t, c, cfg, 100000)
	rec := rig.rec
	done := make(chan *tally, 1)
	go func() { done <- runClients(in, rec, w, 3) }()
	sc.run(rig, w.d)
	rig.calm()
	tl := <-done
	label := "faults/" + sc.name + "/" + cfg.String()
	rig.report(t, label, in, sc.desc)
	checkRun(t, label, rec, tl)
	checkOwnReads(t, label, rec)
	checkConverged(t, label, in, admin, w.keys)
	checkMonitor(t, label, in, tl.unknown)
}

// startUnderFaults starts one instance that reaches Redis and PostgreSQL
// through fault proxies, with the hot tier's deadline at its default, the
// circuit breaker kept shut, and the consistency monitor sampling samples
// in a million cache updates, and returns the rig (its recorder new), the
// instance and a connection to the warehouse. A write answered 5xx, or
// not at all, has an unknown outcome; the breaker is set not to open
// because writes it would refuse at once have an unknown outcome too, and
// the few that a fault fails are what the check can afford.
func startUnderFaults(t *testing.T, c *cluster, cfg runConfig, samples int) (*faultRig, *instance, *pgx.Conn) {
	d := c.newDatabase(t, cfg.near)
	r := testproc.StartRedis(t)
	rig := &faultRig{t: t, redis: r, rp: faultproxy.Start(t, r.Addr), rec: newRecorder()}
	u, err := url.Parse(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	rig.pp = faultproxy.Start(t, u.Host)
	proxied := *d
	pu := *u
	pu.Host = rig.pp.Addr()
	proxied.dsn = pu.String()
	cfg.env = map[string]string{
		"WARMCACHE_BREAKER_THRESHOLD": "1000000",
		// The default deadline, which the faults exceed.
		"WARMCACHE_HOT_TIMEOUT":         "50ms",
		"WARMCACHE_CONSISTENCY_SAMPLES": strconv.Itoa(samples),
	}
	in := startInstance(t, "warmcache", &proxied, rig.rp.Addr(), "lin-"+testenv.RandomSuffix(t)+":", cfg)
	return rig, in, d.connect(t)
}

// calm ends every fault: the proxies pass traffic at once again.
func (f *faultRig) calm() {
	f.rp.Resume()
	f.rp.SetLatency(0, 0)
	if f.pp != nil {
		f.pp.SetLatency(0, 0)
	}
}

// report logs the faults of the run and how many Redis updates and fills
// of in failed.
func (f *faultRig) report(t *testing.T, label string, in *instance, desc string) {
	t.Helper()
	f.rec.mu.Lock()
	for _, n := range f.rec.notes {
		t.Logf("+%v %s", time.Duration(n.Start).Round(time.Millisecond), n.Description)
	}
	f.rec.mu.Unlock()
	t.Logf("%s (%s): %.0f Redis updates and fills failed", label, desc, failedUpdates(t, in))
}

// failedUpdates returns how many of in's Redis updates of writes and fills
// of reads failed.
func failedUpdates(t *testing.T, in *instance) float64 {
	t.Helper()
	return in.counter(t, `warmcache_cache_fills_total{namespace="`+nsName+`",reason="write",result="error"}`) +
		in.counter(t, `warmcache_cache_fills_total{namespace="`+nsName+`",reason="read",result="error"}`)
}

// checkMonitor reports what the instance's consistency monitor counted by
// age, and fails on an entry it found inconsistent, beyond one per write of
// unknown outcome: through one instance, no cache the instance serves may
// hold a version older than the warehouse's, except for a write answered
// 5xx that committed (the caches keep the previous version until a change
// or a repair replaces it, which the history allows).
func checkMonitor(t *testing.T, label string, in *instance, unknown int) {
	t.Helper()
	var parts []string
	for _, age := range []string{"1s", "10s", "1m0s"} {
		for _, tier := range []string{"redis", "near"} {
			series := func(result string) float64 {
				return in.counter(t, `warmcache_consistency_checks_total{age="`+age+`",result="`+result+`",tier="`+tier+`"}`)
			}
			ok, bad, errs := series("consistent"), series("inconsistent"), series("error")
			if ok+bad+errs == 0 {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s at %s: %.0f consistent, %.0f inconsistent, %.0f errors", tier, age, ok, bad, errs))
			if bad > float64(unknown) {
				t.Errorf("%s: the consistency monitor found %.0f %s entries inconsistent at %s, with %d writes of unknown outcome",
					label, bad, tier, age, unknown)
			}
		}
	}
	t.Logf("%s: consistency monitor: %s", label, strings.Join(parts, "; "))
}

// checkOwnReads fails the test on reads through the one instance that go
// back in time on their own: a read of a client that answered a version
// older than the client's own acknowledged PUT of the key
// (read-your-writes), and a read that answered a version older than a read
// of the key that ended before it began (an ETag regression). The
// linearizability check implies both; these name the break.
func checkOwnReads(t *testing.T, label string, rec *recorder) {
	t.Helper()
	ops := rec.history()
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	ms := func(ns int64) string { return fmt.Sprintf("%.1fms", float64(ns)/1e6) }
	type own struct {
		version int64
		at      int64
	}
	mine := map[[2]int]own{} // client, key → its last acknowledged PUT
	var ryw, regress []string
	byKey := map[int][]porcupine.Operation{}
	for _, op := range ops {
		in, out := op.Input.(kvInput), op.Output.(kvOutput)
		ck := [2]int{op.ClientId, in.Key}
		switch {
		case in.Kind == opGet && out.Status == 200:
			byKey[in.Key] = append(byKey[in.Key], op)
			if o, ok := mine[ck]; ok && out.Version < o.version {
				ryw = append(ryw, fmt.Sprintf("client %d key %d: GET [%s, %s] answered v%d (%s) after its own PUT acknowledged at v%d (%s)",
					op.ClientId, in.Key, ms(op.Call), ms(op.Return), out.Version, out.Cache, o.version, ms(o.at)))
			}
		case (in.Kind == opPut || in.Kind == opCPut) && !out.Unknown && out.Status == 200:
			mine[ck] = own{out.Version, op.Return}
		case in.Kind == opDelete || out.Unknown:
			delete(mine, ck)
		}
	}
	for key, reads := range byKey {
		ended := slices.Clone(reads)
		slices.SortFunc(ended, func(a, b porcupine.Operation) int { return int(a.Return - b.Return) })
		var best *porcupine.Operation // the newest read that ended so far
		j := 0
		for _, r := range reads {
			for ; j < len(ended) && ended[j].Return < r.Call; j++ {
				if best == nil || ended[j].Output.(kvOutput).Version > best.Output.(kvOutput).Version {
					best = &ended[j]
				}
			}
			if out := r.Output.(kvOutput); best != nil && out.Version < best.Output.(kvOutput).Version {
				regress = append(regress, fmt.Sprintf("key %d: GET [%s, %s] answered v%d (%s), after a GET [%s, %s] answered v%d (%s)",
					key, ms(r.Call), ms(r.Return), out.Version, out.Cache, ms(best.Call), ms(best.Return),
					best.Output.(kvOutput).Version, best.Output.(kvOutput).Cache))
			}
		}
	}
	report := func(kind string, list []string) {
		for i, s := range list {
			if i == 10 {
				t.Errorf("%s: ... and %d more %s", label, len(list)-i, kind)
				break
			}
			t.Errorf("%s: %s: %s", label, kind, s)
		}
	}
	report("read-your-writes break", ryw)
	report("ETag regression", regress)
	t.Logf("%s: %d read-your-writes breaks, %d ETag regressions", label, len(ryw), len(regress))
}
