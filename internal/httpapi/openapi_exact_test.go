package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPIRefusesWhatTheServiceRefuses sends requests that the service
// answers 400 and checks that the document refuses each too, so that a
// client or fuzzer that generates requests from the document's schemas
// does not make them: an empty key, control and bidirectional formatting
// characters, an integer key beyond int64, an _invalidate body that asks
// for nothing or for both, a null _query limit or cursor, and _load lines
// that are not {"key":...,"value":...}.
func TestOpenAPIRefusesWhatTheServiceRefuses(t *testing.T) {
	c := newContract(t)
	doc := loadAPIDoc(t)
	for _, tc := range []struct {
		name, method, path, contentType, body string
	}{
		{"mget empty key", http.MethodPost, "/v1/kv/frozen/_mget", "application/json", `{"keys":[""]}`},
		{"mget control character", http.MethodPost, "/v1/kv/frozen/_mget", "application/json", `{"keys":["a\u0001b"]}`},
		{"mget DEL", http.MethodPost, "/v1/kv/frozen/_mget", "application/json", `{"keys":["a\u007fb"]}`},
		{"mget C1", http.MethodPost, "/v1/kv/frozen/_mget", "application/json", `{"keys":["a\u0085b"]}`},
		{"mget bidi override", http.MethodPost, "/v1/kv/frozen/_mget", "application/json", `{"keys":["a\u202eb"]}`},
		{"mget integer beyond int64", http.MethodPost, "/v1/kv/widgets/_mget", "application/json", `{"keys":[18446744073709551616]}`},
		{"mget integer below int64", http.MethodPost, "/v1/kv/widgets/_mget", "application/json", `{"keys":[-18446744073709551616]}`},
		{"get control character", http.MethodGet, "/v1/kv/frozen/a%01b", "", ""},
		{"get bidi isolate", http.MethodGet, "/v1/kv/frozen/a%E2%81%A6b", "", ""},
		{"invalidate nothing", http.MethodPost, "/v1/kv/widgets/_invalidate", "application/json", `{}`},
		{"invalidate no keys", http.MethodPost, "/v1/kv/widgets/_invalidate", "application/json", `{"keys":[]}`},
		{"invalidate all false", http.MethodPost, "/v1/kv/widgets/_invalidate", "application/json", `{"all":false}`},
		{"invalidate both", http.MethodPost, "/v1/kv/widgets/_invalidate", "application/json", `{"keys":[1],"all":true}`},
		{"invalidate all with empty keys", http.MethodPost, "/v1/kv/widgets/_invalidate", "application/json", `{"all":true,"keys":[]}`},
		{"invalidate keys with all false", http.MethodPost, "/v1/kv/widgets/_invalidate", "application/json", `{"keys":[42],"all":false}`},
		{"invalidate all with null keys", http.MethodPost, "/v1/kv/widgets/_invalidate", "application/json", `{"keys":null,"all":true}`},
		{"invalidate empty key", http.MethodPost, "/v1/kv/frozen/_invalidate", "application/json", `{"keys":[""]}`},
		{"query null limit", http.MethodPost, "/v1/kv/widgets/_query", "application/json", `{"match":{},"limit":null}`},
		{"query null cursor", http.MethodPost, "/v1/kv/widgets/_query", "application/json", `{"match":{},"after":null}`},
		{"query null match", http.MethodPost, "/v1/kv/widgets/_query", "application/json", `{"match":null}`},
		{"load line without key", http.MethodPost, "/v1/kv/widgets/_load", "application/x-ndjson", "{\"key\":1,\"value\":1}\n{\"value\":2}\n"},
		{"load line without value", http.MethodPost, "/v1/kv/widgets/_load", "application/x-ndjson", "{\"key\":1}\n"},
		{"load line with another field", http.MethodPost, "/v1/kv/widgets/_load", "application/jsonl", "{\"key\":1,\"value\":1,\"ttl\":5}\n"},
		{"load line not an object", http.MethodPost, "/v1/kv/widgets/_load", "", "[1,2]\n"},
		{"load line empty key", http.MethodPost, "/v1/kv/frozen/_load", "application/x-ndjson", "{\"key\":\"\",\"value\":1}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			if ex := doc.request(req, []byte(tc.body)); ex.refused == nil {
				t.Errorf("the document takes %s %s %s, which the service refuses", tc.method, tc.path, tc.body)
			}
			w := c.doHeader(t, tc.method, tc.path, tc.body, http.Header{"Content-Type": {tc.contentType}})
			if w.Code/100 != 4 {
				t.Errorf("status %d, want a 4xx; body %s", w.Code, w.Body)
			}
		})
	}
}

