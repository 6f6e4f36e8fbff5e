// Package rediscache is the hot tier over Redis: standalone, Sentinel or
// Cluster, through go-redis. Each entry is one Redis string that carries its
// version, and a fill that finds an entry cached goes through a Lua script
// that refuses to replace a newer version, so a slow reader cannot store a
// value that a later write replaced or deleted. A fill that finds nothing
// cached (the common case after a miss) is a plain SET NX.
//
// Keys are <prefix><namespace>:<key>, with no hash tag: every command touches
// one key, so a namespace's keys can spread over all the slots of a Cluster.
// Batches are pipelines, which go-redis splits by node.
package rediscache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/promreg"
	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Hot = (*Cache)(nil)

// Options configure a Cache. The zero value of each field selects the default
// in its comment; a negative duration also selects the default.
type Options struct {
	// Addrs are the host:port addresses of Redis. One address is a
	// standalone server; several are the seed nodes of a Cluster; with
	// MasterName they are Sentinels. Empty means 127.0.0.1:6379.
	Addrs []string
	// MasterName is the Sentinel master name. Empty means no Sentinel.
	MasterName string
	// Username and Password authenticate with Redis ACLs (or requirepass,
	// with Username empty). Empty means no authentication.
	Username string
	Password string
	// DB is the database to select. Standalone and Sentinel only; Cluster
	// has database 0 only. Zero means database 0.
	DB int
	// Prefix starts every key: keys are <Prefix><namespace>:<key>. Zero
	// means "wc:". On Cluster a prefix with a {hash tag} would put every key
	// in one slot, so it should have none.
	Prefix string
	// PoolSize is the number of connections per Redis node. Zero means
	// go-redis's default, 10 per GOMAXPROCS.
	PoolSize int
	// DialTimeout bounds opening a connection. Zero means 200ms.
	DialTimeout time.Duration
	// ReadTimeout bounds waiting for a reply. Zero means 100ms.
	ReadTimeout time.Duration
	// WriteTimeout bounds sending a command. Zero means 100ms.
	WriteTimeout time.Duration
	// The deadline of the caller's context applies on top of these three
	// timeouts, and the earlier one wins.

	// Instrument is called with the client once it is built, to add hooks
	// such as OpenTelemetry tracing; an error fails New. Nil means none.
	Instrument func(redis.UniversalClient) error
}

// What the zero values of Options mean.
const (
	defaultAddr         = "127.0.0.1:6379"
	defaultPrefix       = "wc:"
	defaultDialTimeout  = 200 * time.Millisecond
	defaultReadTimeout  = 100 * time.Millisecond
	defaultWriteTimeout = 100 * time.Millisecond
)

func (o Options) withDefaults() Options {
	dur := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	if len(o.Addrs) == 0 {
		o.Addrs = []string{defaultAddr}
	}
	if o.Prefix == "" {
		o.Prefix = defaultPrefix
	}
	dur(&o.DialTimeout, defaultDialTimeout)
	dur(&o.ReadTimeout, defaultReadTimeout)
	dur(&o.WriteTimeout, defaultWriteTimeout)
	return o
}

// Cache is the hot tier over Redis. It implements warmcache.Hot and is safe
// for concurrent use.
type Cache struct {
	client redis.UniversalClient
	fill   *redis.Script
	prefix string
	log    *slog.Logger

	errs          *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	unknownFormat *prometheus.CounterVec
	// durations are the duration series of each op, taken once: a call
	// records its duration without looking its label up.
	durations [numOps]prometheus.Observer

	// generations maps a namespace's name to its *atomic.Int64
	// generation; absent means generation 0.
	generations sync.Map

	codecs      *codecs
	undecodable *prometheus.CounterVec
	fillBytes   *prometheus.CounterVec

	// servers counts the Redis server processes met (see Servers); seen
	// holds their run ids, up to maxServersSeen.
	servers atomic.Uint64
	seenMu  sync.Mutex
	seen    map[string]bool
}

