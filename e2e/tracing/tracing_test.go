package tracing_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/tracing"
)

// secret is in every stored value; no span may carry it.
const secret = "s3cr3t-value-7c1f"

// stack is the REST API of the gateway over real PostgreSQL and Redis, with
// tracing on when tp is not nil.
type stack struct {
	handler http.Handler
	ns      string // widgets: no near cache
	nearNS  string // near: with the near cache
}

func newStack(tb testing.TB, tp *tracing.Provider) stack {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	namespaces, tables := config.DefaultNamespaces()
	namespaces = namespaces[:1] // widgets
	namespaces[0].NearTTL = 0
	near := *namespaces[0]
	near.Name, near.NearTTL = "near", time.Minute
	namespaces = append(namespaces, &near)

	dsn := testenv.NewDatabase(tb)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := schema.OpenMigrator(ctx, conn, tables[:1], log)
	if err == nil {
		_, err = m.Up(ctx)
	}
	conn.Close(ctx)
	if err != nil {
		tb.Fatalf("migrate: %v", err)
	}

	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN":     dsn,
		"WARMCACHE_REDIS_ADDRS":      testenv.RedisAddr(tb),
		"WARMCACHE_REDIS_PREFIX":     "trace-" + testenv.RandomSuffix(tb) + ":",
		"WARMCACHE_HOT_TIMEOUT":      "1s", // the suite's load must not make a fill miss its deadline
		"WARMCACHE_NEAR_CACHE_BYTES": "1048576",
		// Key tracking reports this instance's own PUT back to it, and the
		// report drops the key from the near cache at a moment of its own:
		// the near-cache span tree below needs the entry the PUT left.
		"WARMCACHE_NEAR_CACHE_TRACKING": "off",
	}
	cfg := harness.Config(tb, env)
	cfg.Namespaces = namespaces
	g := harness.Open(tb, cfg, harness.Options{Logger: log, Tracer: tp})
	return stack{handler: g.Handler(), ns: "widgets", nearNS: "near"}
}

// do serves one request in-process, with a W3C traceparent when parent is
// valid.
func (s stack) do(tb testing.TB, method, path, body string, parent trace.SpanContext) *httptest.ResponseRecorder {
	tb.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if parent.IsValid() {
		r.Header.Set("traceparent", "00-"+parent.TraceID().String()+"-"+parent.SpanID().String()+"-01")
	}
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, r)
	return w
}

func newProvider(tb testing.TB) (*tracing.Provider, *tracetest.InMemoryExporter) {
	tb.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.New(sdktrace.NewSimpleSpanProcessor(exp), "test")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// tree is the spans of one request, by parent.
type tree struct {
	root     tracetest.SpanStub
	children map[trace.SpanID][]tracetest.SpanStub
	all      tracetest.SpanStubs
}

// collect takes the exported spans of one request and checks that they
// form one tree under a server span whose parent is the caller's span.
func collect(t *testing.T, exp *tracetest.InMemoryExporter, parent trace.SpanContext) tree {
	t.Helper()
	spans := exp.GetSpans()
	exp.Reset()
	tr := tree{children: map[trace.SpanID][]tracetest.SpanStub{}, all: spans}
	roots := 0
	for _, s := range spans {
		if s.SpanContext.TraceID() != parent.TraceID() {
			t.Errorf("span %q is in trace %s, not the caller's %s", s.Name, s.SpanContext.TraceID(), parent.TraceID())
		}
		if s.Parent.SpanID() == parent.SpanID() {
			tr.root = s
			roots++
			if !s.Parent.IsRemote() || s.SpanKind != trace.SpanKindServer {
				t.Errorf("the request's span %q is not a server span continuing the remote traceparent", s.Name)
			}
			continue
		}
		tr.children[s.Parent.SpanID()] = append(tr.children[s.Parent.SpanID()], s)
	}
	if roots != 1 {
		t.Fatalf("%d spans are children of the caller's span, want 1 request span; spans: %s", roots, names(spans))
	}
	for _, s := range spans {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), secret) {
				t.Errorf("span %q attribute %s carries a stored value", s.Name, a.Key)
			}
		}
	}
	return tr
}

func names(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString(s.Name + "; ")
	}
	return b.String()
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// under returns the spans below id, depth first.
func (tr tree) under(id trace.SpanID) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, c := range tr.children[id] {
		out = append(out, c)
		out = append(out, tr.under(c.SpanContext.SpanID())...)
	}
	return out
}

func isRedis(s tracetest.SpanStub) bool { return attr(s, "db.system") == "redis" }
func isSQL(s tracetest.SpanStub) bool {
	return strings.HasPrefix(s.Name, "query") || attr(s, "db.system") == "postgresql" || attr(s, "db.system.name") == "postgresql"
}

func count(spans []tracetest.SpanStub, f func(tracetest.SpanStub) bool) int {
	n := 0
	for _, s := range spans {
		if f(s) {
			n++
		}
	}
	return n
}

func caller(n byte) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, n},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, n},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
}

