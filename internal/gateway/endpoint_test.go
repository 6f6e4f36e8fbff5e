package gateway

import (
	"testing"
)

// Every endpoint prints as one line of the one format, which ParseLine
// reads back to the same endpoint; the lines are those the docs quote.
func TestEndpointLine(t *testing.T) {
	for _, c := range []struct {
		e    Endpoint
		line string
	}{
		{Endpoint{Transport: REST, Network: "tcp", Addr: "127.0.0.1:8080"},
			"warmcache: serving HTTP on http://127.0.0.1:8080"},
		{Endpoint{Transport: REST, Network: "tcp", Addr: "127.0.0.1:8443", TLS: true},
			"warmcache: serving HTTP on https://127.0.0.1:8443"},
		{Endpoint{Transport: REST, Network: "unix", Addr: "/var/run/warmcache/http.sock"},
			"warmcache: serving HTTP on unix:/var/run/warmcache/http.sock"},
		{Endpoint{Transport: GRPC, Network: "tcp", Addr: "127.0.0.1:9090"},
			"warmcache: serving gRPC on 127.0.0.1:9090"},
		{Endpoint{Transport: GRPC, Network: "tcp", Addr: "127.0.0.1:9090", TLS: true},
			"warmcache: serving gRPC on 127.0.0.1:9090 (TLS)"},
		{Endpoint{Transport: GRPC, Network: "unix", Addr: "/var/run/warmcache/grpc.sock"},
			"warmcache: serving gRPC on unix:/var/run/warmcache/grpc.sock"},
		{Endpoint{Transport: DaprHTTP, Network: "tcp", Addr: "127.0.0.1:3500"},
			"warmcache: serving the Dapr state API over HTTP on http://127.0.0.1:3500"},
		{Endpoint{Transport: DaprGRPC, Network: "tcp", Addr: "127.0.0.1:50001"},
			"warmcache: serving the Dapr state API over gRPC on 127.0.0.1:50001"},
		{Endpoint{Transport: DaprGRPC, Network: "tcp", Addr: "127.0.0.1:50001", TLS: true},
			"warmcache: serving the Dapr state API over gRPC on 127.0.0.1:50001 (TLS)"},
		{Endpoint{Transport: DaprComponent, Network: "unix", Addr: "/tmp/dapr-components-sockets/warmcache.sock",
			Name: "state.warmcache", Note: "components statestore=statestore, orders=orders"},
			"warmcache: serving the Dapr pluggable state store state.warmcache on unix:/tmp/dapr-components-sockets/warmcache.sock (components statestore=statestore, orders=orders)"},
	} {
		if got := c.e.Line(); got != c.line {
			t.Errorf("Line of %+v:\n got %s\nwant %s", c.e, got, c.line)
		}
		got, ok := ParseLine(c.line + "\n")
		if !ok || got != c.e {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v", c.line, got, ok, c.e)
		}
	}
	for _, line := range []string{
		"warmcache: no API keys configured: serving unauthenticated, on loopback and unix sockets only",
		"warmcache: serving HTTP",
		"warmcache: serving gRPC on ",
		"warmcache: serving carrier pigeons on 127.0.0.1:1",
		"serving HTTP on http://127.0.0.1:8080",
	} {
		if e, ok := ParseLine(line); ok {
			t.Errorf("ParseLine(%q) = %+v; want no endpoint", line, e)
		}
	}
}