// maxServersSeen bounds the run ids a Cache remembers; past it, it forgets
// them all, and counts each server again as new.
const maxServersSeen = 256

// New returns a Cache for the Redis that opts describe and registers its
// metrics on reg (when reg is not nil). It does not contact Redis:
// connections are opened on first use, so the service can start while Redis
// is down. A nil log discards. The error reports metrics that cannot be
// registered.
func New(opts Options, reg prometheus.Registerer, log *slog.Logger) (*Cache, error) {
	opts = opts.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cs, err := newCodecs()
	if err != nil {
		return nil, fmt.Errorf("rediscache: %w", err)
	}
	c := &Cache{
		codecs: cs,
		undecodable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_redis_undecodable_total",
			Help: "Cached values that could not be decoded, by namespace and reason (unknown_dictionary: compressed with a dictionary this instance has not loaded; corrupt: the payload does not decompress); each was served as a miss.",
		}, []string{"namespace", "reason"}),
		fillBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_redis_fill_bytes_total",
			Help: "Bytes of the present values filled, by namespace and form (json: the value; stored: its payload in Redis after the namespace's codec, without the header). json/stored is the codec's compression ratio.",
		}, []string{"namespace", "form"}),
		fill:   redis.NewScript(fillScript),
		prefix: opts.Prefix,
		log:    log,
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_redis_errors_total",
			Help: "Failed Redis calls by op (get, get_many, fill, fill_many, ping). A miss is not an error.",
		}, []string{"op"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmcache_redis_duration_seconds",
			Help:    "Duration of Redis calls by op (get, get_many, fill, fill_many, ping).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"op"}),
		unknownFormat: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_redis_unknown_format_total",
			Help: "Cached values in a format this version cannot read, by namespace; each was served as a miss.",
		}, []string{"namespace"}),
	}
	for o := range numOps {
		c.durations[o] = c.duration.WithLabelValues(o.String())
	}
	if reg != nil {
		if err := promreg.Register(reg, "rediscache", c.errs, c.duration, c.unknownFormat, c.undecodable, c.fillBytes); err != nil {
			return nil, err
		}
	}
	c.client = newClient(opts, c.onConnect)
	if opts.Instrument != nil {
		if err := opts.Instrument(c.client); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("rediscache: instrument the client: %w", err)
		}
	}
	log.Info("redis hot tier configured",
		slog.String("mode", mode(opts)), slog.Any("addrs", opts.Addrs), slog.String("prefix", opts.Prefix))
	return c, nil
}

// newClient returns go-redis's client of opts: one node, Sentinel or
// Cluster, as the addresses and master name say.
func newClient(opts Options, onConnect func(context.Context, *redis.Conn) error) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		OnConnect:             onConnect,
		Addrs:                 opts.Addrs,
		MasterName:            opts.MasterName,
		Username:              opts.Username,
		Password:              opts.Password,
		DB:                    opts.DB,
		PoolSize:              opts.PoolSize,
		DialTimeout:           opts.DialTimeout,
		ReadTimeout:           opts.ReadTimeout,
		WriteTimeout:          opts.WriteTimeout,
		ContextTimeoutEnabled: true,
		// A cache call has a deadline of a few tens of milliseconds and
		// a warehouse behind it, so it fails fast instead of waiting
		// out its deadline between dials: one dial per attempt and one
		// quick retry, which still replaces a connection that Redis
		// closed (after a restart, say).
		DialerRetries:   1,
		MaxRetries:      1,
		MinRetryBackoff: time.Millisecond,
		MaxRetryBackoff: 4 * time.Millisecond,
	})
}

// Servers returns how many Redis server processes the cache has connected
// to, told apart by their run ids: it grows when a server restarts (empty,
// or from a snapshot older than what it lost) or fails over, not when the
// pool opens another connection to the same one. The core does not trust a
// fill that went out while it grew. It is safe for concurrent use.
func (c *Cache) Servers() uint64 { return c.servers.Load() }

