package httpapi_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAnswersOfTheServer sends raw requests over TCP to the REST handler
// served by net/http as the gateway serves it (64 KiB of request headers),
// and checks which ones net/http answers itself, in plain text and before
// the handler sees them, and which reach the handler and are answered in
// JSON. The README's REST API section and openapi.json's description list
// the former: they are not in the JSON error shape, and cannot be without
// replacing net/http's server.
func TestAnswersOfTheServer(t *testing.T) {
	const maxHeaderBytes = 64 << 10 // the gateway's http.Server.MaxHeaderBytes
	c := newContract(t)
	srv := httptest.NewUnstartedServer(c.h)
	srv.Config.MaxHeaderBytes = maxHeaderBytes
	srv.Start()
	defer srv.Close()

	header := func(n int) string { return strings.Repeat("X-Flood: "+strings.Repeat("a", 100)+"\r\n", n) }
	for _, tc := range []struct {
		name, request string
		status        int
		// byServer: net/http answers in plain text or without a body,
		// and after an error closes the connection; otherwise the
		// handler answers JSON.
		byServer bool
	}{
		{"malformed percent-escape in the path", "GET /v1/kv/widgets/%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, true},
		{"truncated percent-escape in the path", "GET /v1/kv/frozen/a%2 HTTP/1.1\r\nHost: x\r\n\r\n", 400, true},
		{"space in the path", "GET /v1/kv/frozen/a b HTTP/1.1\r\nHost: x\r\n\r\n", 400, true},
		{"control character in the path", "GET /v1/kv/frozen/a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", 400, true},
		{"header line without a colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Broken\r\n\r\n", 400, true},
		{"invalid header name", "GET /healthz HTTP/1.1\r\nHost: x\r\nX Broken: 1\r\n\r\n", 400, true},
		{"control character in a header value", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400, true},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, true},
		{"two Hosts", "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, true},
		{"malformed Host", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n", 400, true},
		{"invalid Content-Length", "PUT /v1/kv/widgets/1 HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n", 400, true},
		{"two Content-Lengths", "PUT /v1/kv/widgets/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n12", 400, true},
		{"header flood", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + header(800) + "\r\n", 431, true},
		{"request line over the bound", "GET /v1/kv/frozen/" + strings.Repeat("a", maxHeaderBytes+8<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", 431, true},
		{"unsupported Transfer-Encoding", "PUT /v1/kv/widgets/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, true},
		{"unsupported protocol version", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, true},
		{"unsupported expectation", "PUT /v1/kv/widgets/1 HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\n1", 417, true},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 200, true},

		{"malformed percent-escape in the query", "GET /healthz?x=%zz HTTP/1.1\r\nHost: x\r\n\r\n", 200, false},
		{"headers within the bound", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + header(500) + "\r\n", 200, false},
		{"escaped key", "GET /v1/kv/frozen/a%2Fb HTTP/1.1\r\nHost: x\r\n\r\n", 404, false},
		{"absolute-form target", "GET http://x/v1/kv/widgets/%31 HTTP/1.1\r\nHost: x\r\n\r\n", 404, false},
		{"asterisk-form target", "GET * HTTP/1.1\r\nHost: x\r\n\r\n", 404, false},
		{"HTTP/1.0 without Host", "GET /healthz HTTP/1.0\r\n\r\n", 200, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			// The server may answer before it has read the whole request.
			go func() { _, _ = io.WriteString(conn, tc.request) }()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %.200q", resp.StatusCode, tc.status, body)
			}
			ct := resp.Header.Get("Content-Type")
			switch {
			case tc.byServer && len(body) > 0 && ct != "text/plain; charset=utf-8":
				t.Errorf("net/http's answer has Content-Type %q, body %.200q", ct, body)
			case tc.byServer && tc.status >= 400 && !resp.Close:
				t.Error("net/http's answer keeps the connection open")
			case !tc.byServer && ct != "application/json":
				t.Errorf("the handler's answer has Content-Type %q, body %.200q", ct, body)
			}
		})
	}
}
