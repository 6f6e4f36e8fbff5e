package config

import (
	"fmt"
	"strings"
)

// Tracing is what the environment says about tracing: `serve` reads it
// from the standard OTEL_* variables (TracingFromEnv), and package tracing
// starts the exporter it asks for. It is plain settings, so that config
// does not link OpenTelemetry.
type Tracing struct {
	// Enabled is true when traces are to be exported.
	Enabled bool
	// Protocol is the OTLP protocol: "grpc" or "http/protobuf"; empty
	// when Enabled is false.
	Protocol string
	// Reason says which variable decided, for the log.
	Reason string
}

// TracingFromEnv reads the tracing switch from the standard variables:
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none, turns it off;
//   - OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint
//     (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT),
//     turns it on;
//   - otherwise it is off.
//
// The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL: grpc, or http/protobuf (the default). Any
// other exporter or protocol is an error. The rest of the OTEL_* settings
// (endpoint, headers, timeout, TLS, sampler, service name and resource
// attributes) are read by the OpenTelemetry SDK and its exporter.
func TracingFromEnv(getenv func(string) string) (Tracing, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Tracing{Reason: "OTEL_SDK_DISABLED=true"}, nil
	}
	var c Tracing
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return Tracing{Reason: "OTEL_TRACES_EXPORTER=none"}, nil
	case "otlp":
		c = Tracing{Enabled: true, Reason: "OTEL_TRACES_EXPORTER=otlp"}
	case "":
		for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			if getenv(v) != "" {
				c = Tracing{Enabled: true, Reason: v + " is set"}
				break
			}
		}
		if !c.Enabled {
			return Tracing{Reason: "no OTEL_TRACES_EXPORTER nor OTLP endpoint"}, nil
		}
	default:
		return Tracing{}, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exp)
	}
	c.Protocol = "http/protobuf"
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			c.Protocol = p
			break
		}
	}
	if c.Protocol != "grpc" && c.Protocol != "http/protobuf" {
		return Tracing{}, fmt.Errorf("tracing: OTLP protocol %q: only grpc and http/protobuf are supported", c.Protocol)
	}
	return c, nil
}
