package config_test

import (
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

func TestTracingFromEnv(t *testing.T) {
	tests := []struct {
		env      map[string]string
		enabled  bool
		protocol string
		err      bool
	}{
		{env: nil},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, enabled: true, protocol: "http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, enabled: true, protocol: "grpc"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, enabled: true, protocol: "grpc"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: true},
	}
	for _, tt := range tests {
		c, err := config.TracingFromEnv(func(k string) string { return tt.env[k] })
		if (err != nil) != tt.err || c.Enabled != tt.enabled || c.Protocol != tt.protocol {
			t.Errorf("TracingFromEnv(%v) = %+v, %v; want enabled %v protocol %q error %v", tt.env, c, err, tt.enabled, tt.protocol, tt.err)
		}
	}
}
