package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// upsertScript is pgbench's reference of a PUT: the same upsert of the
// same document on the same table (its indexes, triggers and publication),
// with a version drawn from the service's sequence, on a uniformly random
// key. %[1]d is the row count, %[2]s the document as an SQL literal.
const upsertScript = `\set k random(1, %[1]d)
INSERT INTO widgets (key, value, version) VALUES (:k, %[2]s::jsonb, nextval('warmcache_version_seq'))
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version;
`

// upsertScriptFile is the file of upsertScript in the artifact directory,
// written by upsertBaselines.
const upsertScriptFile = "pgbench-upsert.sql"

// writeFunctionScript calls the table's write function as the service
// does for a PUT of a uniformly random key: its table lock, its key's write
// lock, its row lock, its version draw and the upsert in one statement.
// The advisory locks' values stand for the service's hashes of the table
// and the key (%[3]s is the function's name).
const writeFunctionScript = `\set k random(1, %[1]d)
SELECT * FROM %[3]s(:k, %[2]s, NULL, false, NULL, false, 1, ARRAY[:k]::bigint[], ARRAY[:k]::bigint[]);
`

// peerUpsertScript is the upsert a user would write on a table of their
// own, without versions: the peer's reference.
const peerUpsertScript = `\set k random(1, %[1]d)
INSERT INTO peer_widgets (key, value) VALUES (:k, %[2]s::jsonb)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
`

// writeKeys bounds the keys a conditional PUT or DELETE attack may use:
// each is written once.
const writeKeys = 120_000

// writeScenarios measures PUT on random keys, conditional PUT (If-Match
// at the key's version) and DELETE, each key at most once, at saturation
// with WriteWorkers workers; then pgbench of the same upsert through the same
// PgBouncer at the same concurrency, and of the peer's upsert on its own
// table. The deleted rows are put back afterwards.
func (r *benchRun) writeScenarios(ctx context.Context) error {
	o := r.opts
	if err := r.vacuum(ctx); err != nil {
		return err
	}
	h := r.svc.targets.header.Clone()
	h.Set("Content-Type", "application/json")
	body := func(k int64) []byte {
		return []byte(strings.Replace(r.sample, `"id": "1"`, `"id": "`+strconv.FormatInt(k, 10)+`"`, 1))
	}
	rng := rand.New(rand.NewPCG(7, 11))
	puts := make([]vegetaTarget, 20_000)
	for i := range puts {
		k := rng.Int64N(o.Rows) + 1
		puts[i] = vegetaTarget{Method: http.MethodPut, URL: r.svc.targets.keyURL(k), Header: h, Body: body(k)}
	}
	putSpec := func() attackSpec {
		return attackSpec{scenario: bench.Put, client: r.client, targeter: ring(puts), workers: o.WriteWorkers, duration: o.Duration, keysPerRequest: 1}
	}
	r.writeAttack(ctx, bench.Put, putSpec)
	if o.Profile {
		r.profile(ctx, r.svc, bench.Put, httpLoad(ctx, putSpec))
	}
	r.hotAtPutRate(ctx)

	// Keys from the end of the cold keys' order, which the misses do not
	// reach: the conditional PUTs' first, then the DELETEs'.
	n := min(writeKeys, int(r.perm.Len()/4))
	keys := make([]int64, 2*n)
	for i := range keys {
		keys[i] = int64(r.perm.At(r.perm.Len()-2-uint64(i))) + 1
	}
	versions, err := r.versions(ctx, keys[:n])
	if err != nil {
		return err
	}
	var next atomic.Int64
	r.writeAttack(ctx, bench.PutIfMatch, func() attackSpec {
		return attackSpec{scenario: bench.PutIfMatch, client: r.client, workers: o.WriteWorkers, duration: o.Duration, keysPerRequest: 1,
			targeter: func(t *vegeta.Target) error {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return fmt.Errorf("all %d keys were written", n)
				}
				k := keys[i]
				hk := h.Clone()
				hk.Set("If-Match", strconv.Quote(strconv.FormatInt(versions[k], 10)))
				*t = vegetaTarget{Method: http.MethodPut, URL: r.svc.targets.keyURL(k), Header: hk, Body: body(k)}
				return nil
			}}
	})
	next.Store(0)
	deletes := keys[n:]
	r.writeAttack(ctx, bench.Delete, func() attackSpec {
		return attackSpec{scenario: bench.Delete, client: r.client, workers: o.WriteWorkers, duration: o.Duration, keysPerRequest: 1,
			targeter: func(t *vegeta.Target) error {
				i := next.Add(1) - 1
				if i >= int64(len(deletes)) {
					return fmt.Errorf("all %d keys were deleted", len(deletes))
				}
				*t = vegetaTarget{Method: http.MethodDelete, URL: r.svc.targets.keyURL(deletes[i]), Header: r.svc.targets.header}
				return nil
			}}
	})
	if err := r.restoreRows(ctx, deletes); err != nil {
		return err
	}
	if err := r.vacuum(ctx); err != nil { // pgbench starts from a vacuumed table, as the PUTs did
		return err
	}
	if err := r.upsertBaselines(ctx); err != nil {
		return err
	}
	return r.singleClient(ctx, puts)
}