// TestOpenAPILinks checks the links of the document: each names an
// operation of the document and only parameters that operation has, and
// takes a response header only where the response declares it; and the
// key's lifecycle and the bulk routes have theirs. Then it follows the
// lifecycle's links as a stateful client would (PUT, then GET, then a
// conditional DELETE with the ETag read, then a GET of the deleted key),
// each request made from the previous exchange by the link's expressions.
func TestOpenAPILinks(t *testing.T) {
	d := loadAPIDoc(t)
	ops := map[string]*openapi3.Operation{}
	params := map[string]map[string]bool{}
	for _, item := range d.doc.Paths.Map() {
		for _, op := range item.Operations() {
			ops[op.OperationID] = op
			names := map[string]bool{}
			for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
				for _, p := range list {
					names[p.Value.In+"."+p.Value.Name] = true
				}
			}
			params[op.OperationID] = names
		}
	}
	linked := map[string]bool{}
	for path, item := range d.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status, resp := range op.Responses.Map() {
				for name, link := range resp.Value.Links {
					where := fmt.Sprintf("%s %s %s link %s", method, path, status, name)
					linked[op.OperationID+"→"+link.Value.OperationID] = true
					if ops[link.Value.OperationID] == nil {
						t.Errorf("%s: no operation %q", where, link.Value.OperationID)
						continue
					}
					for p, expr := range link.Value.Parameters {
						in, pname, ok := strings.Cut(p, ".")
						if !ok {
							in, pname = "path", p
						}
						if !params[link.Value.OperationID][in+"."+pname] {
							t.Errorf("%s: %s has no %s parameter %q", where, link.Value.OperationID, in, pname)
						}
						if h, ok := strings.CutPrefix(fmt.Sprint(expr), "$response.header."); ok && declared(resp.Value.Headers, h) == nil {
							t.Errorf("%s: takes the header %s, which the response does not declare", where, h)
						}
					}
				}
			}
		}
	}
	for _, want := range []string{"putValue→getValue", "putValue→deleteValue", "getValue→putValue", "getValue→deleteValue",
		"deleteValue→getValue", "getValues→getValue", "loadValues→queryValues", "queryValues→queryValues",
		"invalidateValues→getValues"} {
		if !linked[want] {
			t.Errorf("no link %s", want)
		}
	}

	// Follow the lifecycle.
	c := newContract(t)
	put := c.do(t, http.MethodPut, "/v1/kv/widgets/11", `{"v":1}`)
	expect(t, put, http.StatusOK, "")
	prev := exchangeOf("/v1/kv/widgets/11", put)
	for _, step := range []struct {
		from, status, link string
		want               int
	}{
		{"putValue", "200", "GetWritten", http.StatusOK},
		{"getValue", "200", "DeleteIfMatch", http.StatusNoContent},
		{"deleteValue", "204", "GetDeleted", http.StatusNotFound},
	} {
		link := ops[step.from].Responses.Value(step.status).Value.Links[step.link]
		if link == nil {
			t.Fatalf("%s %s has no link %s", step.from, step.status, step.link)
		}
		method, path, header := request(t, d, link.Value, prev)
		w := c.doHeader(t, method, path, "", header)
		if w.Code != step.want {
			t.Fatalf("%s %s (link %s) answered %d, want %d: %s", method, path, step.link, w.Code, step.want, w.Body)
		}
		prev = exchangeOf(path, w)
	}
}

// linkExchange is a request and its answer, as link expressions read them.
type linkExchange struct {
	pathParams map[string]string
	header     http.Header
}

// exchangeOf records a /v1/kv/{namespace}/{key} request and its answer.
func exchangeOf(path string, w *httptest.ResponseRecorder) linkExchange {
	parts := strings.Split(path, "/")
	return linkExchange{pathParams: map[string]string{"namespace": parts[3], "key": parts[4]}, header: w.Header()}
}

// request makes the request a link describes from the exchange before:
// its operation's method and path, the path parameters and headers.
func request(t *testing.T, d *apiDoc, link *openapi3.Link, prev linkExchange) (method, path string, header http.Header) {
	t.Helper()
	header = http.Header{}
	values := map[string]string{}
	for p, expr := range link.Parameters {
		e := fmt.Sprint(expr)
		var v string
		switch {
		case strings.HasPrefix(e, "$request.path."):
			v = prev.pathParams[strings.TrimPrefix(e, "$request.path.")]
		case strings.HasPrefix(e, "$response.header."):
			v = prev.header.Get(strings.TrimPrefix(e, "$response.header."))
		default:
			t.Fatalf("link expression %q: this test reads only $request.path and $response.header", e)
		}
		if v == "" {
			t.Fatalf("link expression %q has no value in the exchange before", e)
		}
		if h, ok := strings.CutPrefix(p, "header."); ok {
			header.Set(h, v)
		} else {
			values[strings.TrimPrefix(p, "path.")] = v
		}
	}
	for tmpl, item := range d.doc.Paths.Map() {
		for m, op := range item.Operations() {
			if op.OperationID == link.OperationID {
				method, path = m, tmpl
			}
		}
	}
	for k, v := range values {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
	}
	return method, path, header
}
