package pgstore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/dialect"
)

// Options configure a Store. The zero value of every field except DSN
// selects a default suited to a small, long-lived pool in front of the
// warehouse.
type Options struct {
	// DSN is the connection string, as a URL or key=value pairs, in the
	// form pgx.ParseConfig accepts. It is required.
	DSN string

	// ExecMode selects how queries travel over the wire: "auto",
	// "cache_statement", "cache_describe", "describe_exec", "exec" or
	// "simple_protocol" (pgx's QueryExecMode of the same name). Empty means
	// "auto", which is the right choice unless a measurement on the user's
	// own warehouse says otherwise:
	//
	//   - Greenplum: "simple_protocol" for reads. Every Bind/Execute SELECT
	//     makes the coordinator dispatch a shared snapshot to all segments
	//     and run the query in a separate reader process, which made point
	//     lookups far slower than the simple protocol. Writes are not
	//     affected and use "cache_statement" (direct) or "cache_describe"
	//     (through PgBouncer).
	//   - PostgreSQL, direct: "cache_statement". Named prepared statements
	//     skip parsing and planning, and were the fastest mode for point
	//     lookups, by a little.
	//   - PostgreSQL through PgBouncer in transaction pooling:
	//     "cache_describe". It caches the statement description but sends
	//     unnamed statements, so it works whichever server connection
	//     PgBouncer picks; named statements fail there with
	//     `prepared statement "..." already exists`.
	//
	// The measurements of each mode: docs/warehouse.md#which-exec-mode-when.
	// An explicit mode applies to reads and writes alike. "cache_statement"
	// together with Pooler "pgbouncer" is refused. "exec" and
	// "simple_protocol" never prepare and suit any pooler; "describe_exec"
	// costs an extra round trip per query and is only useful for debugging.
	ExecMode ExecMode

	// Pooler says what sits between the store and the server: "none" (a
	// direct connection) or "pgbouncer" (PgBouncer in transaction pooling).
	// Empty means "none". Through PgBouncer, session state does not follow
	// the client connection, so named prepared statements are not used and
	// the Greenplum session settings (see SessionSettings) are not sent:
	// set them on the service's role instead (ALTER ROLE ... SET), and the
	// store logs a warning at Open when the server's values differ.
	Pooler Pooler

	// LookupFunction says whether keys are read on PostgreSQL through a
	// PL/pgSQL function of each table (StatementSet.LookupFunction), which
	// Open creates when it is missing: "auto" (empty means auto) or "off".
	// PostgreSQL keeps a function's plan in each session, so through
	// PgBouncer a batched lookup is planned once per server connection
	// instead of at every query. When the function cannot be created (the
	// service's role may not create in the table's schema), Open logs a
	// warning and reads with the plain statement. Greenplum never uses it.
	LookupFunction FunctionMode

	// WriteFunction says whether writes go through a PL/pgSQL function of
	// each writable table (StatementSet.WriteFunction)
	// that takes the key's locks, draws the version and writes in one
	// statement, so that a write is one round trip: "auto" (empty means
	// auto) creates it when missing, "use" takes one that exists, "off"
	// writes in a transaction of statements. When the function cannot be
	// created, Open logs a warning and writes without it. Append-optimized
	// tables never use it.
	WriteFunction FunctionMode

	// SegmentLanes says whether the store, on Greenplum reached directly,
	// splits its pool into segment lanes (see lanes.go): "auto" (empty
	// means auto) or "off". Each table distributed by its key column gets
	// them; statements on other tables share the rest of the pool.
	SegmentLanes LaneMode

	// MaxConns bounds the pool. Zero means 8. Keep it small: each
	// Greenplum session holds a process on every segment, and the default
	// resource queue admits only 20 active statements.
	MaxConns int32
	// MinConns is the number of connections the pool keeps open even when
	// idle. Zero means none. A Greenplum connection is slow to open
	// (docs/warehouse.md#greenplum-measured), so a few warm connections
	// shorten the first misses after a quiet period.
	MinConns int32
	// MaxConnLifetime closes a connection after it has been open this long.
	// Zero means one hour.
	MaxConnLifetime time.Duration
	// MaxConnIdleTime closes a connection that has been idle this long.
	// Zero means 30 minutes.
	MaxConnIdleTime time.Duration
	// ConnectTimeout bounds opening one connection, including PgBouncer's
	// wait for a server connection. Zero means 5s, unless the DSN sets
	// connect_timeout.
	ConnectTimeout time.Duration

	// Tracer is pgx's query tracer hook, called for every query of the
	// pool, such as an OpenTelemetry tracer that makes a span of each.
	// Nil means none.
	Tracer pgx.QueryTracer

	// StatementMem is Greenplum's statement_mem for the service's sessions:
	// a number with an optional kB, MB or GB unit. Key lookups need little
	// memory, and a small value leaves the resource queue room for more
	// concurrent statements. Zero means "10MB". It is ignored on PostgreSQL.
	StatementMem string

	// LoadStatementTimeout bounds each statement of a bulk load (Load): the
	// COPY, the merge and the ANALYZE after it, as the server's
	// statement_timeout inside the load's transaction. Zero means 10
	// minutes. A load that runs out of time is rolled back.
	LoadStatementTimeout time.Duration
}

