// Package capture keeps the caches in step with writes that bypass the
// service: batch loads, ETL jobs, other services, a DBA's UPDATE.
//
//   - On PostgreSQL with wal_level = logical it captures changes: it reads a
//     logical replication slot with pgoutput (github.com/jackc/pglogrepl) over
//     the publication that `warmcache migrate up` creates, and applies each
//     committed transaction to Redis before it confirms the slot's position.
//     One instance holds the slot; the others stand by.
//   - On Greenplum, and on PostgreSQL without logical replication, it polls:
//     an indexed watermark on each namespace's version column, with an
//     overlap window, and the delete log.
//   - Everywhere, every instance follows the namespace generations in the
//     warehouse: a bump retires every cached entry of a namespace in one step.
package capture

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// Modes of Options.Mode.
const (
	// Auto captures changes on PostgreSQL when the server allows it, and
	// polls otherwise.
	Auto = "auto"
	// Capture is Auto that says so loudly when it has to poll.
	Capture = "capture"
	// Poll always polls.
	Poll = "poll"
	// Off does neither: entries live their TTL.
	Off = "off"
)

// What the zero values of Options mean.
const (
	defaultMode         = Auto
	defaultSlot         = "warmcache"
	defaultPollInterval = time.Second
	defaultPollOverlap  = 10 * time.Second
)

// Options configure a Runner. The zero value of each field selects the
// default in its comment.
type Options struct {
	// Mode is auto, capture, poll or off. Empty means auto.
	Mode string
	// PostgreSQL says that the warehouse is PostgreSQL, where changes can
	// be captured; false means Greenplum, which is polled.
	PostgreSQL bool
	// ReplicationDSN reaches PostgreSQL directly (replication connections
	// cannot pass PgBouncer). Empty means no change capture.
	ReplicationDSN string
	// Slot names the deployment's replication slot. Empty means
	// "warmcache".
	Slot string
	// PollInterval is the time between two polls, and between two reads of
	// the generations. Zero means 1s.
	PollInterval time.Duration
	// PollOverlap is how far back in time each poll reads again, for
	// transactions that commit after one with a higher version. Zero means
	// 10s.
	PollOverlap time.Duration
	// RetryInterval is how often a standby instance tries to take the slot,
	// and how soon a broken stream is taken up again. Zero means 1s.
	RetryInterval time.Duration
}

// Store is what change capture reads from the warehouse.
type Store interface {
	PollStore
	GenerationStore
}

// Runner keeps the caches in step until it is stopped.
type Runner struct {
	mode   string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start starts keeping the managed namespaces in step, in the mode that opts
// and the server allow, and gens in step with the warehouse. managed are
// the namespaces whose tables migrate manages: only those have the version
// index, the delete triggers and the publication that change capture reads. It
// logs which mode it chose and why. The error reports metrics that cannot be
// registered.
func Start(ctx context.Context, opts Options, managed []*warmcache.Namespace, store Store, apply Applier, gens *Generations, reg prometheus.Registerer, log *slog.Logger) (*Runner, error) {
	if opts.Mode == "" {
		opts.Mode = defaultMode
	}
	if opts.Slot == "" {
		opts.Slot = defaultSlot
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = defaultPollInterval
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Second
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Runner{cancel: cancel}
	r.wg.Go(func() { gens.Run(ctx, opts.PollInterval) })

	mode := opts.Mode
	if mode == Auto || mode == Capture {
		why := captureUnavailable(ctx, opts)
		if why == nil {
			mode = Capture
		} else {
			level := slog.LevelInfo
			switch {
			case opts.Mode == Capture:
				level = slog.LevelError
			case opts.PostgreSQL:
				level = slog.LevelWarn
			}
			log.Log(ctx, level, "capture: change capture is not available; polling instead",
				slog.String("why", why.Error()), slog.Duration("interval", opts.PollInterval))
			mode = Poll
		}
	}
	switch mode {
	case Capture:
		c := newCapture(opts.ReplicationDSN, opts.Slot, time.Second, opts.RetryInterval, managed, apply, gens, m, m.setMode, log)
		m.setMode(ModeStandby)
		// A slot created now bumps the generations before this instance
		// serves, not while it does.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := c.prepare(pctx); err != nil && !errors.Is(err, errStandby) {
			log.Warn("capture: replication slot not prepared; retrying in the background", slog.Any("err", err))
		}
		cancel()
		r.mode = ModeCapture
		r.wg.Go(func() { c.run(ctx) })
	case Poll:
		p := newPoller(store, apply, managed, opts.PollInterval, opts.PollOverlap, m, log)
		m.setMode(ModePoll)
		r.mode = ModePoll
		log.Info("capture: polling for changes", slog.Duration("interval", opts.PollInterval))
		r.wg.Go(func() { p.Run(ctx) })
	default:
		m.setMode(ModeOff)
		r.mode = ModeOff
		log.Info("capture: off; entries written outside the service are served until their TTL ends")
	}
	return r, nil
}

// captureUnavailable says why changes cannot be captured, nil when they can.
func captureUnavailable(ctx context.Context, opts Options) error {
	switch {
	case !opts.PostgreSQL:
		return errors.New("the warehouse is Greenplum, which has no logical replication")
	case opts.ReplicationDSN == "":
		return errors.New("no replication DSN (set --replication-dsn to reach PostgreSQL directly: replication does not pass PgBouncer)")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return checkCapture(cctx, opts.ReplicationDSN)
}

// Mode returns the mode the Runner started in: capture (holding or
// waiting for the slot), poll or off.
func (r *Runner) Mode() string { return r.mode }

// Stop stops the Runner and waits for it.
func (r *Runner) Stop() {
	r.cancel()
	r.wg.Wait()
}
