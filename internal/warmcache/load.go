package warmcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// LoadRecord is one record of a bulk load as its source gives it, before
// validation.
type LoadRecord struct {
	// Line is the record's 1-based line number in the source.
	Line int64
	// Key is the raw key, as in a URL path.
	Key string
	// Value is the value's bytes, JSON text (a LayoutBytes namespace takes
	// no loads).
	Value []byte
}

// RecordReader yields the records of a bulk load. Read returns io.EOF after
// the last record. A record that cannot be decoded is returned as an error
// that wraps a *LineError, and reading may go on after it; any other error
// ends the load. Package loadfmt reads the two formats the transports
// accept, NDJSON and CSV; gRPC feeds records from its stream.
type RecordReader interface {
	Read() (LoadRecord, error)
}

// LineError is a bad line of a load source.
type LineError struct {
	Line int64
	Err  error
}

// Error returns "line N: reason".
func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the reason.
func (e *LineError) Unwrap() error { return e.Err }

// LoadRow is a validated record as the warehouse loads it.
type LoadRow struct {
	Line  int64
	Key   Key
	Value []byte
}

// LoadRows iterates the validated rows of a load, in the manner of
// database/sql's Rows: Next advances and reports whether a row is there, Row
// returns it, and Err, once Next has returned false, says whether the source
// ended well. A Loader must roll back when Err is not nil.
type LoadRows interface {
	Next() bool
	Row() LoadRow
	Err() error
}

// LoadCounts is what a Loader did.
type LoadCounts struct {
	// Inserted, Updated and Unchanged count distinct keys: new keys,
	// keys whose value changed (they get a new version), and keys whose
	// stored value was already equal (they keep their version).
	Inserted, Updated, Unchanged int64
	// Changed are the inserted and updated keys, for the hot tier.
	Changed []Key
}

// Loader is the warm tier's bulk load. A warm tier that implements it
// serves Service.Load. Implementations are safe for concurrent use.
type Loader interface {
	// Load writes rows into ns in one transaction, merged by key: the
	// last row of a key wins, and every inserted or changed row takes a
	// new version from the version sequence. If rows.Err() is not nil
	// after the last row, or anything fails, nothing is committed and the
	// error is returned (wrapping rows.Err()'s error when that was the
	// cause).
	Load(ctx context.Context, ns *Namespace, rows LoadRows) (LoadCounts, error)
}

// LoadResult is the outcome of Service.Load.
type LoadResult struct {
	// Lines is the number of records read, good and bad.
	Lines int64
	// Inserted, Updated and Unchanged are the Loader's counts.
	Inserted, Updated, Unchanged int64
	// Refreshed is the number of changed keys written to the hot tier at
	// their new version after the commit.
	Refreshed int64
	// NotRefreshed is the number of changed keys that the hot tier could
	// not take within the refresh budget. An older value of such a key may
	// be served from the hot tier until its TTL ends.
	NotRefreshed int64
	// BadLines are the first bad lines (at most MaxReportedBadLines); with
	// any bad line, nothing is loaded.
	BadLines []LineError
	// Duration is the time from the first read to the end of the refresh;
	// Refresh is the part of it spent refreshing the hot tier.
	Duration, Refresh time.Duration
}

// RowsPerSecond returns the records read per second of Duration.
func (r LoadResult) RowsPerSecond() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Lines) / r.Duration.Seconds()
}

// LoadError is the error of a load with bad lines: nothing was loaded. It
// wraps ErrInvalidValue.
type LoadError struct {
	// Lines are the first bad lines, at most MaxReportedBadLines.
	Lines []LineError
	// Count is the number of bad lines seen before reading stopped.
	Count int64
}

// MaxReportedBadLines bounds the bad lines a load reports; reading stops at
// the next one.
const MaxReportedBadLines = 100

