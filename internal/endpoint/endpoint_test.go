package endpoint_test

import (
	"testing"

	"github.com/warmcache/warmcache/internal/endpoint"
)

// Every endpoint prints as one line of the one format, which ParseLine
// reads back to the same endpoint; the lines are those the docs quote.
func TestEndpointLine(t *testing.T) {
	for _, c := range []struct {
		e    endpoint.Endpoint
		line string
	}{
		{endpoint.Endpoint{Transport: endpoint.REST, Network: "tcp", Addr: "127.0.0.1:8080"},
			"warmcache: serving HTTP on http://127.0.0.1:8080"},
		{endpoint.Endpoint{Transport: endpoint.REST, Network: "tcp", Addr: "127.0.0.1:8443", TLS: true},
			"warmcache: serving HTTP on https://127.0.0.1:8443"},
		{endpoint.Endpoint{Transport: endpoint.REST, Network: "unix", Addr: "/var/run/warmcache/http.sock"},
			"warmcache: serving HTTP on unix:/var/run/warmcache/http.sock"},
		{endpoint.Endpoint{Transport: endpoint.GRPC, Network: "tcp", Addr: "127.0.0.1:9090"},
			"warmcache: serving gRPC on 127.0.0.1:9090"},
		{endpoint.Endpoint{Transport: endpoint.GRPC, Network: "tcp", Addr: "127.0.0.1:9090", TLS: true},
			"warmcache: serving gRPC on 127.0.0.1:9090 (TLS)"},
		{endpoint.Endpoint{Transport: endpoint.GRPC, Network: "unix", Addr: "/var/run/warmcache/grpc.sock"},
			"warmcache: serving gRPC on unix:/var/run/warmcache/grpc.sock"},
		{endpoint.Endpoint{Transport: endpoint.DaprHTTP, Network: "tcp", Addr: "127.0.0.1:3500"},
			"warmcache: serving the Dapr state API over HTTP on http://127.0.0.1:3500"},
		{endpoint.Endpoint{Transport: endpoint.DaprGRPC, Network: "tcp", Addr: "127.0.0.1:50001"},
			"warmcache: serving the Dapr state API over gRPC on 127.0.0.1:50001"},
		{endpoint.Endpoint{Transport: endpoint.DaprGRPC, Network: "tcp", Addr: "127.0.0.1:50001", TLS: true},
			"warmcache: serving the Dapr state API over gRPC on 127.0.0.1:50001 (TLS)"},
		{endpoint.Endpoint{Transport: endpoint.DaprComponent, Network: "unix", Addr: "/tmp/dapr-components-sockets/warmcache.sock",
			Name: "state.warmcache", Note: "components statestore=statestore, orders=orders"},
			"warmcache: serving the Dapr pluggable state store state.warmcache on unix:/tmp/dapr-components-sockets/warmcache.sock (components statestore=statestore, orders=orders)"},
	} {
		if got := c.e.Line(); got != c.line {
			t.Errorf("Line of %+v:\n got %s\nwant %s", c.e, got, c.line)
		}
		got, ok := endpoint.ParseLine(c.line + "\n")
		if !ok || got != c.e {
			t.Errorf("endpoint.ParseLine(%q) = %+v, %v; want %+v", c.line, got, ok, c.e)
		}
	}
	for _, line := range []string{
		"warmcache: no API keys configured: serving unauthenticated, on loopback and unix sockets only",
		"warmcache: serving HTTP",
		"warmcache: serving gRPC on ",
		"warmcache: serving carrier pigeons on 127.0.0.1:1",
		"serving HTTP on http://127.0.0.1:8080",
	} {
		if e, ok := endpoint.ParseLine(line); ok {
			t.Errorf("endpoint.ParseLine(%q) = %+v; want no endpoint", line, e)
		}
	}
}
