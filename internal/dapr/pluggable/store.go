// Package pluggable serves warmcache as a Dapr pluggable state store: the
// gRPC services StateStore, TransactionalStateStore and
// TransactionalStoreMultiMaxSize of dapr.proto.components.v1, which daprd
// calls on a unix socket in its components folder. An application keeps
// talking to its own daprd (pub/sub, actors, workflow, the outbox and
// resiliency stay daprd's), and daprd keeps its state in warmcache.
//
// The mapping:
//   - one socket serves several components: each call names its component
//     in the x-component-instance header (the component's metadata.name),
//     and each component is one namespace; a call without the header goes
//     to the first component, the default;
//   - a namespace served here has text keys and the bytes value layout:
//     daprd's keys ("appid||key", with its key prefixes) and values
//     (opaque bytes, of any content type) are stored as they come;
//   - ETags, concurrency, consistency, metadata and the errors' answers
//     are internal/dapr's mapping, which the runtime API shares: an ETag is
//     the row's version, strong reads the warehouse past the caches,
//     ttlInSeconds sets the item's expiry;
//   - errors follow daprd's contract for pluggable stores
//     (dapr/pkg/components/state/pluggable.go): an ETag mismatch is
//     FailedPrecondition and an invalid ETag InvalidArgument, each with one
//     BadRequest field violation on "etag"; an absent key is an empty
//     GetResponse;
//   - a bulk set or delete commits in one transaction; when an ETag does
//     not hold, its items are applied one by one, as Dapr's bulk
//     operations are (the items whose ETag holds are written, and the
//     error names the others);
//   - the query API is refused (Unimplemented): values are opaque here.
package pluggable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	proto "github.com/dapr/dapr/pkg/proto/components/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/internal/cowmap"
	"github.com/warmcache/warmcache/internal/dapr"
	"github.com/warmcache/warmcache/internal/promreg"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// InstanceHeader is the metadata key in which daprd names the component of
// a call.
const InstanceHeader = "x-component-instance"

// PropertyNamespace is the component metadata property that, when a
// component YAML sets it, must name the component's namespace: daprd then
// fails to start the component rather than serve another namespace.
const PropertyNamespace = "namespace"

// FeatureTTL is the feature of per-item TTLs, as daprd names it: served by
// a component whose namespace has an expiry column.
const FeatureTTL = "TTL"

// features returns the state-store features of a component whose
// namespace is ns, as daprd names them.
func features(ns *warmcache.Namespace) []string {
	f := []string{"ETAG", "TRANSACTIONAL"}
	if ns.ExpiresColumn != "" {
		f = append(f, FeatureTTL)
	}
	return f
}

// DaprdMaxBodyBytes is daprd's default bound on a request body
// (--max-body-size, 4 MiB), and so on what daprd sends a component in one
// call.
const DaprdMaxBodyBytes = 4 << 20

// defaultMaxValueBytes is what a zero Options.MaxValueBytes means: every
// value whose answer fits what daprd receives (DaprdMaxRecvBytes), with
// 1 KiB left for the answer's ETag and metadata.
const defaultMaxValueBytes = DaprdMaxRecvBytes - 1<<10

// Options are the store's bounds.
type Options struct {
	// MaxValueBytes bounds a value saved through the component; a larger
	// one is refused with the bound and the flag that raises it. Zero means
	// 4 MiB less 1 KiB, so that the answer of every value saved fits what
	// daprd receives. The core's own bound must not be lower.
	MaxValueBytes int
}

// Component is one Dapr component served: its name (the metadata.name of
// its component YAML) and its namespace.
type Component struct {
	Name      string
	Namespace string
}

// Store is the pluggable state store over the core. It is safe for
// concurrent use.
type Store struct {
	svc        *warmcache.Service
	components map[string]string // component name -> namespace
	byDefault  Component
	maxValue   int
	log        *slog.Logger
	calls      *prometheus.CounterVec
	// series holds the calls' counters by their labels, each taken from
	// calls once, when first counted: a call is then counted without
	// looking its labels up. The labels are bounded (see count).
	series cowmap.Map[callLabels, prometheus.Counter]
}

