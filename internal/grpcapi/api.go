// Package grpcapi is the gRPC transport: the warmcache.v1.Cache service
// over the core, the standard health service (grpc.health.v1), server
// reflection, access control and metrics through interceptors, and one
// table that maps errors to codes.
//
// The service is declared in internal/grpcapi/proto/warmcache/v1/warmcache.proto; the
// generated code lives in the warmcachev1 package and is regenerated with
// `make proto`.
package grpcapi

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// ServiceName is the full name of the Cache service, also the name its
// readiness is checked under in the health service.
const ServiceName = "warmcache.v1.Cache"

// Options bound the transport.
type Options struct {
	// MaxMessageBytes bounds one received message. Zero means 4 MiB.
	MaxMessageBytes int
	// MaxSendBytes bounds one sent message. Zero means 16 MiB plus 64 KiB
	// (the core's default bound on an MGet answer, and room for the keys).
	MaxSendBytes int
	// MaxLoadBytes bounds the messages of one Load stream, as the REST
	// _load body is bounded. Zero means 64 MiB.
	MaxLoadBytes int64
	// LoadIdleTimeout cuts off a Load stream that sends nothing for this
	// long (DEADLINE_EXCEEDED); nothing of it is written. Zero means 30s.
	LoadIdleTimeout time.Duration
	// MaxConcurrentStreams bounds the calls one connection may have open
	// at once. Zero means 256.
	MaxConcurrentStreams uint32
	// StreamWorkers is the number of goroutines kept to serve calls, over
	// all connections; a call that finds none idle gets a goroutine of its
	// own. A kept goroutine has grown its stack already, where a new one
	// grows it again on each call. Zero means DefaultStreamWorkers.
	StreamWorkers uint32
}

// DefaultStreamWorkers is the default of Options.StreamWorkers.
const DefaultStreamWorkers = 128

// API holds the Cache service's handlers and the transport's metrics. One
// API serves any number of grpc.Servers (for example a TLS one on TCP and
// a plain one on a unix socket). It is safe for concurrent use.
type API struct {
	warmcachev1.UnimplementedCacheServer
	svc     *warmcache.Service
	keys    *auth.Keyring
	open    bool // keys is nil or has no keys: every caller is anonymous
	log     *slog.Logger
	metrics *metrics
	opts    Options
}

var _ warmcachev1.CacheServer = (*API)(nil)

// New returns the API over svc. Calls to the Cache service are checked
// against keys (nil, or a Keyring without keys, lets every call through). The request
// metrics are registered on reg.
func New(svc *warmcache.Service, keys *auth.Keyring, reg prometheus.Registerer, log *slog.Logger, opts Options) (*API, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &API{svc: svc, keys: keys, open: keys == nil || keys.Open(), log: log, metrics: m, opts: opts.withDefaults()}, nil
}

// withDefaults returns o with each zero field set to its default.
func (o Options) withDefaults() Options {
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 4 << 20
	}
	if o.MaxSendBytes <= 0 {
		o.MaxSendBytes = warmcache.DefaultMaxResponseBytes + 64<<10
	}
	if o.MaxLoadBytes <= 0 {
		o.MaxLoadBytes = warmcache.DefaultMaxLoadBytes
	}
	if o.LoadIdleTimeout <= 0 {
		o.LoadIdleTimeout = warmcache.DefaultLoadIdleTimeout
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = 256
	}
	if o.StreamWorkers == 0 {
		o.StreamWorkers = DefaultStreamWorkers
	}
	return o
}

// ServerOptions returns the options of the service's grpc.Server that o
// sets (message bounds, concurrent streams, stream workers, handshake
// timeout), without its codec and interceptors, so that another server
// can be configured like the service's.
func ServerOptions(o Options) []grpc.ServerOption {
	o = o.withDefaults()
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(o.MaxMessageBytes),
		grpc.MaxSendMsgSize(o.MaxSendBytes),
		grpc.MaxConcurrentStreams(o.MaxConcurrentStreams),
		grpc.NumStreamWorkers(o.StreamWorkers),
		// A connection that does not finish its handshake in time is
		// closed, as REST's ReadHeaderTimeout does.
		grpc.ConnectionTimeout(5 * time.Second),
	}
}