// ExecMode selects how queries travel over the wire; see Options.ExecMode.
// ParseExecMode is the one place its names are checked.
type ExecMode string

// The exec modes: auto, or one of pgx's QueryExecModes.
const (
	ExecModeAuto           ExecMode = "auto"
	ExecModeCacheStatement ExecMode = "cache_statement"
	ExecModeCacheDescribe  ExecMode = "cache_describe"
	ExecModeDescribeExec   ExecMode = "describe_exec"
	ExecModeExec           ExecMode = "exec"
	ExecModeSimpleProtocol ExecMode = "simple_protocol"
)

// AllExecModes returns every exec mode, auto first.
func AllExecModes() []ExecMode {
	return []ExecMode{ExecModeAuto, ExecModeCacheStatement, ExecModeCacheDescribe, ExecModeDescribeExec, ExecModeExec, ExecModeSimpleProtocol}
}

// ParseExecMode returns the exec mode called s, or an error that lists
// them.
func ParseExecMode(s string) (ExecMode, error) {
	if m := ExecMode(s); slices.Contains(AllExecModes(), m) {
		return m, nil
	}
	return "", fmt.Errorf("exec mode %q is not auto, cache_statement, cache_describe, describe_exec, exec or simple_protocol", s)
}

// Through returns an error when m cannot be used through pooler:
// cache_statement keeps named prepared statements, which collide on the
// server connections that PgBouncer in transaction pooling shares.
func (m ExecMode) Through(pooler Pooler) error {
	if pooler == PoolerPgBouncer && m == ExecModeCacheStatement {
		return fmt.Errorf("exec mode cache_statement cannot be used through PgBouncer in transaction pooling " +
			"(named prepared statements collide on shared server connections); use auto, cache_describe, exec or simple_protocol")
	}
	return nil
}

// Pooler says what sits between the store and the server; see
// Options.Pooler. ParsePooler is the one place its names are checked.
type Pooler string

// The poolers.
const (
	PoolerNone      Pooler = "none"
	PoolerPgBouncer Pooler = "pgbouncer"
)

// AllPoolers returns every pooler, none first.
func AllPoolers() []Pooler { return []Pooler{PoolerNone, PoolerPgBouncer} }

// ParsePooler returns the pooler called s, or an error that lists them.
func ParsePooler(s string) (Pooler, error) {
	if p := Pooler(s); slices.Contains(AllPoolers(), p) {
		return p, nil
	}
	return "", fmt.Errorf("pooler %q is not none or pgbouncer", s)
}

// FunctionMode says whether a Store goes through a PL/pgSQL function of
// each table for one kind of statement: the reads (Options.LookupFunction)
// or the writes (Options.WriteFunction). ParseFunctionMode is the one place
// its names are checked.
type FunctionMode string

// The function modes.
const (
	// FunctionAuto creates the function when it is missing.
	FunctionAuto FunctionMode = "auto"
	// FunctionUse uses a function that exists and creates none: the
	// setting of the commands other than serve, which change nothing.
	FunctionUse FunctionMode = "use"
	// FunctionOff goes without the function, with plain statements.
	FunctionOff FunctionMode = "off"
)

// AllFunctionModes returns every function mode, auto first.
func AllFunctionModes() []FunctionMode {
	return []FunctionMode{FunctionAuto, FunctionUse, FunctionOff}
}

// ParseFunctionMode returns the function mode called s, or an error that
// lists them.
func ParseFunctionMode(s string) (FunctionMode, error) {
	if f := FunctionMode(s); slices.Contains(AllFunctionModes(), f) {
		return f, nil
	}
	return "", fmt.Errorf("function mode %q is not auto, use or off", s)
}

// The defaults of Options that the service's flags also use (see package
// config).
const (
	DefaultExecMode       = ExecModeAuto
	DefaultPooler         = PoolerNone
	DefaultLookupFunction = FunctionAuto
	DefaultWriteFunction  = FunctionAuto
	DefaultMaxConns       = 8
)

const (
	defaultMaxConnLifetime = time.Hour
	defaultMaxConnIdleTime = 30 * time.Minute
	defaultConnectTimeout  = 5 * time.Second
	defaultLoadTimeout     = 10 * time.Minute
)

// pgxExecMode returns pgx's mode for an exec mode other than auto.
func pgxExecMode(m ExecMode) (pgx.QueryExecMode, bool) {
	switch m {
	case ExecModeCacheStatement:
		return pgx.QueryExecModeCacheStatement, true
	case ExecModeCacheDescribe:
		return pgx.QueryExecModeCacheDescribe, true
	case ExecModeDescribeExec:
		return pgx.QueryExecModeDescribeExec, true
	case ExecModeExec:
		return pgx.QueryExecModeExec, true
	case ExecModeSimpleProtocol:
		return pgx.QueryExecModeSimpleProtocol, true
	default:
		return 0, false
	}
}

