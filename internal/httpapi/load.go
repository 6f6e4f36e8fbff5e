package httpapi

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// defaultMaxLoadBytes bounds a _load body when Options.MaxLoadBytes is zero.
const defaultMaxLoadBytes = 64 << 20

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
// body is streamed, not buffered, and bounded by maxBytes (zero means 64
// MiB). It answers the counts; a body with bad lines loads nothing and
// answers 400 invalid_value with the first bad lines by number.
func (a *api) load(maxBytes int64) http.HandlerFunc {
	if maxBytes <= 0 {
		maxBytes = defaultMaxLoadBytes
	}
	return func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "namespace")
		ns, err := a.svc.Namespace(name)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(loadDeadline)) // not every writer supports deadlines
		_ = rc.SetWriteDeadline(time.Now().Add(loadDeadline))
		body := http.MaxBytesReader(w, r.Body, maxBytes)
		var src warmcache.RecordReader
		switch mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt {
		case "", "application/x-ndjson", "application/jsonl", "application/json":
			src = warmcache.NewNDJSONReader(body, 0)
		case "text/csv":
			src = warmcache.NewCSVReader(body, ns.KeyColumn)
		default:
			a.writeError(w, r, fmt.Errorf("%w: Content-Type %q: a load is application/x-ndjson or text/csv", errInvalidRequest, mt))
			return
		}
		res, err := a.svc.Load(r.Context(), name, src)
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			err = fmt.Errorf("%w: a load body is at most %d bytes; nothing was loaded", warmcache.ErrTooLarge, tooLarge.Limit)
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