// onConnect reads the run id of the server behind a new connection, before
// the connection carries a command, and counts a server not met before.
// A run id that cannot be read counts as a new server.
func (c *Cache) onConnect(ctx context.Context, cn *redis.Conn) error {
	id := ""
	if info, err := cn.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
				id = v
				break
			}
		}
	}
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	if id != "" && c.seen[id] {
		return nil
	}
	if c.seen == nil || len(c.seen) >= maxServersSeen {
		c.seen = map[string]bool{}
	}
	if id != "" {
		c.seen[id] = true
	}
	c.servers.Add(1)
	return nil
}

// mode names the kind of client that go-redis builds for opts.
func mode(opts Options) string {
	switch {
	case opts.MasterName != "":
		return "sentinel"
	case len(opts.Addrs) > 1:
		return "cluster"
	default:
		return "standalone"
	}
}

// Close closes the connections. Calls after Close fail.
func (c *Cache) Close() error {
	c.codecs.close()
	if err := c.client.Close(); err != nil {
		return fmt.Errorf("rediscache: close: %w", err)
	}
	return nil
}

// key returns the Redis key of key in ns: <prefix><namespace>:<key> in
// generation 0, <prefix><namespace>@<generation>:<key> after.
func (c *Cache) key(ns *warmcache.Namespace, key warmcache.Key) string {
	if g, ok := c.generations.Load(ns.Name); ok {
		if gen := g.(*atomic.Int64).Load(); gen > 0 {
			return c.prefix + ns.Name + "@" + strconv.FormatInt(gen, 10) + ":" + key.Text
		}
	}
	return c.prefix + ns.Name + ":" + key.Text
}

// SetGeneration moves the namespace called name to generation gen, unless
// it is there or further already, and reports whether it moved. Every key
// of the namespace is then named with the new generation, so that the
// entries of earlier generations are never read again and expire by their
// TTL: retiring a namespace's entries is this one step, never a scan.
// Every instance must use the same generation (package capture keeps
// them in step through the warehouse). Safe for concurrent use.
func (c *Cache) SetGeneration(name string, gen int64) bool {
	g, _ := c.generations.LoadOrStore(name, new(atomic.Int64))
	cur := g.(*atomic.Int64)
	for {
		old := cur.Load()
		if gen <= old {
			return false
		}
		if cur.CompareAndSwap(old, gen) {
			return true
		}
	}
}

// Generation returns the generation the namespace called name is in.
func (c *Cache) Generation(name string) int64 {
	if g, ok := c.generations.Load(name); ok {
		return g.(*atomic.Int64).Load()
	}
	return 0
}

// op is a kind of Redis call, the op label of its metrics.
type op int

const (
	opGet op = iota
	opGetMany
	opFill
	opFillMany
	opPing
	numOps
)

func (o op) String() string {
	switch o {
	case opGet:
		return "get"
	case opGetMany:
		return "get_many"
	case opFill:
		return "fill"
	case opFillMany:
		return "fill_many"
	case opPing:
		return "ping"
	}
	return "unknown"
}

// observe records the duration of a call of o that started at start and
// counts err, which must not be redis.Nil.
func (c *Cache) observe(o op, start time.Time, err error) {
	c.durations[o].Observe(time.Since(start).Seconds())
	if err != nil {
		c.errs.WithLabelValues(o.String()).Inc()
		c.reloadAfterNodeError(err)
	}
}

