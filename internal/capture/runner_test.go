package capture

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// fakeStore is a warehouse for Start: the poll's queries and the
// generations.
type fakeStore struct {
	*fakePollStore
	*fakeGenerationStore
}

var _ Store = fakeStore{}

type startTest struct {
	items  *warmcache.Namespace
	store  fakeStore
	apply  *fakeApplier
	gens   *Generations
	reg    *prometheus.Registry
	log    *syncBuffer
	runner *Runner
}

func start(t *testing.T, opts Options) *startTest {
	t.Helper()
	st := &startTest{store: fakeStore{newFakePollStore(), &fakeGenerationStore{}}, apply: &fakeApplier{},
		reg: prometheus.NewRegistry(), log: &syncBuffer{}}
	st.items, _ = testNamespaces()
	hot := &hotGenerations{}
	var err error
	st.gens, err = NewGenerations(st.store, []*warmcache.Namespace{st.items}, hot.move, nil, st.reg, testLog(nil))
	if err != nil {
		t.Fatal(err)
	}
	st.runner, err = Start(context.Background(), opts, []*warmcache.Namespace{st.items}, st.store, st.apply, st.gens, st.reg, testLog(st.log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.runner.Stop)
	return st
}

func (st *startTest) modes(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range modes {
		out[m] = promregtest.Value(t, st.reg, "warmcache_freshness_mode", "mode", m)
	}
	return out
}

func wantMode(t *testing.T, st *startTest, mode string) {
	t.Helper()
	if got := st.runner.Mode(); got != mode {
		t.Errorf("Mode() = %q, want %q", got, mode)
	}
	for m, v := range st.modes(t) {
		want := 0.0
		if m == mode {
			want = 1
		}
		if v != want {
			t.Errorf("warmcache_freshness_mode{mode=%q} = %v, want %v", m, v, want)
		}
	}
}

func TestStartOff(t *testing.T) {
	st := start(t, Options{Mode: Off, PostgreSQL: true, ReplicationDSN: "postgres://nowhere"})
	wantMode(t, st, ModeOff)
	st.runner.Stop()
	if n := st.store.count("Newest"); n != 0 {
		t.Errorf("the warehouse polled %d times with change capture off", n)
	}
	if got := promregtest.Value(t, st.reg, "warmcache_poll_age_seconds"); got != 0 {
		t.Errorf("poll age = %v when not polling, want 0", got)
	}
}

// Without change capture, Start polls, and says why at a level that
// matches what was asked for.
func TestStartFallsBackToPolling(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		level string
		why   string
	}{
		{name: "auto on Greenplum", opts: Options{}, level: "INFO", why: "Greenplum"},
		{name: "auto on PostgreSQL without a replication DSN", opts: Options{PostgreSQL: true}, level: "WARN", why: "no replication DSN"},
		{name: "capture without a replication DSN", opts: Options{Mode: Capture, PostgreSQL: true}, level: "ERROR", why: "no replication DSN"},
		{name: "capture on Greenplum", opts: Options{Mode: Capture, ReplicationDSN: "postgres://gp"}, level: "ERROR", why: "Greenplum"},
		{name: "capture with a DSN that does not parse", opts: Options{Mode: Capture, PostgreSQL: true, ReplicationDSN: "postgres://%zz"},
			level: "ERROR", why: "parse the replication DSN"},
		{name: "auto with a server that refuses connections", opts: Options{PostgreSQL: true, ReplicationDSN: "postgres://warmcache@127.0.0.1:1/warmcache?connect_timeout=5"},
			level: "WARN", why: "connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.PollInterval = time.Hour
			st := start(t, tc.opts)
			wantMode(t, st, ModePoll)
			var line string
			for l := range strings.Lines(st.log.String()) {
				if strings.Contains(l, "change capture is not available") {
					line = l
				}
			}
			if !strings.Contains(line, "level="+tc.level) || !strings.Contains(line, tc.why) {
				t.Errorf("logged %q, want a line at %s that says %q", line, tc.level, tc.why)
			}
		})
	}
}

