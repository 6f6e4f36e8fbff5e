package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// queryRequest is the body of POST /v1/kv/{namespace}/_query.
type queryRequest struct {
	// Match is the JSON object the values must contain.
	Match json.RawMessage `json:"match"`
	// Limit is the page size; zero means the default (100).
	Limit nonNull[int] `json:"limit"`
	// After is the cursor of the previous page's "next".
	After nonNull[string] `json:"after"`
}

// nonNull is a field that may be absent but never null: encoding/json
// would read null as the zero value, which the OpenAPI document's types
// (an integer, a string) do not take.
type nonNull[T any] struct{ v T }

func (n *nonNull[T]) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return fmt.Errorf("%w: null where the field takes a %T", errInvalidRequest, n.v)
	}
	return json.Unmarshal(b, &n.v)
}

// query answers a non-key query from the warehouse:
//
//	{"items":[{"key":42,"value":{...},"version":7},...],"next":"<cursor>"}
//
// Keys are JSON numbers in bigint namespaces and strings otherwise; "next"
// is absent on the last page. The answer never comes from the hot tier,
// which the X-Cache: bypass header says, and is not cacheable.
func (a *api) query(w http.ResponseWriter, r *http.Request) {
	var req queryRequest
	if err := a.decode(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
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
	page, err := a.svc.Query(r.Context(), name, req.Match, req.Limit.v, req.After.v)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var buf bytes.Buffer
	buf.WriteString(`{"items":[`)
	for i, row := range page.Rows {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"key":`)
		if ns.KeyType == warmcache.KeyBigint {
			buf.WriteString(strconv.FormatInt(row.Key.Int, 10))
		} else {
			buf.Write(jsonMarshal(row.Key.Text))
		}
		buf.WriteString(`,"value":`)
		buf.Write(row.Entry.Value)
		buf.WriteString(`,"version":`)
		buf.WriteString(strconv.FormatInt(row.Entry.Version, 10))
		buf.WriteByte('}')
	}
	buf.WriteByte(']')
	if page.Next != "" {
		buf.WriteString(`,"next":`)
		buf.Write(jsonMarshal(page.Next))
	}
	buf.WriteByte('}')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Cache", "bypass")
	_, _ = w.Write(buf.Bytes())
}
