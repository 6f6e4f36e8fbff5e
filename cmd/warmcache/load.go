package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/loadfmt"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// load runs `warmcache load <namespace> [file]`: a bulk load of NDJSON or
// CSV through the same path as POST /v1/kv/{namespace}/_load (COPY into a
// staging table, a merge by key with new versions, then the changed keys
// refreshed in Redis). It shows a progress bar when stderr is a terminal and
// prints the counts and rows per second at the end.
func load(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache load", flag.ContinueOnError)
	format := fs.String("format", "auto", "input format: ndjson, csv, or auto (by the file's extension; ndjson for stdin)")
	progress := fs.String("progress", "auto", "progress bar on stderr: auto (when it is a terminal), on or off")
	cfg, help, err := subcommandConfig("warmcache load", "warmcache load [flags] <namespace> [file.ndjson|file.csv|-]", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	if len(cfg.Args) < 1 || len(cfg.Args) > 2 {
		return errors.New("load: want a namespace and optionally a file (default stdin): warmcache load <namespace> [file]")
	}
	name, path := cfg.Args[0], "-"
	if len(cfg.Args) == 2 {
		path = cfg.Args[1]
	}
	if *format == "auto" {
		*format = "ndjson"
		if strings.EqualFold(filepath.Ext(path), ".csv") {
			*format = "csv"
		}
	}
	if *format != "ndjson" && *format != "csv" {
		return fmt.Errorf("load: --format must be ndjson, csv or auto, got %q", *format)
	}

	in, size := io.Reader(os.Stdin), int64(-1)
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("load: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
		in = f
	}

	log := newLogger(stderr, "warn")
	store, err := pgstore.Open(ctx, storeOptions(cfg, 2), cfg.Namespaces, prometheus.NewRegistry(), log)
	if err != nil {
		return err
	}
	defer store.Close()
	cache, err := rediscache.New(redisOptions(cfg), nil, log)
	if err != nil {
		return err
	}
	defer cache.Close()
	// The refreshed keys must be written in the namespaces' current
	// generations.
	if _, err := startGenerations(ctx, cfg, store, cache, nearTier{}, prometheus.NewRegistry(), log); err != nil {
		return err
	}
	svc, err := warmcache.NewService(cache, store, cfg.Namespaces, prometheus.NewRegistry(), log, warmcache.Options{
		HotTimeout: cfg.HotTimeout, WarmTimeout: cfg.WarmTimeout, MaxValueBytes: int(cfg.MaxBodyBytes),
		// The file is local and trusted: stream it, without a bound.
		DirectLoads: true, MaxLoadBytes: -1,
	})
	if err != nil {
		return err
	}
	ns, err := svc.Namespace(name)
	if err != nil {
		return err
	}

	counted := &countingReader{r: in}
	var src warmcache.RecordReader
	if *format == "csv" {
		src = loadfmt.NewCSV(counted, ns.KeyColumn, int(cfg.MaxBodyBytes)+4<<10)
	} else {
		src = loadfmt.NewNDJSON(counted, int(cfg.MaxBodyBytes)+4<<10)
	}
	records := &countingRecords{src: src}

	showBar := *progress == "on" || (*progress == "auto" && isTerminal(stderr))
	done := make(chan struct{})
	barDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(barDone)
		if !showBar {
			<-done
			return
		}
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(stderr, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprint(stderr, "\r\033[K"+progressLine(records.n.Load(), counted.n.Load(), size, time.Since(start)))
			}
		}
	}()
	res, err := svc.Load(ctx, name, records)
	close(done)
	<-barDone

	var le *warmcache.LoadError
	if errors.As(err, &le) {
		for _, l := range le.Lines {
			fmt.Fprintf(stderr, "%s: %s\n", path, l.Error())
		}
		if le.Count > int64(len(le.Lines)) {
			fmt.Fprintf(stderr, "%s: reading stopped after %d bad lines\n", path, le.Count)
		}
		return fmt.Errorf("load: %d bad line(s) in %s; nothing was loaded", le.Count, path)
	}
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	fmt.Fprintf(stdout, "loaded %s into %s: %s lines, %s inserted, %s updated, %s unchanged in %s (%s rows/s); "+
		"%s keys refreshed in Redis in %s of it\n",
		path, name, thousands(res.Lines), thousands(res.Inserted), thousands(res.Updated), thousands(res.Unchanged),
		res.Duration.Round(time.Millisecond), thousands(int64(res.RowsPerSecond())), thousands(res.Refreshed), res.Refresh.Round(time.Millisecond))
	if res.NotRefreshed > 0 {
		fmt.Fprintf(stderr, "warning: %s changed keys could not be refreshed in Redis; older values may be served until their TTL ends\n", thousands(res.NotRefreshed))
	}
	return nil
}

// progressLine draws the progress of a load: a bar when the size is known.
func progressLine(rows, bytes, size int64, elapsed time.Duration) string {
	rate := float64(rows) / max(elapsed.Seconds(), 0.001)
	stats := fmt.Sprintf("%s rows  %s rows/s  %.1f MiB", thousands(rows), thousands(int64(rate)), float64(bytes)/(1<<20))
	if size <= 0 {
		return stats
	}
	const width = 30
	frac := min(float64(bytes)/float64(size), 1)
	filled := int(frac * width)
	return fmt.Sprintf("[%s%s] %3.0f%%  %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled), frac*100, stats)
}

// thousands formats n with commas: 1,234,567.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// isTerminal reports whether w is a character device, such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// countingReader counts the bytes read through it; the count may be read
// concurrently.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countingRecords counts the records read through it; the count may be
// read concurrently.
type countingRecords struct {
	src warmcache.RecordReader
	n   atomic.Int64
}

func (c *countingRecords) Read() (warmcache.LoadRecord, error) {
	r, err := c.src.Read()
	if err == nil {
		c.n.Add(1)
	}
	return r, err
}
