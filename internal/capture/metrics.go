package capture

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/promreg"
)

// The modes a Runner reports in warmcache_freshness_mode.
const (
	ModeCapture = "capture" // this instance holds the slot and applies the stream
	ModeStandby = "standby" // another instance holds the slot; this one waits to take over
	ModePoll    = "poll"    // watermark polling
	ModeOff     = "off"     // nothing: entries live their TTL
)

var modes = []string{ModeCapture, ModeStandby, ModePoll, ModeOff}

// metrics are the change capture metrics of one instance.
type metrics struct {
	changes     *prometheus.CounterVec
	applyLag    prometheus.Histogram
	walRetained prometheus.Gauge
	mode        *prometheus.GaugeVec
	slotResets  *prometheus.CounterVec

	// pendingSince is the commit time (unix nanoseconds) of the oldest
	// transaction received but not yet applied, zero when none; lastLag is
	// the float64 bits of the lag of the last applied one.
	pendingSince atomic.Int64
	lastLag      atomic.Uint64
	pollFn       atomic.Pointer[func() float64]
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_freshness_changes_total",
			Help: "Changes made outside the service and applied to the caches, by namespace, source (capture, poll) and kind (upsert, delete, refresh).",
		}, []string{"namespace", "source", "kind"}),
		applyLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warmcache_change_capture_apply_lag_seconds",
			Help:    "Time from a transaction's commit in PostgreSQL to its changes applied in Redis, per transaction.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		walRetained: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warmcache_change_capture_wal_retained_bytes",
			Help: "WAL that PostgreSQL keeps for the replication slot (current WAL position minus the slot's restart position), reported by the instance that holds the slot.",
		}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmcache_freshness_mode",
			Help: "1 for the way this instance learns of writes that bypass the cache: capture (holds the slot), standby, poll or off.",
		}, []string{"mode"}),
		slotResets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_change_capture_slot_resets_total",
			Help: "Replication slots created, by reason (created: there was none, lost: invalidated by max_slot_wal_keep_size); each bumps every namespace's generation.",
		}, []string{"reason"}),
	}
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warmcache_change_capture_lag_seconds",
		Help: "How far Redis is behind PostgreSQL's commits: the age of the oldest committed transaction not yet applied, or the lag of the last one applied.",
	}, m.lagNow)
	poll := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warmcache_poll_age_seconds",
		Help: "Time since the start of the last complete watermark poll; a change is applied at most this long (plus one poll) after it commits. 0 when not polling.",
	}, func() float64 {
		if f := m.pollFn.Load(); f != nil {
			return (*f)()
		}
		return 0
	})
	for _, mode := range modes {
		m.mode.WithLabelValues(mode).Set(0)
	}
	if err := promreg.Register(reg, "capture", m.changes, m.applyLag, m.walRetained, m.mode, m.slotResets, lag, poll); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) setMode(mode string) {
	for _, x := range modes {
		v := 0.0
		if x == mode {
			v = 1
		}
		m.mode.WithLabelValues(x).Set(v)
	}
}

func (m *metrics) pollAge(f func() float64) { m.pollFn.Store(&f) }

func (m *metrics) lagNow() float64 {
	if p := m.pendingSince.Load(); p != 0 {
		return max(0, time.Since(time.Unix(0, p)).Seconds())
	}
	return math.Float64frombits(m.lastLag.Load())
}

// pending records the commit time of a transaction received and not yet
// applied, unless an older one is pending.
func (m *metrics) pending(commit time.Time) {
	m.pendingSince.CompareAndSwap(0, commit.UnixNano())
}

// applied records a transaction applied with its commit time.
func (m *metrics) applied(commit time.Time) {
	lag := max(0, time.Since(commit).Seconds())
	m.applyLag.Observe(lag)
	m.lastLag.Store(math.Float64bits(lag))
	m.pendingSince.Store(0)
}

// caughtUp records that nothing is pending and the server has nothing
// newer.
func (m *metrics) caughtUp() {
	if m.pendingSince.Load() == 0 {
		m.lastLag.Store(0)
	}
}
