package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/loadfmt"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// LoadOptions are the arguments of a bulk load from a file.
type LoadOptions struct {
	// Namespace is the namespace loaded into.
	Namespace string
	// Path is the file read; "-" or empty means In.
	Path string
	// In is read when Path is "-" or empty.
	In io.Reader
	// Format is ndjson, csv, or auto (the default): csv for a .csv
	// file, ndjson otherwise.
	Format string
	// Progress is on, off, or auto (the default): a progress bar on
	// Stderr when it is a terminal.
	Progress string
	// Stdout receives the summary; Stderr the progress bar, the bad lines
	// and the warnings.
	Stdout, Stderr io.Writer
}

// Load bulk-loads NDJSON or CSV into a namespace, through the same path as
// POST /v1/kv/{namespace}/_load (COPY into a staging table, a merge by key
// with new versions, then the changed keys refreshed in Redis), with a
// Command assembly of cfg. It prints the counts and rows per second at the
// end. A file with bad lines loads nothing: they are printed and the error
// counts them.
func Load(ctx context.Context, cfg config.Config, o LoadOptions, log *slog.Logger) error {
	path, format := o.Path, o.Format
	if path == "" {
		path = "-"
	}
	if format == "" || format == "auto" {
		format = "ndjson"
		if strings.EqualFold(filepath.Ext(path), ".csv") {
			format = "csv"
		}
	}
	if format != "ndjson" && format != "csv" {
		return fmt.Errorf("load: --format must be ndjson, csv or auto, got %q", o.Format)
	}
	stderr := o.Stderr

	in, size := o.In, int64(-1)
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

	g, err := Open(ctx, cfg, Options{Role: Command, Logger: log})
	if err != nil {
		return err
	}
	defer g.Close()
	svc := g.Service()
	name := o.Namespace
	ns, err := svc.Namespace(name)
	if err != nil {
		return err
	}

	counted := &countingReader{r: in}
	var src warmcache.RecordReader
	if format == "csv" {
		src = loadfmt.NewCSV(counted, ns.KeyColumn, int(cfg.Limits.MaxBodyBytes)+4<<10)
	} else {
		src = loadfmt.NewNDJSON(counted, int(cfg.Limits.MaxBodyBytes)+4<<10)
	}
	records := &countingRecords{src: src}

	showBar := o.Progress == "on" || ((o.Progress == "" || o.Progress == "auto") && isTerminal(stderr))
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
	fmt.Fprintf(o.Stdout, "loaded %s into %s: %s lines, %s inserted, %s updated, %s unchanged in %s (%s rows/s); "+
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