// decode reads a stored value, decompresses its payload, and counts it when
// it cannot be read.
func (c *Cache) decode(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key, b []byte) (warmcache.Entry, bool) {
	e, format, ok := decode(b)
	if !ok {
		c.unknownFormat.WithLabelValues(ns.Name).Inc()
		c.log.LogAttrs(ctx, slog.LevelDebug, "redis value in an unknown format is a miss",
			slog.String("namespace", ns.Name), slog.String("key", key.Text), slog.Int("bytes", len(b)))
		return warmcache.Entry{}, false
	}
	if !e.Found || format == formatRaw {
		return e, true
	}
	v, err := c.codecs.decodeValue(ns, format, e.Value)
	if err != nil {
		reason := "corrupt"
		if errors.Is(err, errUnknownDictionary) {
			reason = "unknown_dictionary"
		}
		c.undecodable.WithLabelValues(ns.Name, reason).Inc()
		c.log.LogAttrs(ctx, slog.LevelDebug, "redis value that cannot be decoded is a miss",
			slog.String("namespace", ns.Name), slog.String("key", key.Text), slog.String("reason", reason), slog.Any("error", err))
		return warmcache.Entry{}, false
	}
	e.Value = v
	return e, true
}

// GetMany returns the cached entries of keys: one GET for one key, one
// MGET for several (on Cluster, a pipeline of GETs, one per node). entries and
// hits have the length of keys; hits[i] is false when nothing is cached or
// the value cannot be read: a format this version does not know, a
// dictionary it has not loaded, a damaged payload. A cached absent entry
// is a hit with Found false. The returned Values are the values' bytes,
// decompressed when the namespace's codec compressed them. When a read
// fails, the error (Redis's or the context's, wrapped) is returned with nil
// slices.
func (c *Cache) GetMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, []bool, error) {
	entries := make([]warmcache.Entry, len(keys))
	hits := make([]bool, len(keys))
	if len(keys) == 0 {
		return entries, hits, nil
	}
	start := time.Now()
	if len(keys) == 1 {
		b, err := c.client.Get(ctx, c.key(ns, keys[0])).Bytes()
		if noEntry(err) {
			c.observe(opGet, start, nil)
			return entries, hits, nil
		}
		c.observe(opGet, start, err)
		if err != nil {
			return nil, nil, fmt.Errorf("rediscache: get %q: %w", keys[0].Text, err)
		}
		entries[0], hits[0] = c.decode(ctx, ns, keys[0], b)
		return entries, hits, nil
	}
	values, err := c.getValues(ctx, ns, keys)
	c.observe(opGetMany, start, err)
	if err != nil {
		return nil, nil, fmt.Errorf("rediscache: get %d keys: %w", len(keys), err)
	}
	for i, b := range values {
		if b != nil {
			entries[i], hits[i] = c.decode(ctx, ns, keys[i], b)
		}
	}
	return entries, hits, nil
}

// getValues returns the stored strings of keys, nil where none is stored
// or the key holds another type: one MGET on a standalone or Sentinel
// server, where every key is on the one node and one command costs Redis
// and the client less than a pipeline of GETs (BenchmarkGetManyShape); a
// pipeline of GETs on Cluster, whose client splits it by node (an MGET
// must stay within one slot). The bytes alias the reply's strings and must
// not be written.
func (c *Cache) getValues(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([][]byte, error) {
	values := make([][]byte, len(keys))
	if _, cluster := c.client.(*redis.ClusterClient); !cluster {
		rks := make([]string, len(keys))
		for i, k := range keys {
			rks[i] = c.key(ns, k)
		}
		replies, err := c.client.MGet(ctx, rks...).Result()
		if err != nil {
			return nil, err
		}
		if len(replies) != len(keys) {
			return nil, fmt.Errorf("MGET of %d keys answered %d values", len(keys), len(replies))
		}
		for i, r := range replies {
			if s, ok := r.(string); ok {
				values[i] = unsafe.Slice(unsafe.StringData(s), len(s))
			}
		}
		return values, nil
	}
	pipe := c.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, c.key(ns, k))
	}
	// Exec reports a miss as redis.Nil; each command's own error tells.
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		b, err := cmd.Bytes()
		if noEntry(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		values[i] = b
	}
	return values, nil
}

// noEntry reports whether a GET's error means the key holds no entry of
// the cache: nothing stored, or a value of another type, which is not the
// cache's (an MGET answers both as nil).
func noEntry(err error) bool {
	return errors.Is(err, redis.Nil) || redis.HasErrorPrefix(err, "WRONGTYPE")
}

