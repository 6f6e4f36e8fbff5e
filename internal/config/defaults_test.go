package config_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// flagDefaults is every flag with the constant that is its default:
// config's own, or the core's and the warehouse's, which config imports for
// their types. The flags whose default is the zero value ("none" or "off")
// say so with a zero. A flag missing here fails
// TestFlagDefaultsAreTheirPackagesConstants.
var flagDefaults = map[string]struct {
	got  func(config.Config) any
	want any
}{
	// Config's own.
	"http-addr":           {func(c config.Config) any { return c.HTTP.Addr }, config.DefaultHTTPAddr},
	"grpc-addr":           {func(c config.Config) any { return c.GRPC.Addr }, config.DefaultGRPCAddr},
	"postgres-dsn":        {func(c config.Config) any { return c.Postgres.DSN }, config.DefaultPostgresDSN},
	"near-cache-tracking": {func(c config.Config) any { return c.Near.Tracking }, config.DefaultNearCacheTracking},
	"shutdown-timeout":    {func(c config.Config) any { return c.Server.ShutdownTimeout }, config.DefaultShutdownTimeout},
	"log-level":           {func(c config.Config) any { return c.LogLevel }, config.DefaultLogLevel},

	// Config's own, which the packages that apply them mean by their zero
	// values (each package's tests hold it so).
	"max-inflight":         {func(c config.Config) any { return c.HTTP.MaxInflight }, config.DefaultMaxInflight},
	"consistency-samples":  {func(c config.Config) any { return c.Tiers.ConsistencySamples }, config.DefaultConsistencySamples},
	"redis-addrs":          {func(c config.Config) any { return c.Redis.Addrs }, []string{config.DefaultRedisAddr}},
	"redis-prefix":         {func(c config.Config) any { return c.Redis.Prefix }, config.DefaultRedisPrefix},
	"redis-dial-timeout":   {func(c config.Config) any { return c.Redis.DialTimeout }, config.DefaultRedisDialTimeout},
	"freshness":            {func(c config.Config) any { return c.Capture.Mode }, config.DefaultCaptureMode},
	"poll-interval":        {func(c config.Config) any { return c.Capture.PollInterval }, config.DefaultPollInterval},
	"poll-overlap":         {func(c config.Config) any { return c.Capture.PollOverlap }, config.DefaultPollOverlap},
	"dapr-socket-folder":   {func(c config.Config) any { return c.Dapr.SocketFolder }, config.DefaultDaprSocketFolder},
	"dapr-socket-name":     {func(c config.Config) any { return c.Dapr.SocketName }, config.DefaultDaprSocketName},
	"dapr-max-value-bytes": {func(c config.Config) any { return c.Dapr.MaxValueBytes }, int64(config.DefaultDaprMaxValueBytes)},

	// The core's.
	"hot-timeout":        {func(c config.Config) any { return c.Tiers.HotTimeout }, warmcache.DefaultHotTimeout},
	"warm-timeout":       {func(c config.Config) any { return c.Tiers.WarmTimeout }, warmcache.DefaultWarmTimeout},
	"max-warm-inflight":  {func(c config.Config) any { return c.Tiers.MaxWarmInflight }, warmcache.DefaultMaxWarmInflight},
	"warm-lanes":         {func(c config.Config) any { return c.Tiers.WarmLanes }, warmcache.DefaultWarmLanes},
	"hot-lanes":          {func(c config.Config) any { return c.Tiers.HotLanes }, warmcache.DefaultHotLanes},
	"hot-lane-spill":     {func(c config.Config) any { return c.Tiers.HotLaneSpill }, warmcache.DefaultHotLaneSpill},
	"write-fold":         {func(c config.Config) any { return c.Tiers.WriteFold }, warmcache.DefaultWriteFold},
	"write-lanes":        {func(c config.Config) any { return c.Tiers.WriteLanes }, warmcache.DefaultWriteLanes},
	"write-fold-wait":    {func(c config.Config) any { return c.Tiers.WriteFoldWait }, warmcache.DefaultWriteFoldWait},
	"breaker-threshold":  {func(c config.Config) any { return c.Tiers.BreakerThreshold }, warmcache.DefaultBreakerThreshold},
	"breaker-cooldown":   {func(c config.Config) any { return c.Tiers.BreakerCooldown }, warmcache.DefaultBreakerCooldown},
	"max-body-bytes":     {func(c config.Config) any { return c.Limits.MaxBodyBytes }, int64(warmcache.DefaultMaxValueBytes)},
	"max-batch-keys":     {func(c config.Config) any { return c.Limits.MaxBatchKeys }, warmcache.DefaultMaxBatchKeys},
	"max-response-bytes": {func(c config.Config) any { return c.Limits.MaxResponseBytes }, warmcache.DefaultMaxResponseBytes},
	"max-loads":          {func(c config.Config) any { return c.Loads.Max }, warmcache.DefaultMaxLoads},
	"max-load-bytes":     {func(c config.Config) any { return c.Loads.MaxBytes }, int64(warmcache.DefaultMaxLoadBytes)},
	"load-idle-timeout":  {func(c config.Config) any { return c.Loads.IdleTimeout }, warmcache.DefaultLoadIdleTimeout},
	"sweep-interval":     {func(c config.Config) any { return c.Tiers.SweepInterval }, warmcache.DefaultSweepInterval},
	"sweep-batch":        {func(c config.Config) any { return c.Tiers.SweepBatch }, warmcache.DefaultSweepBatch},

	// The warehouse's.
	"pg-exec-mode":       {func(c config.Config) any { return c.Postgres.ExecMode }, pgstore.DefaultExecMode},
	"pg-pooler":          {func(c config.Config) any { return c.Postgres.Pooler }, pgstore.DefaultPooler},
	"pg-lookup-function": {func(c config.Config) any { return c.Postgres.LookupFunction }, pgstore.DefaultLookupFunction},
	"pg-write-function":  {func(c config.Config) any { return c.Postgres.WriteFunction }, pgstore.DefaultWriteFunction},
	"gp-segment-lanes":   {func(c config.Config) any { return c.Postgres.SegmentLanes }, pgstore.DefaultSegmentLanes},
	"pg-max-conns":       {func(c config.Config) any { return c.Postgres.MaxConns }, pgstore.DefaultMaxConns},

	// Zero: none, off, or decided elsewhere (see each field).
	"http-socket":      {func(c config.Config) any { return c.HTTP.Socket }, ""},
	"grpc-socket":      {func(c config.Config) any { return c.GRPC.Socket }, ""},
	"dapr-http-addr":   {func(c config.Config) any { return c.Dapr.HTTPAddr }, ""},
	"dapr-grpc-addr":   {func(c config.Config) any { return c.Dapr.GRPCAddr }, ""},
	"tls-cert":         {func(c config.Config) any { return c.TLS.Cert }, ""},
	"tls-key":          {func(c config.Config) any { return c.TLS.Key }, ""},
	"keys-file":        {func(c config.Config) any { return c.Access.KeysFile }, ""},
	"dialect":          {func(c config.Config) any { return c.Postgres.Dialect }, ""},
	"redis-master":     {func(c config.Config) any { return c.Redis.MasterName }, ""},
	"redis-password":   {func(c config.Config) any { return c.Redis.Password }, ""},
	"redis-db":         {func(c config.Config) any { return c.Redis.DB }, 0},
	"near-cache-bytes": {func(c config.Config) any { return c.Near.Bytes }, int64(0)},
	"replication-dsn":  {func(c config.Config) any { return c.Capture.ReplicationDSN }, ""},
	"replication-slot": {func(c config.Config) any { return c.Capture.ReplicationSlot }, ""}, // config.DeploymentSlot
	"spool-dir":        {func(c config.Config) any { return c.Loads.SpoolDir }, ""},
	"cursor-key":       {func(c config.Config) any { return c.Server.CursorKey }, ""},
	"pprof":            {func(c config.Config) any { return c.Server.PprofAddr }, ""},
	"gc-heap-floor":    {func(c config.Config) any { return c.Server.GCHeapFloor }, int64(0)},
	"namespaces":       {func(c config.Config) any { return c.NamespacesFile }, ""},
	"dapr-components":  {func(c config.Config) any { return c.Dapr.Components }, []config.DaprComponent(nil)},
}