// NewServer returns a grpc.Server with the Cache service, the health
// service and reflection registered, and the API's interceptors in front.
// extra adds server options such as TLS credentials.
func (a *API) NewServer(extra ...grpc.ServerOption) *grpc.Server {
	codec := newCheckedCodec()
	opts := append(ServerOptions(a.opts),
		grpc.ForceServerCodecV2(codec),
		grpc.ChainUnaryInterceptor(a.metrics.unary, codec.unary, a.unaryAuth),
		grpc.ChainStreamInterceptor(a.metrics.stream, codec.stream, a.streamAuth),
	)
	s := grpc.NewServer(append(opts, extra...)...)
	warmcachev1.RegisterCacheServer(s, a)
	healthpb.RegisterHealthServer(s, &health{svc: a.svc, log: a.log})
	reflection.Register(s)
	return s
}

// Get reads one key.
func (a *API) Get(ctx context.Context, req *warmcachev1.GetRequest) (*warmcachev1.GetResponse, error) {
	if err := a.authorize(ctx, req.GetNamespace(), auth.ScopeRead); err != nil {
		return nil, a.toStatus(ctx, "Get", err)
	}
	it, err := a.svc.Get(ctx, req.GetNamespace(), req.GetKey())
	if err != nil {
		return nil, a.toStatus(ctx, "Get", err)
	}
	return &warmcachev1.GetResponse{Item: item(it), ContentType: it.MediaType}, nil
}

// MGet reads several keys.
func (a *API) MGet(ctx context.Context, req *warmcachev1.MGetRequest) (*warmcachev1.MGetResponse, error) {
	if err := a.authorize(ctx, req.GetNamespace(), auth.ScopeRead); err != nil {
		return nil, a.toStatus(ctx, "MGet", err)
	}
	items, err := a.svc.MGet(ctx, req.GetNamespace(), req.GetKeys())
	if err != nil {
		return nil, a.toStatus(ctx, "MGet", err)
	}
	resp := &warmcachev1.MGetResponse{Items: make([]*warmcachev1.Item, 0, len(items)), ContentType: a.contentType(req.GetNamespace(), items)}
	for _, it := range items {
		if !it.Entry.Found {
			resp.Missing = append(resp.Missing, it.Key.Text)
			continue
		}
		resp.Items = append(resp.Items, item(it))
	}
	return resp, nil
}

// Put stores a value, optionally only at an expected version.
func (a *API) Put(ctx context.Context, req *warmcachev1.PutRequest) (*warmcachev1.PutResponse, error) {
	p, err := a.principal(ctx, req.GetNamespace(), auth.ScopeWrite)
	if err != nil {
		return nil, a.toStatus(ctx, "Put", err)
	}
	ttl, err := ttlOf(req.GetTtlSeconds())
	if err != nil {
		return nil, a.toStatus(ctx, "Put", err)
	}
	if err := checkExpectedVersion(req, 4); err != nil {
		return nil, a.toStatus(ctx, "Put", err)
	}
	its, err := a.svc.Transact(ctx, req.GetNamespace(), []warmcache.Op{{Key: req.GetKey(), Value: req.GetValue(), IfMatch: req.ExpectedVersion, TTL: ttl}})
	p.LogWrite(ctx, a.log, "grpc", "put", req.GetNamespace(), req.GetKey(), err)
	if err != nil {
		return nil, a.toStatus(ctx, "Put", err)
	}
	return &warmcachev1.PutResponse{Item: item(its[0]), ContentType: its[0].MediaType}, nil
}

// contentType returns the media type of namespace's values, which its
// items carry; asked of the core only when there are none, and "" for a
// namespace that does not exist.
func (a *API) contentType(namespace string, items []warmcache.Item) string {
	if len(items) > 0 {
		return items[0].MediaType
	}
	ns, err := a.svc.Namespace(namespace)
	if err != nil {
		return ""
	}
	return ns.MediaType()
}

