// Package endpoint is the one format of the lines that warmcache serve
// prints for each address it serves (Endpoint.Line), and its reader
// (ParseLine), for the gateway that prints them and for whoever starts the
// binary: the end-to-end tests and the load tools (internal/localstack's
// Serve).
package endpoint

import (
	"strings"
)

// Transport is what an endpoint serves.
type Transport string

// The transports, in the order the gateway listens on them. Each is named in the
// log by its value and on stdout by its Title.
const (
	REST          Transport = "http"           // the REST API (internal/httpapi)
	GRPC          Transport = "grpc"           // the gRPC API (internal/grpcapi)
	DaprHTTP      Transport = "dapr-http"      // Dapr's state API over HTTP (internal/dapr/stateapi)
	DaprGRPC      Transport = "dapr-grpc"      // Dapr's state API over gRPC (internal/dapr/stateapi)
	DaprComponent Transport = "dapr-component" // daprd's pluggable state store (internal/dapr/pluggable)
)

// transports are the titles of the transports, as the serving lines say
// them.
var transports = []struct {
	t     Transport
	title string
	http  bool // addressed by an http:// or https:// URL
}{
	{REST, "HTTP", true},
	{GRPC, "gRPC", false},
	{DaprHTTP, "the Dapr state API over HTTP", true},
	{DaprGRPC, "the Dapr state API over gRPC", false},
	{DaprComponent, "the Dapr pluggable state store", false},
}

// Title is how the serving lines name the transport.
func (t Transport) Title() string {
	for _, d := range transports {
		if d.t == t {
			return d.title
		}
	}
	return string(t)
}

func (t Transport) http() bool {
	for _, d := range transports {
		if d.t == t {
			return d.http
		}
	}
	return false
}

// Endpoint is one address that warmcache serves a transport on.
type Endpoint struct {
	Transport Transport
	// Network is "tcp" or "unix".
	Network string
	// Addr is host:port on tcp (with the port the system chose when the
	// configuration asked for port 0, once the gateway listens), or the socket's
	// path on unix.
	Addr string
	// TLS reports whether the endpoint serves TLS.
	TLS bool
	// Name is the name the transport is served under, where it has one:
	// the pluggable state store's component type (state.warmcache).
	Name string
	// Note says more about the endpoint, for a human: the components of
	// the pluggable state store.
	Note string
}

// URL is the address a client dials: http://host:port or https://host:port
// for an HTTP transport on tcp, host:port for gRPC on tcp, unix:path on a
// unix socket.
func (e Endpoint) URL() string {
	switch {
	case e.Network == "unix":
		return "unix:" + e.Addr
	case e.Transport.http() && e.TLS:
		return "https://" + e.Addr
	case e.Transport.http():
		return "http://" + e.Addr
	}
	return e.Addr
}

// linePrefix starts every serving line.
const linePrefix = "warmcache: serving "

// Line is the line that the gateway's Serve prints on stdout for the
// endpoint, in the one format of every endpoint:
//
//	warmcache: serving <title>[ <name>] on <url>[ (<notes>)]
//
// where the notes are "TLS" for TLS not said by an https:// URL, and the
// endpoint's Note. ParseLine reads it back.
func (e Endpoint) Line() string {
	var b strings.Builder
	b.WriteString(linePrefix)
	b.WriteString(e.Transport.Title())
	if e.Name != "" {
		b.WriteString(" " + e.Name)
	}
	b.WriteString(" on " + e.URL())
	var notes []string
	if e.TLS && !e.Transport.http() {
		notes = append(notes, "TLS")
	}
	if e.Note != "" {
		notes = append(notes, e.Note)
	}
	if len(notes) > 0 {
		b.WriteString(" (" + strings.Join(notes, "; ") + ")")
	}
	return b.String()
}

// ParseLine reads an endpoint from a line that Line printed; ok is false
// for any other line.
func ParseLine(line string) (e Endpoint, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), linePrefix)
	if !ok {
		return Endpoint{}, false
	}
	for _, d := range transports {
		after, ok := strings.CutPrefix(rest, d.title+" ")
		if !ok {
			continue
		}
		e.Transport = d.t
		if !strings.HasPrefix(after, "on ") {
			e.Name, after, _ = strings.Cut(after, " ")
		}
		url, ok := strings.CutPrefix(after, "on ")
		if !ok {
			return Endpoint{}, false
		}
		if i := strings.Index(url, " ("); i >= 0 && strings.HasSuffix(url, ")") {
			url, e.Note = url[:i], url[i+2:len(url)-1]
		}
		if n, ok := strings.CutPrefix(e.Note, "TLS"); ok && (n == "" || strings.HasPrefix(n, "; ")) {
			e.TLS, e.Note = true, strings.TrimPrefix(n, "; ")
		}
		e.Network = "tcp"
		switch {
		case strings.HasPrefix(url, "unix:"):
			e.Network, e.Addr = "unix", strings.TrimPrefix(url, "unix:")
		case strings.HasPrefix(url, "https://"):
			e.TLS, e.Addr = true, strings.TrimPrefix(url, "https://")
		default:
			e.Addr = strings.TrimPrefix(url, "http://")
		}
		return e, e.Addr != ""
	}
	return Endpoint{}, false
}
