package abuse

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// abuse is one hostile or careless request and the answer it must get.
type abuse struct {
	name   string
	method string
	path   string // "RAW:" + a request target sent exactly as written
	token  string
	header []string
	body   func() io.Reader
	status int
	code   string // the error shape's code; "" for a success or a non-JSON answer
	says   string // text the error message must contain, such as the bound
}

func str(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }

// class is a group of abuses with the bound on the process's peak RSS
// while they run.
type class struct {
	name     string
	maxRSS   int64
	parallel int // each abuse is sent this many times at once; 0 means 1
	abuses   []abuse
}

const bigKey = 300 // bytes, over the default 256

// TestAbuseREST sends each class of bad input to the real binary over
// REST. Every answer must have the stated status and error shape, no
// client-caused error may be a 5xx, and the peak RSS while a class runs
// must stay under its bound.
func TestAbuseREST(t *testing.T) {
	s := startServer(t, "--max-load-bytes", "8388608", "--load-idle-timeout", "2s")
	w := tokenWriter
	// Data the reads below find.
	for _, k := range []string{"1", "2", "3"} {
		if r := s.do(t, "PUT", "/v1/kv/widgets/"+k, w, strings.NewReader(`{"ok":true,"n":`+k+`}`)); r.status != 200 {
			t.Fatalf("seed PUT %s: %d %s", k, r.status, r.body)
		}
	}
	etag := s.do(t, "GET", "/v1/kv/widgets/1", w, nil).header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}

	nested := func(n int) func() io.Reader {
		return str(strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n))
	}
	tenMB := func() io.Reader { return bytes.NewReader(bytes.Repeat([]byte("x"), 10*mib)) }
	manyKeys := func() io.Reader { // 1 MiB of keys: about 350,000 of them
		var b bytes.Buffer
		b.WriteString(`{"keys":[`)
		for i := 0; b.Len() < mib-16; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d", i%1000)
		}
		b.WriteString(`]}`)
		return &b
	}
	nul := `{"match":{"a":"\u0000"}}`

	classes := []class{
		{name: "keys", maxRSS: 64 * mib, abuses: []abuse{
			{name: "oversized key", method: "GET", path: "/v1/kv/texts/" + strings.Repeat("k", bigKey), token: w, status: 400, code: "invalid_key", says: "256 bytes"},
			{name: "empty key", method: "GET", path: "/v1/kv/widgets/", token: w, status: 404, code: "no_route"},
			{name: "bigint overflow", method: "GET", path: "/v1/kv/widgets/9223372036854775808", token: w, status: 400, code: "invalid_key"},
			{name: "bigint not a number", method: "GET", path: "/v1/kv/widgets/1e3", token: w, status: 400, code: "invalid_key"},
			{name: "percent-encoded bigint", method: "GET", path: "/v1/kv/widgets/%31", token: w, status: 200},
			{name: "encoded text key", method: "PUT", path: "/v1/kv/texts/a%62", token: w, body: str(`{"spelled":"a%62"}`), status: 200},
			{name: "the same key spelled plainly", method: "GET", path: "/v1/kv/texts/ab", token: w, status: 200},
			{name: "doubly encoded key is text", method: "GET", path: "/v1/kv/widgets/%2531", token: w, status: 400, code: "invalid_key"},
			// net/http refuses the request line itself, before any handler: a
			// plain 400, not the JSON shape.
			{name: "malformed escape", method: "GET", path: "RAW:/v1/kv/texts/a%zz", token: w, status: 400},
			{name: "C1 control", method: "PUT", path: "/v1/kv/texts/a%C2%85b", token: w, body: str(`1`), status: 400, code: "invalid_key", says: "U+0085"},
			{name: "bidi override", method: "PUT", path: "/v1/kv/texts/a%E2%80%AEb", token: w, body: str(`1`), status: 400, code: "invalid_key", says: "U+202E"},
			{name: "NUL in key", method: "GET", path: "/v1/kv/texts/a%00b", token: w, status: 400, code: "invalid_key"},
			{name: "invalid UTF-8 key", method: "GET", path: "/v1/kv/texts/a%FFb", token: w, status: 400, code: "invalid_key"},
			{name: "SQL-looking key is data", method: "PUT", path: "/v1/kv/texts/1%27%3B%20DROP%20TABLE%20texts%3B--", token: w, body: str(`{"v":1}`), status: 200},
			{name: "SQL-looking key reads back", method: "GET", path: "/v1/kv/texts/1%27%3B%20DROP%20TABLE%20texts%3B--", token: w, status: 200},
			{name: "oversized _mget key", method: "POST", path: "/v1/kv/texts/_mget", token: w, body: str(`{"keys":["` + strings.Repeat("k", bigKey) + `"]}`), status: 400, code: "invalid_key"},
			{name: "_mget key overflow", method: "POST", path: "/v1/kv/widgets/_mget", token: w, body: str(`{"keys":[99999999999999999999]}`), status: 400, code: "invalid_request"},
			{name: "_mget key not an integer", method: "POST", path: "/v1/kv/widgets/_mget", token: w, body: str(`{"keys":[1.5]}`), status: 400, code: "invalid_request"},
		}},
		{name: "paths", maxRSS: 64 * mib, abuses: []abuse{
			{name: "dot-dot namespace", method: "GET", path: "RAW:/v1/kv/../metrics", token: tokenReader, status: 404, code: "unknown_namespace"},
			{name: "encoded traversal", method: "GET", path: "/v1/kv/..%2F..%2Fetc%2Fpasswd/1", token: tokenReader, status: 404, code: "unknown_namespace"},
			{name: "slash in namespace", method: "GET", path: "/v1/kv/widgets%2F1/1", token: tokenReader, status: 404, code: "unknown_namespace"},
			{name: "NUL in namespace", method: "GET", path: "/v1/kv/wid%00gets/1", token: tokenReader, status: 404, code: "unknown_namespace"},
			{name: "SQL in namespace", method: "GET", path: "/v1/kv/widgets%3BDROP%20TABLE%20widgets/1", token: tokenReader, status: 404, code: "unknown_namespace"},
			{name: "unknown route", method: "GET", path: "/v1/kv/widgets/1/extra", token: tokenReader, status: 404, code: "no_route"},
			{name: "wrong method", method: "PATCH", path: "/v1/kv/widgets/1", token: w, status: 405, code: "method_not_allowed"},
		}},
		{name: "bodies", maxRSS: 64 * mib, abuses: []abuse{
			{name: "non-JSON value", method: "PUT", path: "/v1/kv/widgets/7", token: w, body: str(`not json`), status: 400, code: "invalid_value"},
			{name: "empty value", method: "PUT", path: "/v1/kv/widgets/7", token: w, body: str(``), status: 400, code: "invalid_value"},
			{name: "deeply nested value", method: "PUT", path: "/v1/kv/widgets/7", token: w, body: nested(10000), status: 400, code: "invalid_value", says: "64 levels"},
			{name: "NUL in value", method: "PUT", path: "/v1/kv/widgets/7", token: w, body: str(`{"a":"\u0000"}`), status: 400, code: "invalid_value"},
			{name: "invalid UTF-8 in value", method: "PUT", path: "/v1/kv/widgets/7", token: w, body: str("{\"a\":\"\xff\"}"), status: 400, code: "invalid_value"},
			{name: "huge exponent in value", method: "PUT", path: "/v1/kv/widgets/7", token: w, body: str(`{"a":1e999999}`), status: 400, code: "invalid_value"},
			{name: "wrong content type PUT", method: "PUT", path: "/v1/kv/widgets/7", token: w, header: []string{"Content-Type", "text/plain"}, body: str(`1`), status: 415, code: "unsupported_media_type"},
			{name: "wrong content type _mget", method: "POST", path: "/v1/kv/widgets/_mget", token: w, header: []string{"Content-Type", "application/xml"}, body: str(`<keys/>`), status: 415, code: "unsupported_media_type"},
			{name: "wrong content type _load", method: "POST", path: "/v1/kv/widgets/_load", token: w, header: []string{"Content-Type", "image/png"}, body: str(`x`), status: 415, code: "unsupported_media_type"},
			{name: "_mget not JSON", method: "POST", path: "/v1/kv/widgets/_mget", token: w, body: str(`keys=1,2`), status: 400, code: "invalid_request"},
			{name: "_mget unknown field", method: "POST", path: "/v1/kv/widgets/_mget", token: w, body: str(`{"keys":[1],"all":true}`), status: 400, code: "invalid_request"},
			{name: "_mget trailing data", method: "POST", path: "/v1/kv/widgets/_mget", token: w, body: str(`{"keys":[1]}{}`), status: 400, code: "invalid_request"},
			{name: "_query too deep", method: "POST", path: "/v1/kv/widgets/_query", token: w, body: str(`{"match":` + strings.Repeat(`{"a":`, 33) + `1` + strings.Repeat(`}`, 33) + `}`), status: 400, code: "invalid_value", says: "32 levels"},
			{name: "_query NUL", method: "POST", path: "/v1/kv/widgets/_query", token: w, body: str(nul), status: 400, code: "invalid_value"},
			{name: "_query invalid UTF-8", method: "POST", path: "/v1/kv/widgets/_query", token: w, body: str("{\"match\":{\"a\":\"\xc3\x28\"}}"), status: 400, code: "invalid_value"},
			{name: "_query huge exponent", method: "POST", path: "/v1/kv/widgets/_query", token: w, body: str(`{"match":{"n":1e999999999}}`), status: 400, code: "invalid_value"},
			{name: "_query SQL-looking filter is data", method: "POST", path: "/v1/kv/widgets/_query", token: w, body: str(`{"match":{"a":"' OR '1'='1"}}`), status: 200},
			{name: "_query forged cursor", method: "POST", path: "/v1/kv/widgets/_query", token: w, body: str(`{"match":{},"after":"azI6MQ.AAAAAAAAAAAAAAAAAAAAAA"}`), status: 400, code: "invalid_value", says: "cursor"},
			{name: "_query match not an object", method: "POST", path: "/v1/kv/widgets/_query", token: w, body: str(`{"match":"x"}`), status: 400, code: "invalid_value"},
			{name: "bad If-Match", method: "PUT", path: "/v1/kv/widgets/7", token: w, header: []string{"If-Match", "W/\"x\""}, body: str(`1`), status: 400, code: "invalid_request"},
			{name: "_load bad line", method: "POST", path: "/v1/kv/widgets/_load", token: w, body: str("{\"key\":1,\"value\":{}}\nnot json\n"), status: 400, code: "invalid_value", says: "line 2"},
			{name: "_load key overflow", method: "POST", path: "/v1/kv/widgets/_load", token: w, body: str(`{"key":99999999999999999999,"value":{}}`), status: 400, code: "invalid_value"},
		}},
		{name: "10 MB bodies", maxRSS: 64 * mib, abuses: []abuse{
			{name: "PUT 10 MB", method: "PUT", path: "/v1/kv/widgets/8", token: w, body: tenMB, status: 413, code: "too_large", says: "1048576 bytes"},
			{name: "_mget 10 MB", method: "POST", path: "/v1/kv/widgets/_mget", token: w, body: tenMB, status: 413, code: "too_large", says: "1048576 bytes"},
			{name: "_query 10 MB", method: "POST", path: "/v1/kv/widgets/_query", token: w, body: tenMB, status: 413, code: "too_large", says: "1048576 bytes"},
			{name: "_load 10 MB", method: "POST", path: "/v1/kv/widgets/_load", token: w, body: tenMB, status: 413, code: "too_large", says: "8388608 bytes"},
			{name: "_load 10 MB chunked", method: "POST", path: "/v1/kv/widgets/_load", token: w,
				body: func() io.Reader { return io.MultiReader(tenMB()) }, status: 413, code: "too_large", says: "8388608 bytes"},
		}},
		{name: "_mget of 1 MiB of keys, 4 at once", maxRSS: 64 * mib, parallel: 4, abuses: []abuse{
			{name: "_mget over the key bound", method: "POST", path: "/v1/kv/widgets/_mget", token: w, body: manyKeys, status: 413, code: "too_large", says: "1000 keys"},
		}},
		{name: "access", maxRSS: 64 * mib, abuses: []abuse{
			{name: "no key", method: "GET", path: "/v1/kv/widgets/1", status: 401, code: "unauthenticated"},
			{name: "bad key", method: "GET", path: "/v1/kv/widgets/1", token: "not-a-token", status: 401, code: "unauthenticated"},
			{name: "empty bearer", method: "GET", path: "/v1/kv/widgets/1", header: []string{"Authorization", "Bearer "}, status: 401, code: "unauthenticated"},
			{name: "basic auth", method: "GET", path: "/v1/kv/widgets/1", header: []string{"Authorization", "Basic dXNlcjpwYXNz"}, status: 401, code: "unauthenticated"},
			{name: "other namespace's key reads", method: "GET", path: "/v1/kv/widgets/1", token: tokenOther, status: 403, code: "forbidden"},
			{name: "other namespace's key writes", method: "PUT", path: "/v1/kv/widgets/1", token: tokenOther, body: str(`1`), status: 403, code: "forbidden"},
			{name: "read-only key writes", method: "PUT", path: "/v1/kv/widgets/1", token: tokenReader, body: str(`1`), status: 403, code: "forbidden"},
			{name: "read-only key deletes", method: "DELETE", path: "/v1/kv/widgets/1", token: tokenReader, status: 403, code: "forbidden"},
			{name: "read-only key loads", method: "POST", path: "/v1/kv/widgets/_load", token: tokenReader, body: str(`{"key":1,"value":1}`), status: 403, code: "forbidden"},
			{name: "read-only key reads", method: "GET", path: "/v1/kv/widgets/1", token: tokenReader, status: 200},
			{name: "write to a read-only namespace", method: "PUT", path: "/v1/kv/readonly/1", token: w, body: str(`1`), status: 405, code: "read_only"},
			{name: "no key on an unknown namespace", method: "GET", path: "/v1/kv/nope/1", status: 401, code: "unauthenticated"},
		}},
		{name: "If-None-Match", maxRSS: 64 * mib, abuses: []abuse{
			{name: "exact", method: "GET", path: "/v1/kv/widgets/1", token: w, header: []string{"If-None-Match", etag}, status: 304},
			{name: "weak", method: "GET", path: "/v1/kv/widgets/1", token: w, header: []string{"If-None-Match", "W/" + etag}, status: 304},
			{name: "list", method: "GET", path: "/v1/kv/widgets/1", token: w, header: []string{"If-None-Match", `"0", ` + etag}, status: 304},
			{name: "star", method: "GET", path: "/v1/kv/widgets/1", token: w, header: []string{"If-None-Match", "*"}, status: 304},
			{name: "other tag", method: "GET", path: "/v1/kv/widgets/1", token: w, header: []string{"If-None-Match", `"0"`}, status: 200},
		}},
	}
	for _, c := range classes {
		t.Run(c.name, func(t *testing.T) {
			s.resetPeakRSS(t)
			for _, a := range c.abuses {
				n := max(c.parallel, 1)
				replies := make([]reply, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var body io.Reader
						if a.body != nil {
							body = a.body()
						}
						replies[i] = s.do(t, a.method, a.path, a.token, body, a.header...)
					}()
				}
				wg.Wait()
				for _, r := range replies {
					checkReply(t, a, r)
				}
			}
			peak := s.peakRSS(t)
			t.Logf("%s: peak RSS %.1f MiB (bound %d MiB)", c.name, float64(peak)/mib, c.maxRSS/mib)
			if peak > c.maxRSS {
				t.Errorf("%s: peak RSS %.1f MiB over the bound of %d MiB", c.name, float64(peak)/mib, c.maxRSS/mib)
			}
		})
	}

	// SQL-looking keys and filters were data: the tables are all there.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM texts WHERE key = $1", "1'; DROP TABLE texts;--").Scan(&n); err != nil || n != 1 {
		t.Errorf("the SQL-looking key is not one row of texts: %d, %v", n, err)
	}
	if strings.Contains(s.log.String(), `"level":"ERROR"`) {
		t.Errorf("client errors were logged as internal errors:\n%s", s.log.TailLines(20))
	}
}

