// Package advise chooses a namespace's storage by measurement: it builds
// each candidate storage (layout, value type, compression, orientation) on
// a sample of the namespace's real rows in a scratch schema, and reports for
// each the size on disk, the load time and the point-lookup latency through
// the service's own lookup path, then recommends one and prints how to
// migrate to it.
package advise

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mathrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Options configure a run. The zero value of each field selects the
// default in its comment.
type Options struct {
	// Store says how lookups reach the warehouse (DSN, exec mode,
	// pooler), as the service's own store does; it is also used for the
	// scratch tables' DDL, which works through PgBouncer in transaction
	// pooling. Store.DSN is required.
	Store pgstore.Options
	// SampleRows is how many rows of the namespace to copy. Zero means
	// 20,000.
	SampleRows int
	// Lookups is how many timed point lookups each candidate gets, after
	// a tenth as many untimed ones. Zero means 2,000.
	Lookups int
	// Seed makes the lookup order reproducible. Zero means 1.
	Seed uint64
}

func (o Options) withDefaults() Options {
	if o.SampleRows <= 0 {
		o.SampleRows = 20_000
	}
	if o.Lookups <= 0 {
		o.Lookups = 2_000
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// Result is the measurement of one candidate.
type Result struct {
	Candidate
	// Bytes is the size on disk: heap, TOAST and indexes of every
	// partition (pg_total_relation_size), or on Greenplum of every segment
	// (pg_total_relation_size sums the segments there, auxiliary tables of
	// append-optimized storage included).
	Bytes int64
	// Load is the time to insert the sample into the empty table,
	// indexes included (for bytea, with the compression in the client).
	Load time.Duration
	// P50 and P99 are the point-lookup latencies through the lookup
	// path, one client at a time.
	P50, P99 time.Duration
	// Err says why the candidate could not be measured; the other fields
	// are zero then.
	Err error
}

// Report is the outcome of a run.
type Report struct {
	Namespace string
	Dialect   dialect.Dialect
	// Rows is the sample size; AvgValueBytes the mean length of a value
	// as JSON text.
	Rows          int
	AvgValueBytes int
	// DictBytes is the size of the zstd dictionary trained on the sample
	// (zero when none could be), and DictRatio the compression ratio it
	// gave on single values (without a dictionary when none could be).
	DictBytes int
	DictRatio float64
	Results   []Result
	// Current is the index of the namespace's own storage in Results, or
	// -1; Recommended the index of the recommendation, or -1.
	Current, Recommended int
	// Why explains the recommendation; Notes are other findings.
	Why   string
	Notes []string
	// Migration tells how to move to the recommended storage.
	Migration string
	Elapsed   time.Duration
}

// Run measures the candidate storages of table t's namespace (see
// Candidates) on a sample of its rows and returns the report. The scratch schema
// (warmcache_advise_<random>) is dropped at the end, whatever happens.
// Errors are the warehouse's, wrapped; a candidate that cannot be built on
// this server is reported in its Result.Err instead.
func Run(ctx context.Context, t schema.Table, opts Options, log *slog.Logger) (Report, error) {
	start := time.Now()
	ns := t.Namespace
	opts = opts.withDefaults()
	pool, d, err := connect(ctx, opts.Store.DSN)
	if err != nil {
		return Report{}, err
	}
	defer pool.Close()

	smp, err := readSample(ctx, pool, ns, opts.SampleRows)
	if err != nil {
		return Report{}, err
	}
	if len(smp.keys) == 0 {
		return Report{}, fmt.Errorf("advise: namespace %q: table %s has no rows to sample", ns.Name, ns.Table)
	}
	r := Report{Namespace: ns.Name, Dialect: d, Rows: len(smp.keys), AvgValueBytes: smp.avgValueBytes()}

	scratch, drop, err := createScratch(ctx, pool, log)
	if err != nil {
		return Report{}, err
	}
	defer drop()
	if err := smp.stage(ctx, pool, scratch, ns, d); err != nil {
		return Report{}, err
	}
	dict, err := trainDictionary(smp.values)
	if err != nil {
		return Report{}, err
	}
	defer dict.Close()
	r.DictBytes, r.DictRatio = len(dict.raw), dict.ratio
	if dict.err != nil {
		log.Warn("advise: no zstd dictionary for the bytea candidate", "err", dict.err)
	}

	columns := ns.Columns
	if ns.Layout == warmcache.LayoutPacked {
		columns = InferColumns(smp.values, ns.KeyColumn, ns.VersionColumn)
	}
	cands := Candidates(d, t, columns)
	r.Current = Current(d, t, cands)
	m := &measurer{pool: pool, dialect: d, ns: ns, scratch: scratch, smp: smp, dict: dict, opts: opts,
		rng: mathrand.New(mathrand.NewPCG(opts.Seed, opts.Seed)), log: log}
	if r.Results, err = m.measureAll(ctx, cands); err != nil {
		return Report{}, err
	}
	r.recommend()
	r.Migration = migration(d, t, r)
	r.Elapsed = time.Since(start)
	return r, nil
}

// connect opens the advisor's small pool on dsn, in the simple protocol,
// and detects the warehouse's dialect.
func connect(ctx context.Context, dsn string) (*pgxpool.Pool, dialect.Dialect, error) {
	if dsn == "" {
		return nil, 0, errors.New("advise: no DSN")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, 0, fmt.Errorf("advise: parse DSN: %w", err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("advise: connect: %w", err)
	}
	d, err := dialect.Detect(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, 0, fmt.Errorf("advise: %w", err)
	}
	return pool, d, nil
}

// createScratch creates the schema of a run's candidate tables, and
// returns its name and a func that drops it with everything in it (and
// logs where that fails, so that an operator can drop it by hand).
func createScratch(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (string, func(), error) {
	scratch := "warmcache_advise_" + randomHex()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{scratch}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("advise: create scratch schema: %w", err)
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, err := pool.Exec(dctx, "DROP SCHEMA "+pgx.Identifier{scratch}.Sanitize()+" CASCADE"); err != nil {
			log.Error("advise: drop the scratch schema by hand", "schema", scratch, "err", err)
		}
	}
	return scratch, drop, nil
}

// sample is the rows copied from the namespace.
type sample struct {
	keys     []any // int64 or string
	values   [][]byte
	versions []int64
}

func (s *sample) avgValueBytes() int {
	total := 0
	for _, v := range s.values {
		total += len(v)
	}
	return total / max(len(s.values), 1)
}

func readSample(ctx context.Context, pool *pgxpool.Pool, ns *warmcache.Namespace, n int) (*sample, error) {
	sql, err := pgstore.SampleStatement(ns)
	if err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, sql, n)
	if err != nil {
		return nil, fmt.Errorf("advise: read sample of %s: %w", ns.Name, err)
	}
	s := &sample{}
	for rows.Next() {
		var key any
		var value []byte
		var version int64
		if ns.KeyType == warmcache.KeyBigint {
			var k int64
			err = rows.Scan(&k, &value, &version)
			key = k
		} else {
			var k string
			err = rows.Scan(&k, &value, &version)
			key = k
		}
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("advise: read sample of %s: %w", ns.Name, err)
		}
		s.keys, s.values, s.versions = append(s.keys, key), append(s.values, value), append(s.versions, version)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("advise: read sample of %s: %w", ns.Name, err)
	}
	return s, nil
}

// stage copies the sample into scratch.sample(key, value, version), from
// which each candidate is filled. The value is text (JSON), or bytea for a
// bytes namespace.
func (s *sample) stage(ctx context.Context, pool *pgxpool.Pool, scratch string, ns *warmcache.Namespace, d dialect.Dialect) error {
	valueType := "text"
	if ns.Layout == warmcache.LayoutBytes {
		valueType = "bytea"
	}
	ddl := fmt.Sprintf("CREATE TABLE %s (key %s NOT NULL, value %s NOT NULL, version bigint NOT NULL)",
		pgx.Identifier{scratch, "sample"}.Sanitize(), ns.KeyType, valueType)
	if clause := d.DistributedBy("key"); clause != "" {
		ddl += " " + clause
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("advise: create sample table: %w", err)
	}
	_, err := pool.CopyFrom(ctx, pgx.Identifier{scratch, "sample"}, []string{"key", "value", "version"},
		pgx.CopyFromSlice(len(s.keys), func(i int) ([]any, error) {
			if valueType == "bytea" {
				return []any{s.keys[i], s.values[i], s.versions[i]}, nil
			}
			return []any{s.keys[i], string(s.values[i]), s.versions[i]}, nil
		}))
	if err != nil {
		return fmt.Errorf("advise: copy sample: %w", err)
	}
	return nil
}

// measurer builds and measures candidates.
type measurer struct {
	pool    *pgxpool.Pool
	dialect dialect.Dialect
	ns      *warmcache.Namespace
	scratch string
	smp     *sample
	dict    *dictionary
	opts    Options
	rng     *mathrand.Rand
	log     *slog.Logger
}

// candidateNamespace is the namespace of candidate c's scratch table.
func (m *measurer) candidateNamespace(i int, c Candidate) *warmcache.Namespace {
	return &warmcache.Namespace{
		Name:          fmt.Sprintf("advise_%d", i+1),
		Table:         fmt.Sprintf("%s.cand_%d", m.scratch, i+1),
		KeyColumn:     m.ns.KeyColumn,
		KeyType:       m.ns.KeyType,
		Layout:        c.Layout,
		ValueColumn:   orValue(m.ns.ValueColumn),
		Columns:       c.Columns,
		VersionColumn: m.ns.VersionColumn,
	}
}

func orValue(s string) string {
	if s == "" {
		return "value"
	}
	return s
}

// build creates and fills candidate c, measures its size, and opens its
// lookup path. On failure the Result's Err says why and the lookup is nil.
// The caller calls closeFn when it is not nil.
func (m *measurer) build(ctx context.Context, i int, c Candidate) (res Result, lookup func(context.Context, int) error, closeFn func()) {
	res = Result{Candidate: c}
	cns := m.candidateNamespace(i, c)
	fail := func(step string, err error) (Result, func(context.Context, int) error, func()) {
		res.Err = fmt.Errorf("%s: %w", step, err)
		return res, nil, nil
	}
	if err := m.create(ctx, cns, c); err != nil {
		return fail("create table", err)
	}
	var err error
	if res.Load, err = m.fill(ctx, cns, c); err != nil {
		return fail("load", err)
	}
	if _, err := m.pool.Exec(ctx, "VACUUM ANALYZE "+tableIdent(cns.Table)); err != nil {
		return fail("vacuum", err)
	}
	if err := m.pool.QueryRow(ctx, sizeSQL, tableIdent(cns.Table)).Scan(&res.Bytes); err != nil {
		return fail("size", err)
	}
	if res.Bytes <= 0 {
		return fail("size", fmt.Errorf("the server reports %d bytes", res.Bytes))
	}
	lookup, closeFn, err = m.lookupFunc(ctx, cns, c)
	if err != nil {
		return fail("open lookups", err)
	}
	return res, lookup, closeFn
}

// sizeSQL is the size of table $1 on disk: the sum over its partition tree
// on PostgreSQL, or the table's own pg_total_relation_size when the tree is
// empty, as it is for a plain table on Greenplum 7 (whose
// pg_total_relation_size sums the segments; the same figure as
// gp_toolkit.gp_size_of_table_and_indexes_disk).
const sizeSQL = `SELECT coalesce(nullif((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree($1::regclass)), 0),
	pg_total_relation_size($1::regclass))::bigint`

// lookupRounds is how many rounds the timed lookups are spread over: each
// round gives every candidate its share in turn, so that a change of load
// on the machine during the run affects all candidates alike.
const lookupRounds = 10

// measureAll builds each candidate's table and times its lookups, and
// returns the results in the order of cands. What it built is closed when
// it returns; a candidate that could not be built carries its error.
func (m *measurer) measureAll(ctx context.Context, cands []Candidate) ([]Result, error) {
	results := make([]Result, len(cands))
	lookups := make([]func(context.Context, int) error, len(cands))
	for i, c := range cands {
		res, lookup, closeFn := m.build(ctx, i, c)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if closeFn != nil {
			defer closeFn()
		}
		if res.Err != nil {
			m.log.Warn("advise: candidate not measured", "candidate", c.Name, "err", res.Err)
		}
		results[i], lookups[i] = res, lookup
	}
	m.timeAll(ctx, results, lookups)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return results, nil
}

// timeAll runs a tenth of the lookups of each candidate untimed, then the
// timed ones in rounds, on keys drawn at random from the sample, and sets
// each result's P50 and P99. A lookup that fails marks its result.
func (m *measurer) timeAll(ctx context.Context, results []Result, lookups []func(context.Context, int) error) {
	n := len(m.smp.keys)
	times := make([][]time.Duration, len(results))
	for i, lookup := range lookups {
		for j := 0; lookup != nil && j < m.opts.Lookups/10; j++ {
			if err := lookup(ctx, m.rng.IntN(n)); err != nil {
				results[i].Err, lookups[i] = fmt.Errorf("lookups: %w", err), nil
			}
		}
	}
	per := max(m.opts.Lookups/lookupRounds, 1)
	for range lookupRounds {
		for i, lookup := range lookups {
			for j := 0; lookup != nil && j < per; j++ {
				k := m.rng.IntN(n)
				start := time.Now()
				if err := lookup(ctx, k); err != nil {
					results[i].Err, lookups[i], lookup = fmt.Errorf("lookups: %w", err), nil, nil
					break
				}
				times[i] = append(times[i], time.Since(start))
			}
		}
	}
	for i, d := range times {
		if results[i].Err != nil || len(d) == 0 {
			continue
		}
		slices.Sort(d)
		results[i].P50, results[i].P99 = percentile(d, 0.50), percentile(d, 0.99)
	}
}

// create runs migrate's DDL for the candidate (its namespace_table step),
// with the value column's type changed for json and bytea.
func (m *measurer) create(ctx context.Context, cns *warmcache.Namespace, c Candidate) error {
	ddl, err := tableDDL(m.dialect, schema.Table{Namespace: cns, Managed: true, Storage: c.Storage})
	if err != nil {
		return err
	}
	if c.Value != ValueJSONB && c.Value != ValueBytea {
		from := pgx.Identifier{cns.ValueColumn}.Sanitize() + " jsonb NOT NULL"
		to := pgx.Identifier{cns.ValueColumn}.Sanitize() + " " + map[ValueType]string{ValueJSON: "json", ValueZstd: "bytea"}[c.Value] + " NOT NULL"
		if strings.Count(ddl, from) != 1 {
			return fmt.Errorf("cannot find the value column in the DDL")
		}
		ddl = strings.Replace(ddl, from, to, 1)
	}
	_, err = m.pool.Exec(ctx, ddl)
	return err
}

// tableDDL returns the DDL migrate runs for a managed table.
func tableDDL(d dialect.Dialect, t schema.Table) (string, error) {
	steps, err := schema.Plan(d, []schema.Table{t})
	if err != nil {
		return "", err
	}
	for _, s := range steps {
		if s.Scope == t.Namespace.Name {
			return s.Up, nil
		}
	}
	return "", fmt.Errorf("no table step for %s", t.Namespace.Name)
}

// fill copies the sample into the candidate and returns how long it took.
func (m *measurer) fill(ctx context.Context, cns *warmcache.Namespace, c Candidate) (time.Duration, error) {
	table := tableIdent(cns.Table)
	key, version := pgx.Identifier{cns.KeyColumn}.Sanitize(), pgx.Identifier{cns.VersionColumn}.Sanitize()
	src := pgx.Identifier{m.scratch, "sample"}.Sanitize()
	start := time.Now()
	switch {
	case c.Value == ValueZstd:
		enc := m.dict.enc
		_, err := m.pool.CopyFrom(ctx, pgx.Identifier{m.scratch, fmt.Sprintf("cand_%s", strings.TrimPrefix(cns.Name, "advise_"))},
			[]string{cns.KeyColumn, cns.ValueColumn, cns.VersionColumn},
			pgx.CopyFromSlice(len(m.smp.keys), func(i int) ([]any, error) {
				return []any{m.smp.keys[i], enc.EncodeAll(m.smp.values[i], nil), m.smp.versions[i]}, nil
			}))
		if err != nil {
			return 0, err
		}
	case c.Layout == warmcache.LayoutColumns:
		names := make([]string, len(c.Columns))
		vals := make([]string, len(c.Columns))
		for i, col := range c.Columns {
			names[i] = pgx.Identifier{col.Name}.Sanitize()
			vals[i] = "(s.r)." + names[i]
		}
		// The record in a subquery's select list, as pgstore's load
		// reads it: on Greenplum, json_populate_record in FROM can be
		// planned on the coordinator's entry process.
		_, err := m.pool.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s, %s, %s) SELECT s.key, %s, s.version FROM (SELECT key, version, json_populate_record(NULL::%s, value::json) AS r FROM %s OFFSET 0) AS s",
			table, key, strings.Join(names, ", "), version, strings.Join(vals, ", "), table, src))
		if err != nil {
			return 0, err
		}
	default:
		_, err := m.pool.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s, %s, %s) SELECT key, value::%s, version FROM %s",
			table, key, pgx.Identifier{cns.ValueColumn}.Sanitize(), version, c.Value, src))
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// lookupFunc returns the point lookup of the candidate through the
// service's path: a pgstore.Store with the service's options, or for bytea
// the same exec mode plus the dictionary decompression.
func (m *measurer) lookupFunc(ctx context.Context, cns *warmcache.Namespace, c Candidate) (func(context.Context, int) error, func(), error) {
	so := m.opts.Store
	so.MaxConns = 1
	if c.Value != ValueZstd {
		store, err := pgstore.Open(ctx, so, []*warmcache.Namespace{cns}, prometheus.NewRegistry(), m.log)
		if err != nil {
			return nil, nil, err
		}
		keys := m.keys()
		return func(ctx context.Context, i int) error {
			e, err := store.Lookup(ctx, cns, keys[i])
			if err == nil && !e.Found {
				err = fmt.Errorf("key %s not found", keys[i].Text)
			}
			return err
		}, store.Close, nil
	}
	modes, err := pgstore.ChooseExecModes(m.dialect, so)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(so.DSN)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	sql := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = $1::%s", pgx.Identifier{cns.ValueColumn}.Sanitize(),
		pgx.Identifier{cns.VersionColumn}.Sanitize(), tableIdent(cns.Table), pgx.Identifier{cns.KeyColumn}.Sanitize(), cns.KeyType)
	dec := m.dict.dec
	return func(ctx context.Context, i int) error {
		var b []byte
		var version int64
		if err := pool.QueryRow(ctx, sql, modes.Read, m.smp.keys[i]).Scan(&b, &version); err != nil {
			return err
		}
		_, err := dec.DecodeAll(b, nil)
		return err
	}, pool.Close, nil
}

// keys returns the sample's keys as warmcache keys.
func (m *measurer) keys() []warmcache.Key {
	out := make([]warmcache.Key, len(m.smp.keys))
	for i, k := range m.smp.keys {
		switch k := k.(type) {
		case int64:
			out[i] = warmcache.Key{Text: fmt.Sprint(k), Int: k}
		case string:
			out[i] = warmcache.Key{Text: k}
		}
	}
	return out
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func tableIdent(table string) string {
	return pgx.Identifier(strings.Split(table, ".")).Sanitize()
}

func randomHex() string {
	var b [5]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return hex.EncodeToString(b[:])
}
