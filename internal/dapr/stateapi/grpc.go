package stateapi

import (
	"context"
	"log/slog"
	"strings"
	"time"

	commonv1 "github.com/dapr/dapr/pkg/proto/common/v1"
	runtimev1 "github.com/dapr/dapr/pkg/proto/runtime/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/dapr"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// tokenHeader carries the API key, as Dapr's SDKs send DAPR_API_TOKEN.
const tokenHeader = "dapr-api-token"

// GRPC is the gRPC form of the state API: the state RPCs of
// dapr.proto.runtime.v1.Dapr. Every other RPC of the service answers
// Unimplemented with a message that says only the state API is served. It
// is safe for concurrent use.
type GRPC struct {
	runtimev1.UnimplementedDaprServer
	state
}

var _ runtimev1.DaprServer = (*GRPC)(nil)

// NewGRPC returns the gRPC state API over svc. Calls are checked against
// keys with the dapr-api-token metadata (nil, or a Keyring without keys,
// lets every call through).
func NewGRPC(svc *warmcache.Service, keys *auth.Keyring, log *slog.Logger) *GRPC {
	return &GRPC{state: state{svc: svc, keys: keys, log: log}}
}

// NewServer returns a grpc.Server with the Dapr service registered and
// the interceptors that word the answer of the RPCs outside the state API.
// extra adds server options such as TLS credentials, message bounds or
// tracing.
func (g *GRPC) NewServer(extra ...grpc.ServerOption) *grpc.Server {
	opts := append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.UnaryInterceptor),
		grpc.ChainStreamInterceptor(g.StreamInterceptor),
	}, extra...)
	s := grpc.NewServer(opts...)
	runtimev1.RegisterDaprServer(s, g)
	return s
}

// stateMethods are the RPCs served.
var stateMethods = map[string]bool{
	"GetState": true, "GetBulkState": true, "SaveState": true, "DeleteState": true,
	"DeleteBulkState": true, "ExecuteStateTransaction": true,
}

// UnaryInterceptor answers the Dapr RPCs outside the state API with a
// clear Unimplemented status, before their handler runs. Other services
// pass through.
func (g *GRPC) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := unserved(info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamInterceptor is UnaryInterceptor for streaming RPCs.
func (g *GRPC) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := unserved(info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

func unserved(fullMethod string) error {
	const prefix = "/" + "dapr.proto.runtime.v1.Dapr" + "/"
	name, ok := strings.CutPrefix(fullMethod, prefix)
	if !ok || stateMethods[name] {
		return nil
	}
	return status.Errorf(codes.Unimplemented,
		"warmcache serves only Dapr's state API (GetState, GetBulkState, SaveState, DeleteState, DeleteBulkState, ExecuteStateTransaction); %s is not served", name)
}

// token returns the dapr-api-token of the call.
func token(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(tokenHeader); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// fail turns err into the gRPC status of the error table.
func (g *GRPC) fail(ctx context.Context, op operation, store, key string, err error) error {
	e, known := toAPIError(op, store, key, err)
	if !known || e.grpcCode == codes.Unavailable || e.grpcCode == codes.DeadlineExceeded {
		level := slog.LevelWarn
		if !known {
			level = slog.LevelError
		}
		g.log.LogAttrs(ctx, level, "dapr state request failed", slog.String("transport", "grpc"),
			slog.String("op", op.errorCode()), slog.String("store", store), slog.Any("err", err))
	}
	st := status.New(e.grpcCode, e.message)
	detailed, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: e.code, Domain: "warmcache"})
	if derr == nil {
		st = detailed
	}
	if e.retryAfter > 0 {
		if withRetry, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(e.retryAfter) * time.Second)}); derr == nil {
			st = withRetry
		}
	}
	return st.Err()
}

// GetState reads one key: an empty response when it is absent.
func (g *GRPC) GetState(ctx context.Context, in *runtimev1.GetStateRequest) (*runtimev1.GetStateResponse, error) {
	if _, err := g.authorize(ctx, token(ctx), in.GetStoreName(), auth.ScopeRead); err != nil {
		return nil, g.fail(ctx, opGet, in.GetStoreName(), in.GetKey(), err)
	}
	it, found, err := dapr.Read(ctx, g.svc, in.GetStoreName(), in.GetKey(), dapr.StrongRead(in.GetConsistency()))
	if err != nil {
		return nil, g.fail(ctx, opGet, in.GetStoreName(), in.GetKey(), err)
	}
	if !found {
		return &runtimev1.GetStateResponse{}, nil
	}
	resp := &runtimev1.GetStateResponse{
		Data:     it.Entry.Value,
		Etag:     dapr.ETag(it.Entry.Version),
		Metadata: dapr.ItemMetadata(it),
	}
	if it.Opaque {
		resp.Metadata[dapr.MetaContentType] = it.MediaType
	}
	return resp, nil
}