// In poll mode the Runner polls the namespaces and applies what changed
// until it is stopped.
func TestStartPolls(t *testing.T) {
	items, _ := testNamespaces()
	store := fakeStore{newFakePollStore(), &fakeGenerationStore{}}
	store.write("items", "1", 1)
	store.onCall = func(method string) {
		if method == "Changed" {
			store.onCall = nil
			store.write("items", "2", 2) // after the poll took its start
		}
	}
	applied := make(chan struct{}, 1)
	apply := &fakeApplier{fail: func(_ int, _ *warmcache.Namespace, changes []warmcache.Change) error {
		if len(changes) > 0 {
			select {
			case applied <- struct{}{}:
			default:
			}
		}
		return nil
	}}
	reg := prometheus.NewRegistry()
	gens, err := NewGenerations(store, []*warmcache.Namespace{items}, (&hotGenerations{}).move, nil, reg, testLog(nil))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Start(context.Background(), Options{Mode: Poll, PollInterval: time.Millisecond}, []*warmcache.Namespace{items}, store, apply, gens, reg, testLog(nil))
	if err != nil {
		t.Fatal(err)
	}
	<-applied
	r.Stop()
	appliedOnce(t, apply, "items", refresh(items, "2", 2))
	if r.Mode() != ModePoll {
		t.Errorf("Mode() = %q, want poll", r.Mode())
	}
}

// Start stops at metrics it cannot register, before it starts anything.
func TestStartRegistersItsMetrics(t *testing.T) {
	st := start(t, Options{Mode: Off})
	_, err := Start(context.Background(), Options{Mode: Off}, nil, st.store, st.apply, st.gens, st.reg, testLog(nil))
	if err == nil {
		t.Fatal("Start registered its metrics twice on one registry")
	}
	families, err := st.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if name := f.GetName(); !strings.HasPrefix(name, "warmcache_") {
			t.Errorf("metric %s lacks the warmcache_ prefix", name)
		}
	}
	problems, err := testutil.GatherAndLint(st.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

// The lag is the age of the oldest transaction pending, else the lag of
// the last one applied, and zero once caught up.
func TestMetricsLag(t *testing.T) {
	m, reg := testMetrics(t)
	lag := func() float64 { return promregtest.Value(t, reg, "warmcache_change_capture_lag_seconds") }
	if got := lag(); got != 0 {
		t.Errorf("lag before any transaction = %v, want 0", got)
	}
	now := time.Now()
	m.pending(now.Add(-time.Hour))
	m.pending(now.Add(-time.Minute)) // a later one: the oldest counts
	if got := lag(); got < 3600 || got > 2*3600 {
		t.Errorf("lag with a transaction an hour old pending = %v, want about 3600", got)
	}
	m.caughtUp() // not while one is pending
	if got := lag(); got < 3600 {
		t.Errorf("lag after caughtUp with one pending = %v, want about 3600", got)
	}
	m.applied(now.Add(-time.Minute))
	if got := lag(); got < 60 || got > 3600 {
		t.Errorf("lag after applying a transaction a minute old = %v, want about 60", got)
	}
	m.applied(now.Add(time.Hour)) // a commit clock ahead of this one
	if got := lag(); got != 0 || math.Signbit(got) {
		t.Errorf("lag of a commit in the future = %v, want 0", got)
	}
	m.applied(now.Add(-time.Minute))
	m.caughtUp()
	if got := lag(); got != 0 {
		t.Errorf("lag once caught up = %v, want 0", got)
	}
	if got := promregtest.Value(t, reg, "warmcache_change_capture_apply_lag_seconds"); got != 3 {
		t.Errorf("%v transactions observed, want 3", got)
	}
}

// A zero Options means what the service's flags default to.
func TestZeroOptionsAreTheFlagDefaults(t *testing.T) {
	for _, d := range []struct {
		flag      string
		zero, def any
	}{
		{"freshness", defaultMode, config.DefaultCaptureMode},
		{"poll-interval", defaultPollInterval, config.DefaultPollInterval},
		{"poll-overlap", defaultPollOverlap, config.DefaultPollOverlap},
	} {
		if d.zero != d.def {
			t.Errorf("the zero value means %v, --%s defaults to %v", d.zero, d.flag, d.def)
		}
	}
}
