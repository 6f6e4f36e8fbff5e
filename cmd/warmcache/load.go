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

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/gateway"
	"github.com/warmcache/warmcache/internal/loadfmt"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// progressInterval is how often the progress bar of a load is drawn.
const progressInterval = 200 * time.Millisecond

// loadOptions are the arguments of a bulk load from a file.
type loadOptions struct {
	// Namespace is the namespace loaded into.
	Namespace string
	// Path is the file read; "-" means In.
	Path string
	// In is read when Path is "-".
	In io.Reader
	// Format is ndjson, csv, or auto: csv for a .csv file, ndjson
	// otherwise.
	Format string
	// Progress is on, off, or auto: a progress bar on stderr when it is a
	// terminal.
	Progress string
}

// load runs `warmcache load <namespace> [file]`.
func load(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache load", flag.ContinueOnError)
	format := fs.String("format", "auto", "input format: ndjson, csv, or auto (by the file's extension; ndjson for stdin)")
	progress := fs.String("progress", "auto", "progress bar on stderr: auto (when it is a terminal), on or off")
	cfg, help, err := subcommandConfig(config.LoadCommand, "warmcache load [flags] <namespace> [file.ndjson|file.csv|-]", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	if len(cfg.Args) < 1 || len(cfg.Args) > 2 {
		return errors.New("load: want a namespace and optionally a file (default stdin): warmcache load <namespace> [file]")
	}
	o := loadOptions{Namespace: cfg.Args[0], Path: "-", In: os.Stdin, Format: *format, Progress: *progress}
	if len(cfg.Args) == 2 {
		o.Path = cfg.Args[1]
	}
	return loadFile(ctx, cfg, o, stdout, stderr)
}

// loadFile bulk-loads NDJSON or CSV into a namespace, through the same
// path as POST /v1/kv/{namespace}/_load (COPY into a staging table, a merge
// by key with new versions, then the changed keys refreshed in Redis), with
// a Command assembly of cfg. It prints the counts and rows per second to
// stdout at the end, and the progress bar, the bad lines and the warnings
// to stderr. A file with bad lines loads nothing: they are printed and the
// error counts them.
func loadFile(ctx context.Context, cfg config.Config, o loadOptions, stdout, stderr io.Writer) error {
	format, err := loadFormat(o.Path, o.Format)
	if err != nil {
		return err
	}
	in, size, err := openLoadInput(o.Path, o.In)
	if err != nil {
		return err
	}
	defer in.Close()

	g, err := gateway.Open(ctx, cfg, gateway.Options{Role: gateway.Command, Logger: gateway.NewLogger(stderr, "warn")})
	if err != nil {
		return err
	}
	defer g.Close()
	svc := g.Service()
	ns, err := svc.Namespace(o.Namespace)
	if err != nil {
		return err
	}

	counted := &countingReader{r: in}
	maxRecord := int(cfg.Limits.MaxBodyBytes) + 4<<10
	var src warmcache.RecordReader
	if format == "csv" {
		src = loadfmt.NewCSV(counted, ns.KeyColumn, maxRecord)
	} else {
		src = loadfmt.NewNDJSON(counted, maxRecord)
	}
	records := &countingRecords{src: src}

	showBar := o.Progress == "on" || ((o.Progress == "" || o.Progress == "auto") && isTerminal(stderr))
	stopBar := startProgress(stderr, showBar, records, counted, size)
	res, err := svc.Load(ctx, o.Namespace, records)
	stopBar()
	return reportLoad(stdout, stderr, o.Path, o.Namespace, res, err)
}

// loadFormat returns the format of a load from path: format itself, or for
// auto (or empty) csv when path ends in .csv and ndjson otherwise.
func loadFormat(path, format string) (string, error) {
	switch format {
	case "ndjson", "csv":
		return format, nil
	case "", "auto":
		if strings.EqualFold(filepath.Ext(path), ".csv") {
			return "csv", nil
		}
		return "ndjson", nil
	}
	return "", fmt.Errorf("load: --format must be ndjson, csv or auto, got %q", format)
}

// openLoadInput opens the file at path, or takes stdin for "-", and
// returns its size when it is a regular file, or -1.
func openLoadInput(path string, stdin io.Reader) (io.ReadCloser, int64, error) {
	if path == "-" {
		return io.NopCloser(stdin), -1, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("load: %w", err)
	}
	size := int64(-1)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	return f, size, nil
}

// startProgress draws the progress of a load on stderr every
// progressInterval, when show is set, until the returned stop is called,
// which clears the line and returns once drawing has stopped.
func startProgress(stderr io.Writer, show bool, records *countingRecords, counted *countingReader, size int64) (stop func()) {
	if !show {
		return func() {}
	}
	done, drawn := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(drawn)
		t := time.NewTicker(progressInterval)
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
	return func() {
		close(done)
		<-drawn
	}
}

// reportLoad prints the outcome of a load of path into the namespace
// called name: the bad lines to stderr, or the counts to stdout and a
// warning about keys not refreshed to stderr. It returns the load's error.
func reportLoad(stdout, stderr io.Writer, path, name string, res warmcache.LoadResult, err error) error {
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