// FillMany stores each fill for its Keep unless Redis holds an entry of
// the key that wins by version (see fillScript): a newer version, or an
// absent entry at the same version. An equal version otherwise renews the
// entry, and an absent entry with version 0 never replaces a cached row.
// One key takes one SET NX when nothing is cached, and one atomic script
// that compares the versions otherwise (at once when the fill says the key
// is Cached); several go as a pipeline of SET NX (on Cluster, one per
// node) and then one of scripts for the keys that held an entry. Each key is filled on its own: when some fail, the others
// may still be stored, and the error reports the first failure. Errors
// are Redis and context errors, and a negative version, wrapped.
func (c *Cache) FillMany(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) error {
	if len(fills) == 0 {
		return nil
	}
	fl, err := c.filling(ns, fills)
	if err != nil {
		return err
	}
	start := time.Now()
	if len(fills) == 1 {
		err := c.fillOne(ctx, fl.rks[0], fl.values[0], fl.pxs[0], fills[0].Cached, fills[0].Replace)
		c.observe(opFill, start, err)
		if err != nil {
			return fmt.Errorf("rediscache: fill %q: %w", fills[0].Key.Text, err)
		}
		return nil
	}
	err = c.fillPipeline(ctx, fl)
	c.observe(opFillMany, start, err)
	if err != nil {
		return fmt.Errorf("rediscache: fill %d keys: %w", len(fills), err)
	}
	return nil
}

// filling is what a set of fills stores: each fill's Redis key, value and
// lifetime in milliseconds, in the fills' order.
type filling struct {
	fills  []warmcache.Fill
	rks    []string
	values [][]byte
	pxs    []int64
}

// filling returns what fills of ns store.
func (c *Cache) filling(ns *warmcache.Namespace, fills []warmcache.Fill) (filling, error) {
	fl := filling{fills: fills, rks: make([]string, len(fills)), values: make([][]byte, len(fills)), pxs: make([]int64, len(fills))}
	for i, f := range fills {
		var err error
		if fl.values[i], fl.pxs[i], err = c.fillArgs(ns, f); err != nil {
			return fl, err
		}
		fl.rks[i] = c.key(ns, f.Key)
	}
	return fl, nil
}

// script queues on pipe the fill script, by its digest, for fill i of fl.
func (c *Cache) script(ctx context.Context, pipe redis.Pipeliner, fl filling, i int) *redis.Cmd {
	return c.fill.EvalSha(ctx, pipe, []string{fl.rks[i]}, fl.values[i], fl.pxs[i], replaceArg(fl.fills[i].Replace))
}

// settle returns the first error of cmds, the fill scripts run for the
// fills of fl at idx, with the index in fl of the fill it is for. It runs
// the script again by its source, in one pipeline, for the fills whose
// node did not have it cached.
func (c *Cache) settle(ctx context.Context, fl filling, idx []int, cmds []*redis.Cmd) (int, error) {
	var retry []int
	for j, cmd := range cmds {
		err := cmd.Err()
		switch {
		case err == nil:
		case noScript(err):
			retry = append(retry, idx[j])
		default:
			return idx[j], err
		}
	}
	if len(retry) == 0 {
		return 0, nil
	}
	pipe := c.client.Pipeline()
	again := make([]*redis.Cmd, len(retry))
	for j, i := range retry {
		again[j] = c.fill.Eval(ctx, pipe, []string{fl.rks[i]}, fl.values[i], fl.pxs[i], replaceArg(fl.fills[i].Replace))
	}
	_, _ = pipe.Exec(ctx)
	for j, cmd := range again {
		if err := cmd.Err(); err != nil {
			return retry[j], err
		}
	}
	return 0, nil
}