// checkReply asserts the status, the error shape and the message of an
// abuse's answer, and that no client-caused error is a 5xx.
func checkReply(t *testing.T, a abuse, r reply) {
	t.Helper()
	if r.status >= 500 {
		t.Errorf("%s: %d, a server error for a client's request: %s", a.name, r.status, r.body)
		return
	}
	if r.status != a.status {
		t.Errorf("%s: status %d, want %d: %.200s", a.name, r.status, a.status, r.body)
		return
	}
	if a.code != "" && r.errorCode() != a.code {
		t.Errorf("%s: error %.200s, want the shape {\"error\":{\"code\":%q,...}}", a.name, r.body, a.code)
	}
	if a.says != "" && !strings.Contains(r.message(), a.says) {
		t.Errorf("%s: message %q does not say %q", a.name, r.message(), a.says)
	}
}

// A client's writes that violate the table's constraint are its own
// errors (400), however many: they do not open the circuit breaker, and
// another client's cold reads and writes go on.
func TestConstraintViolationsDoNotOpenBreaker(t *testing.T) {
	s := startServer(t, "--breaker-threshold", "3")
	for i := range 12 {
		r := s.do(t, "PUT", fmt.Sprintf("/v1/kv/checked/%d", i), tokenWriter, strings.NewReader(`{"bad":true}`))
		if r.status != 400 || r.errorCode() != "invalid_value" || !strings.Contains(r.message(), "check constraint") {
			t.Fatalf("CHECK violation %d: %d %s, want 400 invalid_value naming the constraint", i, r.status, r.body)
		}
	}
	if r := s.do(t, "GET", "/v1/kv/widgets/424242", tokenReader, nil); r.status != 404 || r.errorCode() != "not_found" {
		t.Fatalf("another client's cold GET after 12 violations: %d %s, want 404 from the warehouse", r.status, r.body)
	}
	if r := s.do(t, "PUT", "/v1/kv/checked/1", tokenWriter, strings.NewReader(`{"ok":1}`)); r.status != 200 {
		t.Fatalf("a good write after 12 violations: %d %s", r.status, r.body)
	}
}