// callLabels are the labels of warmcache_dapr_component_requests_total.
type callLabels struct {
	component, method string
	code              codes.Code
}

var (
	_ proto.StateStoreServer                     = (*Store)(nil)
	_ proto.TransactionalStateStoreServer        = (*Store)(nil)
	_ proto.TransactionalStoreMultiMaxSizeServer = (*Store)(nil)
	_ proto.QueriableStateStoreServer            = (*Store)(nil)
)

// New returns the store serving components over svc; the first component
// is the default. It fails if there is no component, a name repeats, or a
// namespace is unknown, not text-keyed or not of the bytes layout. Its
// metric, warmcache_dapr_component_requests_total, is registered with reg.
func New(svc *warmcache.Service, components []Component, o Options, reg prometheus.Registerer, log *slog.Logger) (*Store, error) {
	if len(components) == 0 {
		return nil, errors.New("pluggable: no component to serve")
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = defaultMaxValueBytes
	}
	s := &Store{svc: svc, components: make(map[string]string, len(components)), byDefault: components[0],
		maxValue: o.MaxValueBytes, log: log}
	for _, c := range components {
		if c.Name == "" {
			return nil, fmt.Errorf("pluggable: component of namespace %q has no name", c.Namespace)
		}
		if _, dup := s.components[c.Name]; dup {
			return nil, fmt.Errorf("pluggable: component %q is named twice", c.Name)
		}
		ns, err := svc.Namespace(c.Namespace)
		if err != nil {
			return nil, fmt.Errorf("pluggable: component %q: %w", c.Name, err)
		}
		if err := servable(ns); err != nil {
			return nil, fmt.Errorf("pluggable: component %q: %w", c.Name, err)
		}
		s.components[c.Name] = c.Namespace
	}
	s.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmcache_dapr_component_requests_total",
		Help: "Calls of daprd to the pluggable state store, by component, method and gRPC code.",
	}, []string{"component", "method", "code"})
	if err := promreg.Register(reg, "pluggable", s.calls); err != nil {
		return nil, err
	}
	return s, nil
}

// servable checks that ns stores what daprd sends as it comes: text keys
// and opaque byte values.
func servable(ns *warmcache.Namespace) error {
	if ns.KeyType != warmcache.KeyText {
		return fmt.Errorf("namespace %q has %s keys; a Dapr state store needs text keys (daprd's keys are \"appid||key\")", ns.Name, ns.KeyType)
	}
	if ns.Layout != warmcache.LayoutBytes {
		return fmt.Errorf("namespace %q has the %s layout; a Dapr state store needs the bytes layout (daprd's values are opaque bytes)", ns.Name, ns.Layout)
	}
	return nil
}

// MaxRecvBytes is the largest call the component's server should receive:
// daprd's whole body (DaprdMaxBodyBytes) or a value at the store's bound,
// whichever is larger, with 64 KiB for the call's keys and metadata. So a
// value that daprd accepts reaches the store, which stores it or refuses it
// with its bound, rather than gRPC refusing the call with its raw size
// error.
func (s *Store) MaxRecvBytes() int {
	return max(DaprdMaxBodyBytes, s.maxValue) + 64<<10
}

// streamWorkers is how many goroutines of the component's server serve
// daprd's calls and stay for the next ones. gRPC otherwise starts a
// goroutine per call, whose stack grows again on every call: on a Redis
// hit that growth cost as much CPU as the read itself. A call that finds
// them all busy gets a goroutine of its own, as without workers.
const streamWorkers = 64