// hotAtPutRate measures Redis hits of the hot keys, already cached by the
// hot scenario, at the rate the PUTs reached, with as many workers, and
// the CPU of every process over them (bench.HotAtPutRate).
func (r *benchRun) hotAtPutRate(ctx context.Context) {
	put, ok := r.report.Saturation[bench.Put]
	if !r.want(bench.Hot) || !ok || put.Throughput < 1 {
		return
	}
	if _, err := r.captured(ctx, captureLimit); err != nil { // the profile's PUTs, if any
		r.note("%s not measured: %v", bench.HotAtPutRate, err)
		return
	}
	spec := r.httpSpec(bench.HotAtPutRate, r.svc.targets.gets(r.hotKeys), 1)
	run := r.measured(r.svc.process, "warmcache", func() bench.Run {
		s := spec()
		s.rate, s.workers = put.Throughput, r.opts.WriteWorkers
		return attack(ctx, s)
	})
	r.report.Fixed[bench.HotAtPutRate] = run
	r.logRun(run)
}

// vacuum vacuums the widgets table, so that the write scenarios of each
// run, and pgbench's upserts after them, start from a table without the
// dead rows of the writes before: between autovacuum passes they pile up,
// and PostgreSQL's CPU per write rose run after run in a series of runs on
// one database.
func (r *benchRun) vacuum(ctx context.Context) error {
	conn, err := r.database(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) widgets"); err != nil {
		return fmt.Errorf("vacuum widgets: %w", err)
	}
	r.logf("writes: vacuumed widgets in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// captureLimit bounds how long a write attack waits for change capture to
// apply its writes.
const captureLimit = time.Minute

// captured waits, at most limit, until change capture has applied what
// was committed before it was called, and returns how long that took. A
// write attack leaves capture a backlog, whose work an attack measured
// right after it would be charged. It reads a hot key through the service
// (so that Redis holds it, or its absence if the delete attack deleted
// it), gives the key a new version behind the service's back (putting it
// back if it was deleted), and reads it again until the new version is
// served:
// capture applies changes in commit order, so by then it has applied
// everything before. Without capture there is nothing to wait for.
func (r *benchRun) captured(ctx context.Context, limit time.Duration) (time.Duration, error) {
	if !r.opts.Capture || len(r.hotKeys) == 0 {
		return 0, nil
	}
	key := r.hotKeys[0]
	served := func() (string, error) {
		status, header, err := r.svc.targets.fetch(ctx, r.client, key)
		switch {
		case err != nil:
			return "", err
		case status == http.StatusOK:
			return header.Get("ETag"), nil
		case status == http.StatusNotFound: // deleted by the delete attack: cached as absent
			return "", nil
		}
		return "", fmt.Errorf("GET key %d: %d %s", key, status, http.StatusText(status))
	}
	if _, err := served(); err != nil {
		return 0, err
	}
	start := time.Now()
	conn, err := r.database(ctx)
	if err != nil {
		return 0, err
	}
	var version int64
	err = conn.QueryRow(ctx, `INSERT INTO widgets (key, value, version)
VALUES ($1, jsonb_set($2::jsonb, '{widget,id}', to_jsonb($3::text)), nextval('warmcache_version_seq'))
ON CONFLICT (key) DO UPDATE SET version = EXCLUDED.version RETURNING version`, key, widgetDoc, strconv.FormatInt(key, 10)).Scan(&version)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return 0, fmt.Errorf("give key %d a new version: %w", key, err)
	}
	want := strconv.Quote(strconv.FormatInt(version, 10))
	for {
		etag, err := served()
		if err != nil {
			return 0, err
		}
		if etag == want {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return 0, fmt.Errorf("change capture did not serve key %d at version %d within %s (served %s)", key, version, limit, etag)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeAttack runs an unmeasured warm-up, then the measured attack at
// saturation, with the CPU of every process and the service's fold sizes
// measured over it, and records it under name.
func (r *benchRun) writeAttack(ctx context.Context, name string, spec func() attackSpec) {
	if r.opts.Warmup > 0 {
		w := spec()
		w.duration = r.opts.Warmup
		_ = attack(ctx, w)
	}
	var run bench.Run
	run.WriteFold = r.writeFolds(ctx, name, func() {
		// The CPU is measured until change capture has applied the
		// attack's writes: their echoes are part of what they cost.
		run = r.measured(r.svc.process, "warmcache", func() bench.Run {
			run := attack(ctx, spec())
			if waited, err := r.captured(ctx, captureLimit); err != nil {
				r.note("%s: %v", name, err)
			} else if waited > time.Second {
				r.logf("%s: change capture applied the attack's writes %s after it ended", name, waited.Round(time.Millisecond))
			}
			return run
		})
	})
	r.report.Saturation[name] = run
	r.logRun(run)
}

// writeFolds runs attack and returns how the service folded the writes
// meanwhile: the rise of its warmcache_write_fold_size histogram. It
// returns nil, with a note, when the histogram could not be read.
func (r *benchRun) writeFolds(ctx context.Context, name string, attack func()) *bench.WriteFold {
	metrics := r.svc.base + "/metrics"
	before, err := scrapeHistogram(ctx, metrics, writeFoldSize)
	attack()
	after, errAfter := scrapeHistogram(ctx, metrics, writeFoldSize)
	var sizes bench.Histogram
	if err == nil {
		err = errAfter
	}
	if err == nil {
		sizes, err = after.Since(before)
	}
	if err != nil {
		r.note("%s: fold sizes not measured: %v", name, err)
		return nil
	}
	f := bench.NewWriteFold(sizes)
	r.logf("%s: %.0f writes in %.0f folds; writes per fold: mean %.2f, median %.1f, p99 %.1f", name, sizes.Sum, sizes.Count, f.Mean, f.P50, f.P99)
	return &f
}

// writeFoldSize is the service's histogram of writes per folded warehouse
// write.
const writeFoldSize = "warmcache_write_fold_size"

// versions reads the version of each key.
func (r *benchRun) versions(ctx context.Context, keys []int64) (map[int64]int64, error) {
	conn, err := r.database(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT key, version FROM widgets WHERE key = ANY($1)", keys)
	if err != nil {
		return nil, fmt.Errorf("read versions: %w", err)
	}
	out := make(map[int64]int64, len(keys))
	var k, v int64
	_, err = pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil })
	return out, err
}

// restoreRows puts back the widget rows of keys that are missing.
func (r *benchRun) restoreRows(ctx context.Context, keys []int64) error {
	conn, err := r.database(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tag, err := conn.Exec(ctx, `INSERT INTO widgets (key, value, version)
SELECT k, jsonb_set($2::jsonb, '{widget,id}', to_jsonb(k::text)), nextval('warmcache_version_seq')
FROM unnest($1::bigint[]) AS k ON CONFLICT (key) DO NOTHING`, keys, widgetDoc)
	if err != nil {
		return fmt.Errorf("restore deleted rows: %w", err)
	}
	r.logf("delete: put back %d deleted rows", tag.RowsAffected())
	return nil
}

// upsertBaselines runs pgbench of the service's upsert, and of the peer's
// on its own table (created and filled from widgets once), through the
// same PgBouncer with WriteWorkers clients, in each protocol PgBouncer
// takes, each transaction's latency logged.
func (r *benchRun) upsertBaselines(ctx context.Context) error {
	o := r.opts
	if err := r.preparePeerTable(ctx); err != nil {
		return err
	}
	literal := "'" + strings.ReplaceAll(r.sample, "'", "''") + "'"
	fn, err := r.writeFunction(ctx)
	if err != nil {
		return err
	}
	for _, b := range []struct {
		name, file, script string
		modes              []string
		into               *[]*bench.Baseline
	}{
		{"upsert", upsertScriptFile, upsertScript, []string{"extended", "simple"}, &r.report.Upsert},
		{"write function", "pgbench-write-function.sql", writeFunctionScript, []string{"extended"}, &r.report.WriteFunction},
		{"peer's upsert", "pgbench-peer-upsert.sql", peerUpsertScript, []string{"extended", "simple"}, &r.report.PeerUpsert},
	} {
		if b.into == &r.report.WriteFunction && fn == "" {
			r.note("no write function on widgets: its pgbench reference is left out")
			continue
		}
		script := filepath.Join(o.ArtifactDir, b.file)
		if err := os.WriteFile(script, fmt.Appendf(nil, b.script, o.Rows, literal, fn), 0o644); err != nil {
			return fmt.Errorf("pgbench script: %w", err)
		}
		for _, mode := range b.modes {
			r.logf("baseline: pgbench %s -M %s through PgBouncer, %d clients, %s", b.name, mode, o.WriteWorkers, o.Duration)
			res, _, err := r.runPgbench(ctx, pgbenchRun{addr: o.PGBouncer, mode: mode, clients: o.WriteWorkers, script: script, logged: true})
			if err != nil {
				r.note("pgbench %s -M %s through PgBouncer failed: %v", b.name, mode, err)
				continue
			}
			res.Name = fmt.Sprintf("`pgbench -M %s` %s via PgBouncer", mode, b.name)
			*b.into = append(*b.into, res)
			r.logf("  %s upserts/s", bench.FormatRate(res.Throughput))
		}
	}
	return nil
}

// writeFunction returns the name of the widgets table's write function,
// the newest one the service created; empty when there is none.
func (r *benchRun) writeFunction(ctx context.Context) (string, error) {
	conn, err := r.database(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var name string
	err = conn.QueryRow(ctx, `SELECT p.oid::regproc::text FROM pg_proc p
WHERE p.proname LIKE 'warmcache\_write\_%' AND p.prosrc LIKE '%FROM "widgets" AS t%' ORDER BY p.oid DESC LIMIT 1`).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find the write function: %w", err)
	}
	return name, nil
}

// preparePeerTable creates the peer's own table, a copy of widgets
// without versions, unless it is there with every row.
func (r *benchRun) preparePeerTable(ctx context.Context) error {
	conn, err := r.database(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS peer_widgets (key bigint PRIMARY KEY, value jsonb NOT NULL)"); err != nil {
		return fmt.Errorf("create peer_widgets: %w", err)
	}
	var present bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM peer_widgets WHERE key = $1)", r.opts.Rows).Scan(&present); err != nil {
		return err
	}
	if present {
		return nil
	}
	r.logf("filling peer_widgets from widgets (done once, reused by later runs)")
	if _, err := conn.Exec(ctx, "INSERT INTO peer_widgets SELECT key, value FROM widgets ON CONFLICT (key) DO NOTHING"); err != nil {
		return fmt.Errorf("fill peer_widgets: %w", err)
	}
	_, err = conn.Exec(ctx, "VACUUM (ANALYZE) peer_widgets")
	return err
}

// singleClient takes turns, SingleRounds times, between one client's PUTs
// of random keys (puts), one at a time on one connection, and pgbench of
// the same upsert with one client through the same PgBouncer, in the
// protocol of the saturation reference, each for the attack duration; and
// records every round and the percentiles over all of them. The fold
// sizes are read once around all rounds: pgbench's turns write nothing
// through the service.
func (r *benchRun) singleClient(ctx context.Context, puts []vegetaTarget) error {
	o := r.opts
	if o.SingleRounds == 0 {
		return nil
	}
	mode := "extended"
	if ref := r.report.UpsertReference(); ref != nil {
		mode = ref.Mode
	}
	spec := func(samples *[]time.Duration) attackSpec {
		return attackSpec{scenario: bench.PutOneClient, client: r.client, targeter: ring(puts), workers: 1, duration: o.Duration, keysPerRequest: 1, samples: samples}
	}
	if o.Warmup > 0 {
		w := spec(nil)
		w.duration = o.Warmup
		_ = attack(ctx, w)
	}
	s := &bench.SingleClient{Mode: mode}
	var putLat, upsertLat []time.Duration
	pr := pgbenchRun{addr: o.PGBouncer, mode: mode, clients: 1, script: filepath.Join(o.ArtifactDir, upsertScriptFile), logged: true}
	var err error
	s.Fold = r.writeFolds(ctx, bench.PutOneClient, func() {
		for i := range o.SingleRounds {
			r.logf("%s: round %d of %d: one client's PUTs, then pgbench -c 1 -M %s of the same upsert, %s each", bench.PutOneClient, i+1, o.SingleRounds, mode, o.Duration)
			put := attack(ctx, spec(&putLat))
			var up *bench.Baseline
			var lat []time.Duration
			if up, lat, err = r.runPgbench(ctx, pr); err != nil {
				return
			}
			upsertLat = append(upsertLat, lat...)
			s.Command = up.Command
			s.Rounds = append(s.Rounds, bench.SingleRound{PutRate: put.Throughput, UpsertRate: up.Throughput, Put: put.Latency, Upsert: up.Latency})
			r.logf("  PUT p50 %s p99 %s (%.1f%% success); upsert p50 %s p99 %s", bench.FormatDuration(put.Latency.P50), bench.FormatDuration(put.Latency.P99),
				100*put.Success, bench.FormatDuration(up.Latency.P50), bench.FormatDuration(up.Latency.P99))
		}
	})
	if err != nil {
		r.note("%s: pgbench -c 1 failed: %v", bench.PutOneClient, err)
		return nil
	}
	s.Put, s.Upsert = bench.Percentiles(putLat), bench.Percentiles(upsertLat)
	r.report.SingleClient = s
	return nil
}