func TestSpanTrees(t *testing.T) {
	tp, exp := newProvider(t)
	s := newStack(t, tp)
	exp.Reset() // the spans of the start, outside any request
	value := `{"widget": {"id": "7", "note": "` + secret + `"}}`

	t.Run("write", func(t *testing.T) {
		parent := caller(1)
		if w := s.do(t, http.MethodPut, "/v1/kv/widgets/7", value, parent); w.Code != http.StatusOK {
			t.Fatalf("PUT = %d %s", w.Code, w.Body)
		}
		tr := collect(t, exp, parent)
		if tr.root.Name != "PUT /v1/kv/{namespace}/{key}" {
			t.Errorf("request span %q, want it named by the route", tr.root.Name)
		}
		if attr(tr.root, "warmcache.namespace") != "widgets" || attr(tr.root, "warmcache.outcome") != "write" {
			t.Errorf("request span attributes %v; want namespace widgets, outcome write", tr.root.Attributes)
		}
		below := tr.under(tr.root.SpanContext.SpanID())
		if count(below, isSQL) < 1 || count(below, isRedis) < 1 {
			t.Errorf("below the write: %s; want the upsert's SQL span and the cache update's Redis span", names(below))
		}
	})

	t.Run("miss", func(t *testing.T) {
		if w := s.do(t, http.MethodPut, "/v1/kv/widgets/8", value, trace.SpanContext{}); w.Code != http.StatusOK {
			t.Fatalf("PUT = %d", w.Code)
		}
		if w := s.do(t, http.MethodPut, "/v1/kv/near/9", value, trace.SpanContext{}); w.Code != http.StatusOK {
			t.Fatalf("PUT = %d", w.Code)
		}
		exp.Reset()
		// A miss: key 11 is absent, so Redis misses and SQL answers.
		parent := caller(2)
		if w := s.do(t, http.MethodGet, "/v1/kv/widgets/11", "", parent); w.Code != http.StatusNotFound || w.Header().Get("X-Cache") != "miss" {
			t.Fatalf("GET = %d %s", w.Code, w.Header().Get("X-Cache"))
		}
		tr := collect(t, exp, parent)
		if attr(tr.root, "warmcache.outcome") != "miss" || attr(tr.root, "warmcache.found") != "false" {
			t.Errorf("request span attributes %v; want outcome miss, found false", tr.root.Attributes)
		}
		var flight *tracetest.SpanStub
		for _, c := range tr.children[tr.root.SpanContext.SpanID()] {
			if c.Name == "warmcache.flight" {
				flight = &c
			}
		}
		if flight == nil {
			t.Fatalf("no warmcache.flight span under the request: %s", names(tr.all))
		}
		if attr(*flight, "warmcache.outcome") != "led" || attr(*flight, "warmcache.namespace") != "widgets" {
			t.Errorf("flight span attributes %v", flight.Attributes)
		}
		inFlight := tr.under(flight.SpanContext.SpanID())
		if count(inFlight, isSQL) < 1 || count(inFlight, isRedis) < 1 {
			t.Errorf("below the flight: %s; want the SQL lookup and the Redis recheck and fill", names(inFlight))
		}
		if n := count(tr.children[tr.root.SpanContext.SpanID()], isRedis); n < 1 {
			t.Errorf("no Redis read directly under the request: %s", names(tr.all))
		}
	})

	t.Run("hit", func(t *testing.T) {
		parent := caller(3)
		if w := s.do(t, http.MethodGet, "/v1/kv/widgets/8", "", parent); w.Code != http.StatusOK || w.Header().Get("X-Cache") != "hit" {
			t.Fatalf("GET = %d %s", w.Code, w.Header().Get("X-Cache"))
		}
		tr := collect(t, exp, parent)
		if attr(tr.root, "warmcache.outcome") != "hit" || attr(tr.root, "warmcache.found") != "true" {
			t.Errorf("request span attributes %v; want outcome hit", tr.root.Attributes)
		}
		below := tr.under(tr.root.SpanContext.SpanID())
		if count(below, isRedis) != 1 || count(below, isSQL) != 0 || len(below) != 1 {
			t.Errorf("below the hit: %s; want exactly one Redis read", names(below))
		}
	})

	t.Run("near cache hit", func(t *testing.T) {
		// The PUT put key 9 in this instance's near cache.
		parent := caller(4)
		if w := s.do(t, http.MethodGet, "/v1/kv/near/9", "", parent); w.Code != http.StatusOK || w.Header().Get("X-Cache") != "hit-l1" {
			t.Fatalf("GET = %d %s", w.Code, w.Header().Get("X-Cache"))
		}
		tr := collect(t, exp, parent)
		below := tr.under(tr.root.SpanContext.SpanID())
		if len(below) != 1 || below[0].Name != "warmcache.near" || attr(below[0], "warmcache.outcome") != "hit" {
			t.Errorf("below the near-cache hit: %s; want one warmcache.near span with outcome hit", names(below))
		}
		if attr(tr.root, "warmcache.outcome") != "hit-l1" {
			t.Errorf("request outcome %q, want hit-l1", attr(tr.root, "warmcache.outcome"))
		}
	})
}

// BenchmarkGet measures a GET hit through the REST handler, in process,
// with tracing off (no Provider) and on (every span recorded, exported in
// batches to a discarding exporter). Run:
//
//	go test -run '^$' -bench BenchmarkGet -benchtime 20000x -count 5 ./e2e/tracing/
func BenchmarkGet(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			var tp *tracing.Provider
			if mode == "on" {
				var err error
				tp, err = tracing.New(sdktrace.NewBatchSpanProcessor(discard{}), "bench")
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			}
			s := newStack(b, tp)
			if w := s.do(b, http.MethodPut, "/v1/kv/widgets/1", `{"widget": {"id": "1"}}`, trace.SpanContext{}); w.Code != http.StatusOK {
				b.Fatalf("PUT = %d", w.Code)
			}
			parent := caller(9)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if w := s.do(b, http.MethodGet, "/v1/kv/widgets/1", "", parent); w.Code != http.StatusOK {
					b.Fatalf("GET = %d", w.Code)
				}
			}
		})
	}
}

// discard is an exporter that drops the spans.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
