package service_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	dapr "github.com/dapr/go-sdk/client"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it keeps the name of every
// span it is sent, by trace ID.
type otlpReceiver struct {
	mu     sync.Mutex
	spans  map[string][]string
	gotNew chan struct{}
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				id := hex.EncodeToString(s.GetTraceId())
				o.spans[id] = append(o.spans[id], s.GetName())
			}
		}
	}
	o.mu.Unlock()
	select {
	case o.gotNew <- struct{}{}:
	default:
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil)
}

// waitFor waits until the trace has a span named name, or 30s.
func (o *otlpReceiver) waitFor(t *testing.T, traceID, name string) []string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		o.mu.Lock()
		names := append([]string(nil), o.spans[traceID]...)
		o.mu.Unlock()
		for _, n := range names {
			if n == name {
				return names
			}
		}
		select {
		case <-o.gotNew:
		case <-deadline:
			t.Fatalf("no span %q in trace %s within 30s; got %q", name, traceID, names)
		}
	}
}

// TestTracingFromEnvironment serves with OTEL_EXPORTER_OTLP_ENDPOINT set and
// checks that the traceparent of a REST, a gRPC and a Dapr request carries
// into the spans exported over OTLP/HTTP.
func TestTracingFromEnvironment(t *testing.T) {
	recv := &otlpReceiver{spans: map[string][]string{}, gotNew: make(chan struct{}, 1)}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	// The OTLP exporter reads the process environment, as in production.
	otel := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL,
		"OTEL_BSP_SCHEDULE_DELAY":     "50",
	}
	for k, v := range otel {
		t.Setenv(k, v)
	}
	s := startDapr(t, otel)

	const (
		restTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		grpcTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
		daprTrace = "6bf92f3577b34da6a3ce929d0e0e4738"
	)
	traceparent := func(trace string) string { return "00-" + trace + "-00f067aa0ba902b7-01" }

	req, _ := http.NewRequest(http.MethodGet, s.http+"/v1/kv/widgets/1", nil)
	req.Header.Set("traceparent", traceparent(restTrace))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	names := recv.waitFor(t, restTrace, "GET /v1/kv/{namespace}/{key}")
	t.Logf("REST trace: %q", names)
	recv.waitFor(t, restTrace, "warmcache.flight")

	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent(grpcTrace))
	c := warmcachev1.NewCacheClient(dialGRPC(t, s.grpc))
	if _, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "2", Value: []byte(`{"v": 1}`)}); err != nil {
		t.Fatal(err)
	}
	names = recv.waitFor(t, grpcTrace, "warmcache.v1.Cache/Put")
	t.Logf("gRPC trace: %q", names)

	dc := daprClient(t, s.daprGRPC)
	dctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent(daprTrace))
	if err := dc.SaveState(dctx, "statestore", "traced", []byte(`{"v": 1}`), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.GetStateWithConsistency(dctx, "statestore", "traced", nil, dapr.StateConsistencyEventual); err != nil {
		t.Fatal(err)
	}
	names = recv.waitFor(t, daprTrace, "dapr.proto.runtime.v1.Dapr/SaveState")
	names = append(names, recv.waitFor(t, daprTrace, "dapr.proto.runtime.v1.Dapr/GetState")...)
	t.Logf("Dapr trace: %q", names)
}
