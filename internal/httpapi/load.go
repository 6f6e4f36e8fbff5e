package httpapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/warmcache/warmcache/internal/loadfmt"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// loadDeadline bounds reading a _load body and writing its answer; the
// server's own read and write timeouts are sized for single requests.
const loadDeadline = 10 * time.Minute

// loadResponse is the answer of a successful _load.
type loadResponse struct {
	Lines         int64   `json:"lines"`
	Inserted      int64   `json:"inserted"`
	Updated       int64   `json:"updated"`
	Unchanged     int64   `json:"unchanged"`
	Refreshed     int64   `json:"refreshed"`
	NotRefreshed  int64   `json:"not_refreshed"`
	Seconds       float64 `json:"seconds"`
	RefreshSecs   float64 `json:"refresh_seconds"`
	RowsPerSecond float64 `json:"rows_per_second"`
}

// load returns the handler of POST /v1/kv/{namespace}/_load: a bulk load of
// the body, NDJSON lines of {"key":...,"value":...} (Content-Type
// application/x-ndjson, or none) or CSV with a header line (text/csv). The
// body is read as it arrives, one bounded line or record at a time, and
// bounded by maxBytes (zero means 64 MiB): over it the answer is 413. A
// body that sends nothing for idle (zero means 30s) is cut off with 408,
// and one that breaks off with 400; in both cases nothing is loaded, since
// the core writes to the warehouse only once the body has ended well. It
// answers the counts; a body with bad lines loads nothing and answers 400
// invalid_value with the first bad lines by number.
func (a *api) load(maxBytes int64, idle time.Duration) http.HandlerFunc {
	if maxBytes <= 0 {
		maxBytes = warmcache.DefaultMaxLoadBytes
	}
	if idle <= 0 {
		idle = warmcache.DefaultLoadIdleTimeout
	}
	return func(w http.ResponseWriter, r *http.Request) {
		name, err := pathParam(r, "namespace")
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		ns, err := a.svc.Namespace(name)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		if r.ContentLength > maxBytes {
			a.writeError(w, r, fmt.Errorf("%w: a load body is at most %d bytes; nothing was loaded", warmcache.ErrTooLarge, maxBytes))
			return
		}
		rc := http.NewResponseController(w)
		deadline := time.Now().Add(loadDeadline)
		_ = rc.SetWriteDeadline(deadline) // not every writer supports deadlines
		body := &idleReader{r: http.MaxBytesReader(w, r.Body, maxBytes), rc: rc, idle: idle, deadline: deadline}
		var src warmcache.RecordReader
		switch mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt {
		case "", "application/x-ndjson", "application/jsonl", "application/json":
			src = loadfmt.NewNDJSON(body, 0)
		case "text/csv":
			src = loadfmt.NewCSV(body, ns.KeyColumn, 0)
		default:
			a.writeError(w, r, fmt.Errorf("%w: Content-Type %q: a load is application/x-ndjson or text/csv", errUnsupportedMedia, mt))
			return
		}
		res, err := a.svc.Load(r.Context(), name, src)
		if err != nil && body.err != nil && !errors.Is(err, warmcache.ErrInvalidValue) {
			// The body itself failed: over the bound, stalled, or cut.
			err = fmt.Errorf("%w; nothing was loaded", bodyError(body.err))
		}
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jsonMarshal(loadResponse{
			Lines: res.Lines, Inserted: res.Inserted, Updated: res.Updated, Unchanged: res.Unchanged,
			Refreshed: res.Refreshed, NotRefreshed: res.NotRefreshed,
			Seconds: res.Duration.Seconds(), RefreshSecs: res.Refresh.Seconds(), RowsPerSecond: res.RowsPerSecond(),
		}))
	}
}

// idleReader reads a request body with a read deadline renewed before each
// read: idle from now, never past deadline. It keeps the first read error
// other than io.EOF.
type idleReader struct {
	r        io.Reader
	rc       *http.ResponseController
	idle     time.Duration
	deadline time.Time
	err      error
}

func (b *idleReader) Read(p []byte) (int, error) {
	next := time.Now().Add(b.idle)
	if next.After(b.deadline) {
		next = b.deadline
	}
	_ = b.rc.SetReadDeadline(next) // not every reader supports deadlines
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.err == nil {
		b.err = err
	}
	return n, err
}
