// Command rlsempty is BenchmarkRLS's ceiling: a rate limit service that decides nothing. It
// answers every request OK, with one fixed limit on each descriptor, over gRPC with the server
// options of dianad's service. Under the benchmark's load on the same machine, its requests per
// second bound what any rate limit service can reach there: the clients' CPU and the gRPC
// framework's are spent all the same, and Redis's is not.
//
//	go run ./bench/rlsempty -listen 127.0.0.1:8081
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/diana-gw/diana/rls"
)

// empty answers every descriptor OK under one limit.
type empty struct {
	pb.UnimplementedRateLimitServiceServer
}

var limit = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 4_000_000_000, Unit: pb.RateLimitResponse_RateLimit_HOUR}

func (empty) ShouldRateLimit(_ context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, CurrentLimit: limit, LimitRemaining: 1}
	}
	return resp, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "the gRPC address to serve")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsempty:", err)
		os.Exit(1)
	}
	s := grpc.NewServer(rls.ServerOptions()...)
	pb.RegisterRateLimitServiceServer(s, empty{})
	if err := s.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "rlsempty:", err)
		os.Exit(1)
	}
}