// Error lists the first bad lines.
func (e *LoadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d bad line(s), nothing was loaded: ", e.Count)
	const shown = 5
	for i, l := range e.Lines {
		if i == shown {
			fmt.Fprintf(&b, "; and %d more", e.Count-shown)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(l.Error())
	}
	return b.String()
}

// Unwrap returns ErrInvalidValue.
func (e *LoadError) Unwrap() error { return ErrInvalidValue }

const (
	// loadRefreshChunk is how many changed keys are read back and filled
	// in one round trip each.
	loadRefreshChunk = 500
	// loadRefreshBudget bounds the time spent retrying hot-tier fills
	// after a load, for example across a Redis Cluster failover.
	loadRefreshBudget = 30 * time.Second
)

// Load bulk-loads the records of src into namespace, which must be
// writable. Each record's key and value are validated as for Put. Bad lines
// are collected (reading stops after MaxReportedBadLines of them) and, if
// there is any, nothing is committed and the error is a *LoadError that
// wraps ErrInvalidValue; the result still counts the lines.
//
// A load never holds a warehouse connection while it waits for its
// source: the validated records are first spooled to an unlinked temporary
// file (bounded by MaxLoadBytes of keys and values), and only once the
// source has ended well does the warm tier load them, in one transaction
// (see Loader). So a source that stalls or breaks off leaves nothing
// written. At most MaxLoads loads are in progress at once (a load over the
// bound fails at once with ErrOverloaded), and at most MaxLoadWrites of
// them write to the warehouse at once (the others wait, without a
// connection). With DirectLoads the source is streamed into the
// transaction as it is read instead, for trusted local sources.
//
// After the commit, every changed key is read back from the warehouse and
// written to the hot tier at its new version, so a reload never leaves an
// older value there: versions order this fill against concurrent reads, as
// for Put. The refresh goes on if ctx is cancelled after the commit, and
// retries the hot tier with backoff for up to 30s in all (a Redis
// failover); keys it could not refresh are counted in NotRefreshed and
// logged.
//
// A namespace of opaque bytes (LayoutBytes) takes no loads: its error
// wraps ErrInvalidValue.
//
// Load has no deadline of its own: ctx bounds it. Errors wrap
// ErrUnknownNamespace, ErrReadOnly, ErrInvalidValue, ErrTooLarge (the
// records exceed MaxLoadBytes; a value over MaxValueBytes is a bad line),
// ErrOverloaded (too many loads), ErrUnavailable (the warm tier has no bulk
// load, or is failing), ErrConflict, or are src's read errors, unchanged.
// Load is safe for concurrent use.
func (s *Service) Load(ctx context.Context, namespace string, src RecordReader) (LoadResult, error) {
	start := time.Now()
	ns, err := s.Namespace(namespace)
	if err != nil {
		return LoadResult{}, err
	}
	if !ns.Writable {
		return LoadResult{}, fmt.Errorf("%w: %q", ErrReadOnly, ns.Name)
	}
	if ns.Opaque() {
		return LoadResult{}, fmt.Errorf("%w: namespace %q stores opaque bytes, which load files (NDJSON, CSV) do not carry; write them with PUT or a transaction", ErrInvalidValue, ns.Name)
	}
	loader, ok := s.warm.(Loader)
	if !ok {
		return LoadResult{}, fmt.Errorf("%w: the warehouse does not take bulk loads", ErrUnavailable)
	}
	select {
	case s.loads.slots <- struct{}{}:
		defer func() { <-s.loads.slots }()
	default:
		return LoadResult{}, fmt.Errorf("%w: more than %d loads in progress", ErrOverloaded, cap(s.loads.slots))
	}
	rows := &checkedRows{svc: s, ns: ns, src: src}
	var source LoadRows = rows
	if !s.opts.DirectLoads {
		sp, err := s.spool(ns, rows)
		if err != nil {
			return LoadResult{Lines: rows.lines, BadLines: rows.bad, Duration: time.Since(start)}, err
		}
		defer sp.close()
		source = sp
	}
	select {
	case s.loads.writes <- struct{}{}:
		defer func() { <-s.loads.writes }()
	case <-ctx.Done():
		return LoadResult{Lines: rows.lines}, ctx.Err()
	}
	if ok, wait := s.breaker.allow(); !ok {
		return LoadResult{Lines: rows.lines}, fmt.Errorf("%w: warehouse circuit breaker open for %v", ErrUnavailable, wait.Round(time.Millisecond))
	}
	counts, err := loader.Load(ctx, ns, source)
	res := LoadResult{Lines: rows.lines, BadLines: rows.bad}
	var loadErr *LoadError
	switch {
	case errors.As(err, &loadErr):
		s.breaker.release()
		res.Duration = time.Since(start)
		return res, loadErr
	case rows.readErr != nil:
		s.breaker.release()
		return res, rows.readErr
	case err != nil:
		// The warm tier classified err; a cancelled load counts for
		// nothing, a failing warehouse as a failure.
		return res, s.warmOutcome(ctx, ctx, err)
	}
	s.breaker.done(true)
	res.Inserted, res.Updated, res.Unchanged = counts.Inserted, counts.Updated, counts.Unchanged
	refreshStart := time.Now()
	res.Refreshed, res.NotRefreshed = s.refreshLoaded(context.WithoutCancel(ctx), ns, counts.Changed)
	res.Refresh = time.Since(refreshStart)
	res.Duration = time.Since(start)
	return res, nil
}

// refreshLoaded reads changed keys back from the warehouse, chunk by chunk,
// and fills the hot tier with them. It returns how many keys were filled and
// how many were not.
func (s *Service) refreshLoaded(ctx context.Context, ns *Namespace, keys []Key) (refreshed, failed int64) {
	deadline := time.Now().Add(loadRefreshBudget)
	for len(keys) > 0 {
		chunk := keys[:min(loadRefreshChunk, len(keys))]
		keys = keys[len(chunk):]
		if err := s.refreshChunk(ctx, ns, chunk, deadline); err != nil {
			failed += int64(len(chunk))
			s.log.LogAttrs(ctx, slog.LevelError, "hot tier refresh after a load failed; older values may be served until their TTL",
				slog.String("namespace", ns.Name), slog.Int("keys", len(chunk)), slog.Any("err", err))
			continue
		}
		refreshed += int64(len(chunk))
	}
	return refreshed, failed
}

// refreshChunk reads keys from the warehouse and fills the hot tier,
// retrying with backoff until deadline. After the deadline each chunk gets
// one try.
func (s *Service) refreshChunk(ctx context.Context, ns *Namespace, keys []Key, deadline time.Time) error {
	wait := 50 * time.Millisecond
	for {
		err := s.refreshOnce(ctx, ns, keys)
		if err == nil {
			return nil
		}
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		wait = min(2*wait, time.Second)
	}
}

// refreshOnce reads keys from the warehouse and brings the caches up to
// them once (see retire).
func (s *Service) refreshOnce(ctx context.Context, ns *Namespace, keys []Key) error {
	wctx, cancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
	entries, err := s.warm.LookupMany(wctx, ns, keys)
	cancel()
	if err != nil {
		return fmt.Errorf("read back %d keys: %w", len(keys), err)
	}
	return s.retire(ctx, ns, updateLoad, s.fills(ns, keys, entries), stamp{})
}

// checkedRows validates the records of a source as LoadRows.
type checkedRows struct {
	svc     *Service
	ns      *Namespace
	src     RecordReader
	row     LoadRow
	lines   int64
	bad     []LineError
	badN    int64
	readErr error
	done    bool
	bytes   int64 // of the keys and values read so far
}

// Next reads records until a good one, the end, or a read error. After the
// first bad line it yields no more rows but goes on reading to report the
// following bad lines, up to MaxReportedBadLines.
func (c *checkedRows) Next() bool {
	for !c.done {
		rec, err := c.src.Read()
		if errors.Is(err, io.EOF) {
			c.done = true
			return false
		}
		var le *LineError
		if errors.As(err, &le) {
			c.lines++
			c.addBad(*le)
			continue
		}
		if err != nil {
			c.readErr = fmt.Errorf("reading record %d: %w", c.lines+1, err)
			c.done = true
			return false
		}
		c.lines++
		c.bytes += int64(len(rec.Key) + len(rec.Value))
		if max := c.svc.opts.MaxLoadBytes; max > 0 && c.bytes > max {
			c.readErr = fmt.Errorf("%w: a load is at most %d bytes of keys and values; nothing was loaded", ErrTooLarge, max)
			c.done = true
			return false
		}
		key, err := c.ns.ParseKey(rec.Key)
		if err == nil {
			err = checkValue(c.ns, rec.Value, c.svc.opts.MaxValueBytes, c.svc.opts.MaxValueDepth)
		}
		if err != nil {
			c.addBad(LineError{Line: rec.Line, Err: err})
			continue
		}
		if c.badN > 0 {
			continue
		}
		c.row = LoadRow{Line: rec.Line, Key: key, Value: rec.Value}
		return true
	}
	return false
}

func (c *checkedRows) addBad(le LineError) {
	c.badN++
	if len(c.bad) < MaxReportedBadLines {
		c.bad = append(c.bad, le)
		return
	}
	c.done = true
}

// Row returns the current row.
func (c *checkedRows) Row() LoadRow { return c.row }

// Err returns the read error, or a *LoadError when there were bad lines.
func (c *checkedRows) Err() error {
	if c.readErr != nil {
		return c.readErr
	}
	if c.badN > 0 {
		return &LoadError{Lines: c.bad, Count: c.badN}
	}
	return nil
}