// TestFlagDefaultsAreTheirPackagesConstants: every flag of every command
// defaults to its package's named constant, in the flag's usage and in
// Defaults, so that a default has one home. A new flag fails it until it
// is listed in flagDefaults.
func TestFlagDefaultsAreTheirPackagesConstants(t *testing.T) {
	defaults := config.Defaults()
	flags := config.Flags()
	seen := map[string]bool{}
	for _, f := range flags {
		seen[f.Name] = true
		t.Run(f.Name, func(t *testing.T) {
			d, ok := flagDefaults[f.Name]
			if !ok {
				t.Fatalf("flag -%s has no entry in flagDefaults: give its default a named constant in the package that applies it", f.Name)
			}
			if got := d.got(defaults); !reflect.DeepEqual(got, d.want) {
				t.Errorf("Defaults() gives %#v, want the constant %#v", got, d.want)
			}
			if reflect.TypeOf(d.want).Kind() != reflect.Slice { // a list flag prints its values joined
				if want := fmt.Sprint(d.want); f.DefValue != want {
					t.Errorf("the flag's default is %q, want %q", f.DefValue, want)
				}
			}
		})
	}
	for name := range flagDefaults {
		if !seen[name] {
			t.Errorf("flagDefaults lists -%s, which no command registers", name)
		}
	}
}