// ExecModeName returns the ExecMode option value that selects m, such as
// "cache_statement".
func ExecModeName(m pgx.QueryExecMode) string {
	return strings.ReplaceAll(m.String(), " ", "_")
}

// validMemory reports whether s is a Greenplum memory setting: digits, then
// optionally a space, then optionally kB, MB or GB.
func validMemory(s string) bool {
	digits := strings.TrimRight(s, "kMGB ")
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	switch strings.TrimPrefix(s[len(digits):], " ") {
	case "", "kB", "MB", "GB":
		return true
	default:
		return false
	}
}

// withDefaults returns o with its zero values replaced by the defaults, or
// an error naming the first invalid option.
func (o Options) withDefaults() (Options, error) {
	if o.ExecMode == "" {
		o.ExecMode = DefaultExecMode
	}
	if _, err := ParseExecMode(string(o.ExecMode)); err != nil {
		return o, fmt.Errorf("pgstore: %w", err)
	}
	if o.Pooler == "" {
		o.Pooler = DefaultPooler
	}
	if o.LookupFunction == "" {
		o.LookupFunction = DefaultLookupFunction
	}
	if _, err := ParseFunctionMode(string(o.LookupFunction)); err != nil {
		return o, fmt.Errorf("pgstore: lookup %w", err)
	}
	if o.WriteFunction == "" {
		o.WriteFunction = DefaultWriteFunction
	}
	if _, err := ParseFunctionMode(string(o.WriteFunction)); err != nil {
		return o, fmt.Errorf("pgstore: write %w", err)
	}
	if _, err := ParsePooler(string(o.Pooler)); err != nil {
		return o, fmt.Errorf("pgstore: %w", err)
	}
	var err error
	if o.SegmentLanes, err = ParseLaneMode(string(o.SegmentLanes)); err != nil {
		return o, fmt.Errorf("pgstore: %w", err)
	}
	if err := o.ExecMode.Through(o.Pooler); err != nil {
		return o, fmt.Errorf("pgstore: %w", err)
	}
	if o.MaxConns < 0 || o.MinConns < 0 {
		return o, fmt.Errorf("pgstore: MaxConns and MinConns must not be negative")
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MinConns > o.MaxConns {
		return o, fmt.Errorf("pgstore: MinConns %d exceeds MaxConns %d", o.MinConns, o.MaxConns)
	}
	if o.MaxConnLifetime <= 0 {
		o.MaxConnLifetime = defaultMaxConnLifetime
	}
	if o.MaxConnIdleTime <= 0 {
		o.MaxConnIdleTime = defaultMaxConnIdleTime
	}
	if o.StatementMem == "" {
		o.StatementMem = dialect.DefaultStatementMem
	}
	if o.LoadStatementTimeout <= 0 {
		o.LoadStatementTimeout = defaultLoadTimeout
	}
	if !validMemory(o.StatementMem) {
		return o, fmt.Errorf("pgstore: statement_mem %q is not a number with an optional kB, MB or GB unit", o.StatementMem)
	}
	return o, nil
}

// ExecModes are the exec modes a Store uses for reads (Lookup, LookupMany)
// and writes (Put, Delete).
type ExecModes struct {
	Read  pgx.QueryExecMode
	Write pgx.QueryExecMode
}

// ChooseExecModes returns the exec modes for dialect d under opts: the
// explicit opts.ExecMode for both, or for "auto" the choice documented on
// Options.ExecMode. It fails on invalid options.
func ChooseExecModes(d dialect.Dialect, opts Options) (ExecModes, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return ExecModes{}, err
	}
	if opts.ExecMode != ExecModeAuto {
		m, _ := pgxExecMode(opts.ExecMode)
		return ExecModes{Read: m, Write: m}, nil
	}
	viaPgBouncer := opts.Pooler == PoolerPgBouncer
	switch {
	case d == dialect.Greenplum && viaPgBouncer:
		return ExecModes{Read: pgx.QueryExecModeSimpleProtocol, Write: pgx.QueryExecModeCacheDescribe}, nil
	case d == dialect.Greenplum:
		return ExecModes{Read: pgx.QueryExecModeSimpleProtocol, Write: pgx.QueryExecModeCacheStatement}, nil
	case viaPgBouncer:
		return ExecModes{Read: pgx.QueryExecModeCacheDescribe, Write: pgx.QueryExecModeCacheDescribe}, nil
	default:
		return ExecModes{Read: pgx.QueryExecModeCacheStatement, Write: pgx.QueryExecModeCacheStatement}, nil
	}
}

// SessionSettings returns the statements that prepare a Greenplum session
// for key lookups under opts, in the order they are sent: those of
// dialect.SessionSettings with opts.StatementMem ("10MB" when empty).
//
// The statements are for Greenplum only; the store sends them on every new
// connection unless Pooler is "pgbouncer". opts.StatementMem is not
// validated here; Open refuses an invalid one.
func SessionSettings(opts Options) []string {
	return dialect.SessionSettings(opts.StatementMem)
}

// quoteLiteral returns s as an SQL string literal, for names from the
// configuration (never for values from requests). It assumes
// standard_conforming_strings, as pgx does.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