// fillOne stores v under the Redis key rk for px milliseconds unless the
// key holds an entry that wins by version. When the key is not known to be
// cached, a plain SET NX stores it if the key holds nothing, which is the
// common case of a fill after a miss; when it is, or the SET NX found an
// entry, the fill script compares versions. The outcome is the script's in
// every case: with nothing cached, the script stores the entry too.
//
// A fill that only replaces (Fill.Replace) always goes through the script,
// which then stores nothing when the key holds nothing.
func (c *Cache) fillOne(ctx context.Context, rk string, v []byte, px int64, cached, replace bool) error {
	if !cached && !replace {
		stored, err := c.client.SetNX(ctx, rk, v, time.Duration(px)*time.Millisecond).Result()
		if err != nil || stored {
			return err
		}
	}
	return c.fill.Run(ctx, c.client, []string{rk}, v, px, replaceArg(replace)).Err()
}

// replaceArg is the fill script's ARGV[3] for a fill that only replaces, or
// not.
func replaceArg(replace bool) string {
	if replace {
		return "1"
	}
	return "0"
}

// fillPipeline stores the fills not known to be cached with SET NX in one
// pipeline (see fillOne), then runs the fill script, by its digest, in
// one pipeline for the keys known or found to hold an entry, and once more
// by its source for the keys whose node did not have the script cached.
func (c *Cache) fillPipeline(ctx context.Context, fl filling) error {
	var held, tried []int
	var pipe redis.Pipeliner
	var nx []*redis.BoolCmd
	for i, f := range fl.fills {
		if f.Cached || f.Replace {
			held = append(held, i)
			continue
		}
		if pipe == nil {
			pipe = c.client.Pipeline()
		}
		tried = append(tried, i)
		nx = append(nx, pipe.SetNX(ctx, fl.rks[i], fl.values[i], time.Duration(fl.pxs[i])*time.Millisecond))
	}
	if pipe != nil {
		_, _ = pipe.Exec(ctx)
		for j, cmd := range nx {
			stored, err := cmd.Result()
			if err != nil {
				return err
			}
			if !stored {
				held = append(held, tried[j])
			}
		}
	}
	if len(held) == 0 {
		return nil
	}
	pipe = c.client.Pipeline()
	cmds := make([]*redis.Cmd, len(held))
	for j, i := range held {
		cmds[j] = c.script(ctx, pipe, fl, i)
	}
	_, _ = pipe.Exec(ctx)
	_, err := c.settle(ctx, fl, held, cmds)
	return err
}

// noScript reports whether err is Redis's NOSCRIPT error: the node does not
// have the script cached.
func noScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// fillArgs returns what a fill of f stores, and for how many milliseconds
// (at least one).
func (c *Cache) fillArgs(ns *warmcache.Namespace, f warmcache.Fill) ([]byte, int64, error) {
	v, err := c.encodeFill(ns, f.Entry)
	if err != nil {
		return nil, 0, fmt.Errorf("rediscache: fill %q: %w", f.Key.Text, err)
	}
	return v, max(f.Keep.Milliseconds(), 1), nil
}

// encodeFill returns the stored form of e, with the freshness the core
// gave it, and counts the bytes of a present value before and after the
// namespace's codec.
func (c *Cache) encodeFill(ns *warmcache.Namespace, e warmcache.Entry) ([]byte, error) {
	v, err := c.codecs.encodeValue(ns, e)
	if err == nil && e.Found {
		c.fillBytes.WithLabelValues(ns.Name, "json").Add(float64(len(e.Value)))
		c.fillBytes.WithLabelValues(ns.Name, "stored").Add(float64(len(v) - headerSize(e)))
	}
	return v, err
}

// Ping reports whether Redis answers. Errors are Redis and context errors,
// wrapped.
func (c *Cache) Ping(ctx context.Context) error {
	start := time.Now()
	err := c.client.Ping(ctx).Err()
	c.observe(opPing, start, err)
	if err != nil {
		return fmt.Errorf("rediscache: ping: %w", err)
	}
	return nil
}