// A _load body that stops arriving is cut off after the idle timeout with
// 408, and nothing of it is written: not even the lines it sent.
func TestStalledLoadWritesNothing(t *testing.T) {
	s := startServer(t, "--load-idle-timeout", "1s")
	pr, pw := io.Pipe()
	go func() {
		fmt.Fprintln(pw, `{"key":501,"value":{"a":1}}`)
		fmt.Fprintln(pw, `{"key":502,"value":{"a":2}}`)
		// ... and then nothing, until the server gives up.
	}()
	defer pw.Close()
	r := s.do(t, "POST", "/v1/kv/widgets/_load", tokenWriter, pr)
	if r.status != http.StatusRequestTimeout || r.errorCode() != "timeout" || !strings.Contains(r.message(), "nothing was loaded") {
		t.Fatalf("stalled load: %d %s, want 408 timeout saying nothing was loaded", r.status, r.body)
	}
	for _, k := range []string{"501", "502"} {
		if g := s.do(t, "GET", "/v1/kv/widgets/"+k, tokenWriter, nil); g.status != 404 {
			t.Errorf("key %s of the stalled load: %d %s, want 404", k, g.status, g.body)
		}
	}
}

// A _load whose client goes away mid-body loads nothing, and the server
// does not count it as its own error.
func TestBrokenOffLoadWritesNothing(t *testing.T) {
	s := startServer(t)
	c, err := net.Dial("tcp", strings.TrimPrefix(s.http, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/kv/widgets/_load HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n", tokenWriter)
	fmt.Fprintln(c, `{"key":701,"value":{"a":1}}`)
	fmt.Fprintln(c, `{"key":702,"value":{"a":2}}`)
	time.Sleep(200 * time.Millisecond) // the lines reach the server before the cut
	c.Close()
	// A request after the cut is served; by then the cut load has ended.
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range []string{"701", "702"} {
		if g := s.do(t, "GET", "/v1/kv/widgets/"+k, tokenWriter, nil); g.status != 404 {
			t.Errorf("key %s of the broken-off load: %d %s, want 404", k, g.status, g.body)
		}
	}
	for time.Now().Before(deadline) && !strings.Contains(s.log.String(), `"op":"load"`) {
		time.Sleep(50 * time.Millisecond)
	}
	log := s.log.String()
	if !strings.Contains(log, `"op":"load"`) {
		t.Fatalf("the broken-off load was not audited within 10s; log:\n%s", s.log.TailLines(20))
	}
	if strings.Contains(log, "internal error") || strings.Contains(log, `"level":"ERROR"`) {
		t.Errorf("a client's broken-off body was logged as the server's error:\n%s", s.log.TailLines(20))
	}
}

// One CSV record of 63 MiB, under the default 64 MiB body bound, is
// refused with 413 naming the record bound, without holding the record:
// the peak RSS stays under the stated bound.
func TestCSVRecordBounded(t *testing.T) {
	s := startServer(t)
	const bound = 64 * mib
	s.resetPeakRSS(t)
	body := io.MultiReader(strings.NewReader("key,value\n1,\""), bytes.NewReader(bytes.Repeat([]byte("y"), 63*mib)), strings.NewReader("\"\n"))
	r := s.do(t, "POST", "/v1/kv/widgets/_load", tokenWriter, body, "Content-Type", "text/csv")
	if r.status != 413 || r.errorCode() != "too_large" || !strings.Contains(r.message(), "CSV record is longer than 1052672 bytes") {
		t.Errorf("a CSV record of 63 MiB: %d %.300s, want 413 naming the record bound", r.status, r.body)
	}
	peak := s.peakRSS(t)
	t.Logf("CSV record of 63 MiB: peak RSS %.1f MiB (bound %d MiB)", float64(peak)/mib, bound/mib)
	if peak > bound {
		t.Errorf("peak RSS %.1f MiB over the bound of %d MiB", float64(peak)/mib, bound/mib)
	}
}

// A header flood is refused with 431 and slow headers are cut off by the
// server's header deadline; neither is a 5xx.
func TestHeaderFloodAndSlowHeaders(t *testing.T) {
	s := startServer(t)
	var hdr []string
	for i := range 2000 {
		hdr = append(hdr, fmt.Sprintf("X-Flood-%d", i), strings.Repeat("v", 64))
	}
	if r := s.do(t, "GET", "/v1/kv/widgets/1", tokenWriter, nil, hdr...); r.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("2000 headers of 64 bytes: %d, want 431", r.status)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.http, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	// The server's header deadline is 5s; nothing more is sent.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	answer, _ := io.ReadAll(conn)
	took := time.Since(start)
	t.Logf("slow headers: connection ended after %v with %q", took.Round(time.Millisecond), firstLine(answer))
	if took > 20*time.Second {
		t.Errorf("a client that never finished its headers held the connection %v", took)
	}
	if bytes.HasPrefix(answer, []byte("HTTP/1.1 5")) {
		t.Errorf("slow headers answered %q", firstLine(answer))
	}
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\r\n"))
	return string(line)
}
