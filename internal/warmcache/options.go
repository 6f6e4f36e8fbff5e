package warmcache

import "time"

// Options bound the service's work. The zero value of each field selects the
// default in its comment.
type Options struct {
	// HotTimeout bounds one hot-tier call. Zero means 50ms.
	HotTimeout time.Duration
	// WarmTimeout bounds one warehouse call. Zero means 2s.
	WarmTimeout time.Duration
	// MaxWarmInflight bounds concurrent warehouse reads; a read that cannot
	// start within WarmTimeout fails with ErrOverloaded. Zero means 32.
	MaxWarmInflight int
	// MaxBatchKeys bounds the keys of one MGet. Zero means 1000.
	MaxBatchKeys int
	// MaxResponseBytes bounds the values of one MGet answer; an MGet over
	// it fails with ErrTooLarge once the values read so far pass it. Zero
	// means 16 MiB.
	MaxResponseBytes int
	// MaxValueBytes bounds a stored value. Zero means 1 MiB.
	MaxValueBytes int
	// MaxValueDepth bounds the nesting of a stored value. Zero means 64.
	MaxValueDepth int
	// BreakerThreshold is the number of consecutive warehouse failures that
	// open the circuit breaker. Zero means 5.
	BreakerThreshold int
	// BreakerCooldown is how long an open breaker refuses warehouse calls
	// before it lets one through; it doubles while that call fails, up to
	// 30 times its first value. Zero means 1s.
	BreakerCooldown time.Duration
	// MaxRefreshes bounds concurrent background revalidations of stale
	// entries; a stale entry met while all are busy is served and left for
	// a later request to refresh. Zero means 8.
	MaxRefreshes int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Near is the in-process near cache, used for namespaces whose NearTTL
	// is set. Nil means none.
	Near Near
	// Invalidations carries writes to other instances' near caches. Nil
	// means this instance is alone.
	Invalidations Invalidations
	// Sampler is told of every hot-tier update that lands, for an online
	// consistency check. Nil means none.
	Sampler Sampler
	// Generations moves a namespace to a new generation, for Invalidate
	// of a whole namespace. Nil means that Invalidate cannot do it.
	Generations Generations
	// MaxBatchFold bounds how many concurrent single-key reads are folded
	// into one Redis pipeline or one warehouse `= ANY($1)` query. Zero means
	// 64; one turns folding off, so that every read makes its own round trip.
	MaxBatchFold int
	// MaxLoads bounds the bulk loads in progress at once, over every
	// transport; a load over the bound fails at once with ErrOverloaded.
	// Zero means 4.
	MaxLoads int
	// MaxLoadWrites bounds the loads writing to the warehouse at once, each
	// on one connection; the others wait without one. Zero means 2.
	MaxLoadWrites int
	// MaxLoadBytes bounds the keys and values of one load, which are
	// spooled to disk before the warehouse sees them. Zero means 64 MiB;
	// negative means no bound.
	MaxLoadBytes int64
	// SpoolDir is where loads are spooled, in unlinked files. Empty means
	// os.TempDir().
	SpoolDir string
	// DirectLoads streams a load into the warehouse as its source is read,
	// holding a connection meanwhile, instead of spooling it first. Only
	// for trusted local sources, such as the load command's file.
	DirectLoads bool
	// CursorKey signs the cursors of Query, so that a client cannot forge
	// one. Instances behind one load balancer need the same key. Nil means
	// a random key per process: a cursor is then valid only on the
	// instance that issued it, until it restarts.
	CursorKey []byte
	// Tracer marks the core's steps in the request's trace. Nil means no
	// tracing, at the cost of one comparison per step.
	Tracer Tracer
	// TombstoneTTL is the least life of the absent entry that a delete
	// leaves in the hot tier, so that a slow reader holding an older
	// version cannot refill the key after the delete. It must exceed
	// WarmTimeout. Zero means 30s.
	TombstoneTTL time.Duration
	// WarmLanes bounds the folded warehouse reads a namespace runs at once;
	// reads that arrive while all lanes are busy wait and go together in the
	// next query. One lane makes the largest queries, and so the cheapest
	// miss where the warehouse answers within a millisecond or so; a slow
	// warehouse (each query takes many milliseconds, as Greenplum's do)
	// needs more, since a lane reads at most MaxBatchFold keys per query.
	// Zero means 1.
	WarmLanes int
	// WriteFold bounds how many concurrent single writes of distinct keys
	// go to the warehouse together, in one round trip and one commit (see
	// Folder). Zero means 64; one turns folding off, so that every write
	// makes its own round trip and commit.
	WriteFold int
	// WriteLanes bounds the folded writes a namespace runs at once; writes
	// that arrive while all lanes are busy wait and go together in the
	// next one. Zero means 2.
	WriteLanes int
	// WriteFoldWait, when positive, is how long a write lane that is free
	// while another one's writes are in the warehouse waits for WriteFold
	// writes before it sends what it has. With no other write in the
	// warehouse a write never waits. Zero means no wait.
	WriteFoldWait time.Duration
	// HotLanes bounds the folded hot-tier reads a namespace runs at once;
	// reads that arrive while all lanes are busy wait and go together in
	// the next pipeline. Zero means 2.
	HotLanes int
	// HotLaneSpill, when positive, lets a read that finds every hot lane
	// busy, and no pipeline sent for longer than this, start one more
	// lane, up to 4×HotLanes, while Redis is slow to answer (its shortest
	// pipeline of the last second or two took longer than this): Redis a
	// network hop away is then waited for once, not for a lane and again
	// for the read's own pipeline (see batcher). Zero means
	// DefaultHotLaneSpill; negative turns it off.
	HotLaneSpill time.Duration
	// SweepInterval is how often RunSweeper deletes the rows whose expiry
	// has passed. Zero means a second; negative turns the sweeper off
	// (expired rows still read as absent).
	SweepInterval time.Duration
	// SweepBatch bounds the rows one sweeper transaction deletes. Zero
	// means 500.
	SweepBatch int
	// SweepMaxIdle bounds the sweeper's rest on a namespace where it
	// finds nothing to delete: each empty sweep doubles the wait from
	// SweepInterval up to this bound, and a write through this service
	// that sets an expiry brings it back to SweepInterval at once. Zero
	// means a minute; below SweepInterval means SweepInterval.
	SweepMaxIdle time.Duration
}