// GetBulkState reads several keys; an absent key's item has no data.
func (g *GRPC) GetBulkState(ctx context.Context, in *runtimev1.GetBulkStateRequest) (*runtimev1.GetBulkStateResponse, error) {
	if _, err := g.authorize(ctx, token(ctx), in.GetStoreName(), auth.ScopeRead); err != nil {
		return nil, g.fail(ctx, opBulkGet, in.GetStoreName(), "", err)
	}
	items, err := dapr.BulkRead(ctx, g.svc, in.GetStoreName(), in.GetKeys())
	if err != nil {
		return nil, g.fail(ctx, opBulkGet, in.GetStoreName(), "", err)
	}
	resp := &runtimev1.GetBulkStateResponse{Items: make([]*runtimev1.BulkStateItem, len(items))}
	for i, it := range items {
		bi := &runtimev1.BulkStateItem{Key: it.Key}
		if it.Found {
			bi.Data, bi.Etag = it.Item.Entry.Value, dapr.ETag(it.Item.Entry.Version)
			bi.Metadata = dapr.ItemMetadata(it.Item)
			if it.Item.Opaque {
				bi.Metadata[dapr.MetaContentType] = it.Item.MediaType
			}
		}
		resp.Items[i] = bi
	}
	return resp, nil
}

// SaveState saves items, all in one transaction.
func (g *GRPC) SaveState(ctx context.Context, in *runtimev1.SaveStateRequest) (*emptypb.Empty, error) {
	p, err := g.authorize(ctx, token(ctx), in.GetStoreName(), auth.ScopeWrite)
	if err != nil {
		return nil, g.fail(ctx, opSave, in.GetStoreName(), "", err)
	}
	ops := make([]txOp, len(in.GetStates()))
	for i, s := range in.GetStates() {
		ops[i] = txOp{set: setFromProto(s)}
	}
	if err := g.apply(ctx, p, "dapr-grpc", "save", in.GetStoreName(), ops, nil); err != nil {
		return nil, g.fail(ctx, opSave, in.GetStoreName(), "", err)
	}
	return &emptypb.Empty{}, nil
}

// DeleteState deletes one key; an absent key is no error.
func (g *GRPC) DeleteState(ctx context.Context, in *runtimev1.DeleteStateRequest) (*emptypb.Empty, error) {
	p, err := g.authorize(ctx, token(ctx), in.GetStoreName(), auth.ScopeWrite)
	if err != nil {
		return nil, g.fail(ctx, opDelete, in.GetStoreName(), in.GetKey(), err)
	}
	del := &dapr.Delete{Key: in.GetKey(), ETag: dapr.ETagOf(in.GetEtag()),
		Concurrency: dapr.Concurrency(in.GetOptions().GetConcurrency()), Metadata: in.GetMetadata()}
	if err := g.apply(ctx, p, "dapr-grpc", "delete", in.GetStoreName(), []txOp{{del: del}}, nil); err != nil {
		return nil, g.fail(ctx, opDelete, in.GetStoreName(), in.GetKey(), err)
	}
	return &emptypb.Empty{}, nil
}

// DeleteBulkState deletes keys, all in one transaction.
func (g *GRPC) DeleteBulkState(ctx context.Context, in *runtimev1.DeleteBulkStateRequest) (*emptypb.Empty, error) {
	p, err := g.authorize(ctx, token(ctx), in.GetStoreName(), auth.ScopeWrite)
	if err != nil {
		return nil, g.fail(ctx, opBulkDelete, in.GetStoreName(), "", err)
	}
	ops := make([]txOp, len(in.GetStates()))
	for i, s := range in.GetStates() {
		ops[i] = txOp{del: deleteFromProto(s)}
	}
	if err := g.apply(ctx, p, "dapr-grpc", "delete", in.GetStoreName(), ops, nil); err != nil {
		return nil, g.fail(ctx, opBulkDelete, in.GetStoreName(), "", err)
	}
	return &emptypb.Empty{}, nil
}

// ExecuteStateTransaction applies upserts and deletes in one SQL
// transaction.
func (g *GRPC) ExecuteStateTransaction(ctx context.Context, in *runtimev1.ExecuteStateTransactionRequest) (*emptypb.Empty, error) {
	p, err := g.authorize(ctx, token(ctx), in.GetStoreName(), auth.ScopeWrite)
	if err != nil {
		return nil, g.fail(ctx, opTransaction, in.GetStoreName(), "", err)
	}
	ops := make([]txOp, len(in.GetOperations()))
	for i, o := range in.GetOperations() {
		switch o.GetOperationType() {
		case "upsert":
			ops[i] = txOp{set: setFromProto(o.GetRequest())}
		case "delete":
			ops[i] = txOp{del: deleteFromProto(o.GetRequest())}
		default:
			return nil, status.Errorf(codes.Unimplemented, "operation type %s not supported", o.GetOperationType())
		}
	}
	if err := g.apply(ctx, p, "dapr-grpc", "transaction", in.GetStoreName(), ops, in.GetMetadata()); err != nil {
		return nil, g.fail(ctx, opTransaction, in.GetStoreName(), "", err)
	}
	return &emptypb.Empty{}, nil
}

func setFromProto(s *commonv1.StateItem) *dapr.Save {
	return &dapr.Save{Key: s.GetKey(), Value: s.GetValue(), ETag: dapr.ETagOf(s.GetEtag()),
		Concurrency: dapr.Concurrency(s.GetOptions().GetConcurrency()), Metadata: s.GetMetadata()}
}

func deleteFromProto(s *commonv1.StateItem) *dapr.Delete {
	return &dapr.Delete{Key: s.GetKey(), ETag: dapr.ETagOf(s.GetEtag()),
		Concurrency: dapr.Concurrency(s.GetOptions().GetConcurrency()), Metadata: s.GetMetadata()}
}
