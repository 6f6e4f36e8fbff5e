package grpcapi

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// health is grpc.health.v1.Health with the meaning of /healthz and
// /readyz: the empty service name answers liveness (SERVING while the
// process serves), and ServiceName answers readiness (SERVING when Redis
// and the warehouse answer). Watch is not offered.
type health struct {
	healthpb.UnimplementedHealthServer
	svc *warmcache.Service
	log *slog.Logger
}

func (h *health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case "":
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case ServiceName:
		st := healthpb.HealthCheckResponse_SERVING
		for _, t := range h.svc.Readiness(ctx) {
			if t.Err != nil {
				st = healthpb.HealthCheckResponse_NOT_SERVING
				h.log.LogAttrs(ctx, slog.LevelWarn, "tier not ready", slog.String("tier", t.Tier), slog.Any("err", t.Err))
			}
		}
		return &healthpb.HealthCheckResponse{Status: st}, nil
	default:
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
}

func (h *health) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	statuses := map[string]*healthpb.HealthCheckResponse{}
	for _, name := range []string{"", ServiceName} {
		resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			return nil, err
		}
		statuses[name] = resp
	}
	return &healthpb.HealthListResponse{Statuses: statuses}, nil
}