// The defaults of Options: what a zero field means. The exported ones are
// also the defaults of the service's flags (see package config) and of
// the transports' bounds.
const (
	DefaultHotTimeout       = 50 * time.Millisecond
	DefaultWarmTimeout      = 2 * time.Second
	DefaultMaxWarmInflight  = 32
	DefaultMaxBatchKeys     = 1000
	DefaultMaxResponseBytes = 16 << 20
	DefaultMaxValueBytes    = 1 << 20
	DefaultBreakerThreshold = 5
	DefaultBreakerCooldown  = time.Second
	DefaultMaxLoads         = 4
	DefaultMaxLoadBytes     = 64 << 20
	DefaultWarmLanes        = 1
	DefaultHotLanes         = 2
	DefaultHotLaneSpill     = 200 * time.Microsecond
	hotSpillLanesPerLane    = 4
	DefaultWriteFold        = 64
	DefaultWriteLanes       = 2
	DefaultWriteFoldWait    = time.Duration(0)
	defaultMaxValueDepth    = 64
	defaultMaxRefreshes     = 8
	defaultMaxBatchFold     = 64
	defaultMaxLoadWrites    = 2
	defaultTombstoneTTL     = 30 * time.Second
)

// DefaultLoadIdleTimeout is how long the transports wait for the next
// part of a load's body before they cut it off, when they are given no
// bound of their own.
const DefaultLoadIdleTimeout = 30 * time.Second

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.HotTimeout <= 0 {
		o.HotTimeout = DefaultHotTimeout
	}
	if o.WarmTimeout <= 0 {
		o.WarmTimeout = DefaultWarmTimeout
	}
	def(&o.MaxWarmInflight, DefaultMaxWarmInflight)
	def(&o.MaxBatchKeys, DefaultMaxBatchKeys)
	def(&o.MaxValueBytes, DefaultMaxValueBytes)
	def(&o.MaxResponseBytes, DefaultMaxResponseBytes)
	def(&o.MaxValueDepth, defaultMaxValueDepth)
	def(&o.BreakerThreshold, DefaultBreakerThreshold)
	def(&o.MaxRefreshes, defaultMaxRefreshes)
	def(&o.MaxBatchFold, defaultMaxBatchFold)
	def(&o.WarmLanes, DefaultWarmLanes)
	def(&o.HotLanes, DefaultHotLanes)
	if o.HotLaneSpill == 0 {
		o.HotLaneSpill = DefaultHotLaneSpill
	}
	def(&o.WriteFold, DefaultWriteFold)
	def(&o.WriteLanes, DefaultWriteLanes)
	def(&o.MaxLoads, DefaultMaxLoads)
	def(&o.MaxLoadWrites, defaultMaxLoadWrites)
	if o.MaxLoadBytes == 0 {
		o.MaxLoadBytes = DefaultMaxLoadBytes
	}
	if o.TombstoneTTL <= 0 {
		o.TombstoneTTL = defaultTombstoneTTL
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = DefaultBreakerCooldown
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	def(&o.SweepBatch, DefaultSweepBatch)
	if o.SweepMaxIdle <= 0 {
		o.SweepMaxIdle = DefaultSweepMaxIdle
	}
	o.SweepMaxIdle = max(o.SweepMaxIdle, o.SweepInterval)
	return o
}
