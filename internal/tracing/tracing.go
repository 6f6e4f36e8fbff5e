// Package tracing is the glue between warmcache and OpenTelemetry: it
// builds a tracer provider with an OTLP exporter from the standard OTEL_*
// environment variables, and hands each part of the service the maintained
// instrumentation of its library (otelhttp for REST and the Dapr HTTP API,
// otelgrpc for gRPC, redisotel for go-redis, otelpgx for pgx) plus the
// core's own steps (the near cache, the wait for a shared warehouse read).
//
// Tracing is off unless the environment asks for it; then every method of
// a nil *Provider returns its input unchanged or nothing, so the request
// path carries no tracing code at all.
//
// Spans carry namespaces, outcomes and SQL text with its $n placeholders,
// never keys or values: Redis spans are made without their command
// arguments, and SQL spans without their parameters.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/exaring/otelpgx"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// Provider holds the tracer provider and the propagator. A nil *Provider
// is tracing turned off. A Provider is safe for concurrent use.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// Start builds a Provider exporting spans in batches over OTLP with
// protocol, "grpc" or "http/protobuf" (config.Tracing, which reads the
// OTEL_* switch), or returns nil when protocol is empty: tracing is off.
// version is the service's version for the resource. The caller calls
// Shutdown to flush.
func Start(ctx context.Context, protocol, version string) (*Provider, error) {
	if protocol == "" {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	return New(sdktrace.NewBatchSpanProcessor(exp), version)
}

// New returns a Provider whose spans go to sp; tests pass a simple
// processor over an in-memory exporter. The sampler and the resource come
// from the environment as the SDK reads it (OTEL_TRACES_SAMPLER,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES); the service name defaults to
// warmcache.
func New(sp sdktrace.SpanProcessor, version string) (*Provider, error) {
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName("warmcache"), semconv.ServiceVersion(version)),
		resource.Environment(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithResource(res))
	return &Provider{
		tp:     tp,
		tracer: tp.Tracer("github.com/warmcache/warmcache"),
		prop:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}, nil
}

// Shutdown flushes the spans not yet exported and stops the provider.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// HTTP wraps a chi-routed handler: a server span per request, named by the
// method and the chi route pattern (never the path, which holds keys),
// continuing the trace of the request's W3C traceparent.
func (p *Provider) HTTP(h http.Handler, server string) http.Handler {
	if p == nil {
		return h
	}
	named := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// chi fills a route context it finds in the request, so the
		// pattern is known here once the handler has run.
		rctx := chi.NewRouteContext()
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		h.ServeHTTP(w, r)
		if pattern := rctx.RoutePattern(); pattern != "" {
			span := trace.SpanFromContext(r.Context())
			span.SetName(r.Method + " " + pattern)
			span.SetAttributes(semconv.HTTPRoute(pattern))
		}
	})
	return otelhttp.NewHandler(named, server,
		otelhttp.WithTracerProvider(p.tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(p.prop),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
	)
}

// GRPCServerOptions returns the server options that make a span of every
// call, continuing the trace of its traceparent metadata.
func (p *Provider) GRPCServerOptions() []grpc.ServerOption {
	if p == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(p.tp),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithPropagators(p.prop),
	))}
}

// PGTracer returns pgx's tracer hook that makes a span of each query (and
// of each wait for a pooled connection), without the query's parameters.
func (p *Provider) PGTracer() pgx.QueryTracer {
	if p == nil {
		return nil
	}
	return otelpgx.NewTracer(
		otelpgx.WithTracerProvider(p.tp),
		otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelpgx.WithTrimSQLInSpanName(),
	)
}

// InstrumentRedis adds to a go-redis client the hook that makes a span of
// each command and each pipeline, without the commands' arguments, and
// none of connection dials.
func (p *Provider) InstrumentRedis(c redis.UniversalClient) error {
	if p == nil {
		return nil
	}
	return redisotel.InstrumentTracing(c, redisotel.WithTracerProvider(p.tp), redisotel.WithDBStatement(false),
		// A dial runs outside any request's trace.
		redisotel.WithDialFilter(true))
}

// RedisInstrument is InstrumentRedis as a rediscache option: nil when off.
func (p *Provider) RedisInstrument() func(redis.UniversalClient) error {
	if p == nil {
		return nil
	}
	return p.InstrumentRedis
}

// Core returns the core's tracer, or nil when off.
func (p *Provider) Core() warmcache.Tracer {
	if p == nil {
		return nil
	}
	return core{tracer: p.tracer}
}

// Attribute keys of the core's spans.
const (
	attrNamespace = attribute.Key("warmcache.namespace")
	attrOutcome   = attribute.Key("warmcache.outcome")
	attrFound     = attribute.Key("warmcache.found")
)

// core implements warmcache.Tracer.
type core struct{ tracer trace.Tracer }

func (c core) Start(ctx context.Context, step string, ns *warmcache.Namespace) (context.Context, func(string)) {
	ctx, span := c.tracer.Start(ctx, "warmcache."+step, trace.WithAttributes(attrNamespace.String(ns.Name)))
	return ctx, func(outcome string) {
		if outcome != "" {
			span.SetAttributes(attrOutcome.String(outcome))
		}
		span.End()
	}
}

func (c core) Outcome(ctx context.Context, ns *warmcache.Namespace, outcome string, found bool) {
	trace.SpanFromContext(ctx).SetAttributes(attrNamespace.String(ns.Name), attrOutcome.String(outcome), attrFound.Bool(found))
}