// NewServer returns a grpc.Server with the state-store services (the
// query service only to refuse queries, see Query) and gRPC reflection
// registered (daprd discovers a socket's components through
// reflection). extra adds server options such as message bounds.
func (s *Store) NewServer(extra ...grpc.ServerOption) *grpc.Server {
	opts := append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(s.count), grpc.NumStreamWorkers(streamWorkers)}, extra...)
	gs := grpc.NewServer(opts...)
	proto.RegisterStateStoreServer(gs, s)
	proto.RegisterTransactionalStateStoreServer(gs, s)
	proto.RegisterTransactionalStoreMultiMaxSizeServer(gs, s)
	proto.RegisterQueriableStateStoreServer(gs, s)
	reflection.Register(gs)
	return gs
}

// count counts every call of a state-store service by its component and
// outcome.
func (s *Store) count(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, "/dapr.proto.components.v1.") {
		return handler(ctx, req)
	}
	resp, err := handler(ctx, req)
	component, _, cerr := s.component(ctx)
	if cerr != nil {
		component = "(unknown)" // a bounded label: not the name daprd sent
	}
	l := callLabels{component: component, method: info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:], code: status.Code(err)}
	s.series.LoadOrAdd(l, func() prometheus.Counter { return s.calls.WithLabelValues(l.component, l.method, l.code.String()) }).Inc()
	return resp, err
}

// component returns the component a call names and its namespace.
func (s *Store) component(ctx context.Context) (name, namespace string, err error) {
	// ValueFromIncomingContext reads the one key without copying every
	// header, as FromIncomingContext does.
	if v := metadata.ValueFromIncomingContext(ctx, InstanceHeader); len(v) > 0 && v[0] != "" {
		name = v[0]
	}
	if name == "" {
		return s.byDefault.Name, s.byDefault.Namespace, nil
	}
	namespace, ok := s.components[name]
	if !ok {
		return name, "", fmt.Errorf("%w: %q", dapr.ErrUnknownComponent, name)
	}
	return name, namespace, nil
}

// Init checks that the component is served and, when its YAML names a
// namespace, that it is the component's. The component's configuration is
// warmcache's (--dapr-components), so that it holds across restarts of
// either process.
func (s *Store) Init(ctx context.Context, in *proto.InitRequest) (*proto.InitResponse, error) {
	name, namespace, err := s.component(ctx)
	if err != nil {
		return nil, s.fail(ctx, "Init", err)
	}
	if want, ok := in.GetMetadata().GetProperties()[PropertyNamespace]; ok && want != namespace {
		return nil, s.fail(ctx, "Init", fmt.Errorf("%w: component %q serves namespace %q, its metadata names %q",
			dapr.ErrMisconfigured, name, namespace, want))
	}
	return &proto.InitResponse{}, nil
}

// Features lists the features the component serves: ETags and
// transactions always, per-item TTLs where its namespace has an expiry
// column.
func (s *Store) Features(ctx context.Context, _ *proto.FeaturesRequest) (*proto.FeaturesResponse, error) {
	_, namespace, err := s.component(ctx)
	if err != nil {
		return nil, s.fail(ctx, "Features", err)
	}
	ns, err := s.svc.Namespace(namespace)
	if err != nil {
		return nil, s.fail(ctx, "Features", err)
	}
	return &proto.FeaturesResponse{Features: features(ns)}, nil
}

// Ping answers daprd's liveness check.
func (s *Store) Ping(context.Context, *proto.PingRequest) (*proto.PingResponse, error) {
	return &proto.PingResponse{}, nil
}

// Query refuses every query, as Dapr's state.postgresql does, with
// Unimplemented: daprd calls a pluggable store's Query whatever its
// Features say, and without this service daprd would answer gRPC's
// "unknown service".
func (s *Store) Query(ctx context.Context, _ *proto.QueryRequest) (*proto.QueryResponse, error) {
	return nil, s.fail(ctx, "Query", dapr.ErrQueryUnsupported)
}

// MultiMaxSize is the most operations of one transaction.
func (s *Store) MultiMaxSize(context.Context, *proto.MultiMaxSizeRequest) (*proto.MultiMaxSizeResponse, error) {
	return &proto.MultiMaxSizeResponse{MaxSize: int64(s.svc.MaxBatchKeys())}, nil
}