// Delete removes a key, optionally only at an expected version.
func (a *API) Delete(ctx context.Context, req *warmcachev1.DeleteRequest) (*warmcachev1.DeleteResponse, error) {
	p, err := a.principal(ctx, req.GetNamespace(), auth.ScopeWrite)
	if err != nil {
		return nil, a.toStatus(ctx, "Delete", err)
	}
	if err := checkExpectedVersion(req, 3); err != nil {
		return nil, a.toStatus(ctx, "Delete", err)
	}
	err = a.svc.Delete(ctx, req.GetNamespace(), req.GetKey(), req.ExpectedVersion)
	p.LogWrite(ctx, a.log, "grpc", "delete", req.GetNamespace(), req.GetKey(), err)
	if err != nil {
		return nil, a.toStatus(ctx, "Delete", err)
	}
	return &warmcachev1.DeleteResponse{}, nil
}

// Invalidate makes the caches read keys again from the warehouse, or
// retires every cached entry of the namespace with all. It needs the write
// scope and is audit-logged.
func (a *API) Invalidate(ctx context.Context, req *warmcachev1.InvalidateRequest) (*warmcachev1.InvalidateResponse, error) {
	p, err := a.principal(ctx, req.GetNamespace(), auth.ScopeWrite)
	if err != nil {
		return nil, a.toStatus(ctx, "Invalidate", err)
	}
	var n int
	if req.GetAll() == (len(req.GetKeys()) > 0) {
		err = fmt.Errorf("%w: give either keys or all", errInvalidRequest)
	} else {
		n, err = a.svc.Invalidate(ctx, req.GetNamespace(), req.GetKeys(), req.GetAll())
	}
	target := strings.Join(req.GetKeys(), ",")
	if req.GetAll() {
		target = "*"
	}
	p.LogWrite(ctx, a.log, "grpc", "invalidate", req.GetNamespace(), truncateKeys(target), err)
	if err != nil {
		return nil, a.toStatus(ctx, "Invalidate", err)
	}
	return &warmcachev1.InvalidateResponse{Invalidated: int64(n)}, nil
}

// truncateKeys bounds the keys written to the audit log.
func truncateKeys(s string) string {
	if len(s) > 256 {
		return s[:256] + "..."
	}
	return s
}

// item converts a core item. The value's bytes are passed through as
// stored.
func item(it warmcache.Item) *warmcachev1.Item {
	out := &warmcachev1.Item{
		Key:     it.Key.Text,
		Value:   it.Entry.Value,
		Version: it.Entry.Version,
		Source:  string(it.Source),
	}
	if !it.Entry.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(it.Entry.ExpiresAt)
	}
	return out
}

// ttlOf returns a write's ttl_seconds as a TTL: zero for never, and an
// error that wraps warmcache.ErrInvalidValue for a negative one or one
// past warmcache.MaxTTL.
// checkExpectedVersion refuses a request whose expected_version (field
// number field) came with another wire type than an int64's, such as a
// string ETag from a client built on another proto. Decoding keeps such a
// field as an unknown one and leaves expected_version unset, which would
// turn the conditional write the client asked for into an unconditional
// one.
func checkExpectedVersion(req proto.Message, field protowire.Number) error {
	b := req.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 {
			return nil // the codec refuses what does not decode
		}
		if num == field {
			return fmt.Errorf("%w: expected_version must be an int64 version (wire type varint), got wire type %d", errInvalidRequest, typ)
		}
		b = b[n:]
	}
	return nil
}

func ttlOf(seconds int64) (time.Duration, error) {
	if seconds < 0 || seconds > int64(warmcache.MaxTTL/time.Second) {
		return 0, fmt.Errorf("%w: ttl_seconds must be from 0 to %d, got %d", warmcache.ErrInvalidValue, int64(warmcache.MaxTTL/time.Second), seconds)
	}
	return time.Duration(seconds) * time.Second, nil
}

// principal returns the caller that the interceptor authenticated, once it
// is checked for scope on namespace.
func (a *API) principal(ctx context.Context, namespace string, scope auth.Scope) (auth.Principal, error) {
	if a.open {
		return auth.Principal{KeyID: auth.Anonymous}, nil
	}
	p, ok := auth.FromContext(ctx)
	if !ok {
		return auth.Principal{}, auth.ErrUnauthenticated
	}
	if err := p.Authorize(namespace, scope); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

func (a *API) authorize(ctx context.Context, namespace string, scope auth.Scope) error {
	_, err := a.principal(ctx, namespace, scope)
	return err
}
