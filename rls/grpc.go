package rls

import (
	"runtime"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// HealthName is the service name whose health envoyproxy/ratelimit reports (as does "", the
// server's).
const HealthName = "ratelimit"

// GRPC is the gRPC server of the service: RateLimitService, the gRPC health service and server
// reflection (grpcurl lists and calls it without the .proto files).
type GRPC struct {
	*grpc.Server
	health *health.Server
}

// ServerOptions are the gRPC server's options: requests up to 4 MiB, and stream workers, so
// that a call runs on a goroutine whose stack has grown already instead of a new goroutine per
// call that grows its stack through the call (BenchmarkRLS's CPU profile showed the growth).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(4 << 20),
		grpc.NumStreamWorkers(uint32(workersPerCPU * runtime.GOMAXPROCS(0)))}
}

// workersPerCPU is the number of stream workers per CPU. A call waits for Redis on its worker,
// so each CPU has many calls under way; a call that finds every worker busy runs on a new
// goroutine, which grows its stack again. Many more workers than calls are no better: each call
// goes to the worker that has waited longest, so every worker's stack passes through the CPU's
// caches in turn. Chosen with BenchmarkRLS (docs/performance.md).
const workersPerCPU = 32

// NewGRPC returns a gRPC server serving s, with ServerOptions and opts (the listener's bounds).
func NewGRPC(s *Service, opts ...grpc.ServerOption) *GRPC {
	g := &GRPC{Server: grpc.NewServer(append(ServerOptions(), opts...)...), health: health.NewServer()}
	pb.RegisterRateLimitServiceServer(g.Server, s)
	healthpb.RegisterHealthServer(g.Server, g.health)
	reflection.Register(g.Server)
	g.health.SetServingStatus(HealthName, healthpb.HealthCheckResponse_SERVING)
	return g
}

// Draining reports NOT_SERVING from now on, so that Envoy's health checks move away before the
// server stops.
func (g *GRPC) Draining() { g.health.Shutdown() }
