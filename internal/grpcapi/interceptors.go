package grpcapi

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/cowmap"
	"github.com/warmcache/warmcache/internal/promreg"
)

type metrics struct {
	duration *prometheus.HistogramVec
	// inflight counts the calls being served, which a GaugeFunc reports:
	// one atomic add per call and end, where a Gauge's Inc and Dec each
	// retry a compare-and-swap while the cores contend.
	inflight atomic.Int64

	// methods holds each method's series; a call reads them without a
	// lock.
	methods cowmap.Map[string, *methodSeries]
}

// methodSeries holds the duration observers of one method, one per status
// code, each taken from the histogram once, when the first call with that
// code ends: a call then records its duration without looking its labels
// up.
type methodSeries [codes.Unauthenticated + 1]atomic.Pointer[observer]

type observer struct{ prometheus.Observer }

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "warmcache_grpc_request_duration_seconds",
			Help: "gRPC call duration by full method name and status code.",
			// The buckets of warmcache_http_request_duration_seconds, so
			// that both transports compare on one dashboard.
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"method", "code"}),
	}
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warmcache_grpc_requests_in_flight",
		Help: "gRPC calls being served.",
	}, func() float64 { return float64(m.inflight.Load()) })
	if err := promreg.Register(reg, "grpcapi", m.duration, inflight); err != nil {
		return nil, err
	}
	return m, nil
}

// The method label is the full method name, which grpc only hands to
// interceptors for registered methods, so the label stays bounded.
func (m *metrics) observe(method string, start time.Time, err error) {
	m.observer(method, status.Code(err)).Observe(time.Since(start).Seconds())
}

// observer returns the observer of a method's series for code.
func (m *metrics) observer(method string, code codes.Code) prometheus.Observer {
	if int(code) >= len(methodSeries{}) {
		return m.duration.WithLabelValues(method, code.String())
	}
	s := m.methods.LoadOrAdd(method, func() *methodSeries { return new(methodSeries) })
	cell := &s[code]
	if o := cell.Load(); o != nil {
		return o.Observer
	}
	// Two first calls may both look the series up: they get the same
	// child of the vector.
	o := &observer{m.duration.WithLabelValues(method, code.String())}
	cell.Store(o)
	return o.Observer
}

func (m *metrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	m.inflight.Add(1)
	defer m.inflight.Add(-1)
	resp, err := handler(ctx, req)
	m.observe(info.FullMethod, start, err)
	return resp, err
}

func (m *metrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	m.inflight.Add(1)
	defer m.inflight.Add(-1)
	err := handler(srv, ss)
	m.observe(info.FullMethod, start, err)
	return err
}

// guarded reports whether a method needs an API key: the Cache service's
// methods do; health and reflection do not, so that probes and tools work
// without one.
func guarded(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/"+ServiceName+"/")
}

// authenticate reads the bearer token from the call's metadata, checks it
// and the key's rate, and returns ctx carrying the principal.
func (a *API) authenticate(ctx context.Context) (context.Context, error) {
	if a.open {
		// Every caller is anonymous, and principal knows it without the
		// context.
		return ctx, nil
	}
	// One value, without the copy of all the metadata that
	// metadata.FromIncomingContext makes.
	var token string
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		token = auth.BearerToken(v[0])
	}
	p, err := a.keys.Authenticate(token)
	if err != nil {
		return ctx, err
	}
	return auth.NewContext(ctx, p), nil
}

func (a *API) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !guarded(info.FullMethod) {
		return handler(ctx, req)
	}
	ctx, err := a.authenticate(ctx)
	if err != nil {
		return nil, a.toStatus(ctx, info.FullMethod, err)
	}
	return handler(ctx, req)
}

func (a *API) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !guarded(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx, err := a.authenticate(ss.Context())
	if err != nil {
		return a.toStatus(ctx, info.FullMethod, err)
	}
	return handler(srv, &authedStream{ServerStream: ss, ctx: ctx})
}

// authedStream carries the principal in the stream's context.
type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }
