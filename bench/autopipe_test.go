package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/rls"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/redisstore"
)

// BenchmarkRLSAutoPipeline compares the two ways redisstore shares round trips between
// goroutines, the coalescer ("coalescer") and go-redis's auto-pipeliner ("autopipe"), under
// dianad's rate limit service without gRPC (BenchmarkRLSService's descriptors and requests, the
// cluster store stack on one redis-server), from 1, 16 and 64 goroutines: b.N requests each, in
// alternating rounds of 1,000. It reports each one's time per request (µs/op:NAME), Redis's
// CPU per request (redis-µs/op:NAME), and x:autopipe, the auto-pipeliner's time over the
// coalescer's (above 1 when the coalescer is faster).
func BenchmarkRLSAutoPipeline(b *testing.B) {
	rs := redistest.Start(b)
	cfg, err := rls.Parse([]rls.File{{Name: "bench.yaml", Data: []byte(rlsDescriptors)}}, rls.ParseOptions{Cluster: true})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*pb.RateLimitRequest, rlsIPs)
	for i := range reqs {
		reqs[i] = rlsRequest(i)
	}
	ctx := context.Background()
	redisCPU := func() time.Duration {
		cpu, err := rs.CPU(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return cpu
	}
	for _, g := range []int{1, 16, 64} {
		b.Run("g="+strconv.Itoa(g), func(b *testing.B) {
			var sides []side
			for _, v := range []struct {
				name string
				auto bool
			}{{"coalescer", false}, {"autopipe", true}} {
				c, err := redisstore.Open(redisstore.Conn{Addrs: []string{rs.Addr}}) // a client each: the pipeliner is the client's
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				st := redisstore.New(c, redisstore.Options{AutoPipeline: v.auto})
				svc := rls.New(cfg, rls.Options{Store: failover.New(batch.New(st, batch.Options{}), failover.Options{Timeout: 5 * time.Second})})
				sides = append(sides, side{name: v.name, run: func(from, n int) time.Duration {
					return concurrently(g, n, func(j int) {
						resp, err := svc.ShouldRateLimit(ctx, reqs[(from+j)*7919%len(reqs)])
						if err != nil || len(resp.Statuses) != 2 || resp.Statuses[1].CurrentLimit == nil {
							b.Errorf("answer %v, %v", resp, err)
						}
					})
				}})
			}
			inRounds(b, 1000, sides, redisCPU)
			report(b, sides, time.Microsecond, "µs/op:", "redis-µs/op:")
		})
	}
}
