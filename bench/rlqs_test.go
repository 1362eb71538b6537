package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/diana-gw/diana/internal/redistest"
)

// The load of BenchmarkRLQS: each simulated Envoy instance holds one stream (on a connection of
// its own, as each Envoy does) and reports rlqsBuckets buckets in every usage report, the same
// buckets on every stream (a fleet sharing per-tenant limits); the fleets of 16 and 64 instances.
const rlqsBuckets = 100

var rlqsStreams = []int{16, 64}

// rlqsDescriptors is the quota service's domain beside BenchmarkRLS's (which dianad's start
// check asks): a per-tenant limit far above anything reported, so that every bucket is a share.
const rlqsDescriptors = `domain: quota
descriptors:
  - key: name
    value: api
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 1000000}
`

// BenchmarkRLQS measures what sizes a deployment of dianad's rate limit quota service (RLQS):
// dianad in cluster mode, a separate process on one redis-server (as BenchmarkRLS runs it), and
// 16 or 64 simulated Envoy instances each on its own gRPC stream, each usage report carrying
// rlqsBuckets buckets. Each stream sends its next report as soon as the previous one is
// answered (Envoy sends one a reporting interval): the ceiling. b.N is usage reports across the
// streams. Reported: usage reports and bucket reports (one bucket in one usage report: one
// fleet.lua call in Redis) per second, dianad's and redis-server's CPU per bucket report (from
// /proc), the p99 of a report's answer (its assignments), and redis-server's memory per bucket
// of the fleet (MEMORY USAGE of its keys, a bucket holding every stream's demand). Every report
// must be answered with a token bucket for each of its buckets, and none by rls.on_error.
func BenchmarkRLQS(b *testing.B) {
	rs := redistest.Start(b)
	dir := b.TempDir()
	for name, doc := range map[string]string{"bench.yaml": rlsDescriptors, "quota.yaml": rlqsDescriptors} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	addr, pid, metrics := startDianaRLS(b, buildDianad(b), dir, rs.Addr)
	rc := rs.Client()
	for _, streams := range rlqsStreams {
		b.Run("streams-"+strconv.Itoa(streams), func(b *testing.B) {
			ctx := context.Background()
			if err := rc.FlushAll(ctx).Err(); err != nil { // the fleets of the run before
				b.Fatal(err)
			}
			l := openRLQS(b, addr, streams, rlqsBuckets)
			defer l.close()
			l.each() // every stream's first report: its buckets join the fleets
			l.run(streams, nil)
			if err := l.err(); err != nil {
				b.Fatalf("warm-up: %v", err)
			}
			redisBytes := float64(fleetMemory(b, rc)) / rlqsBuckets
			runtime.GC()
			lat := make([]time.Duration, b.N)
			cpu, redisCPU := procCPU(pid), procCPU(rs.Pid())
			b.ResetTimer()
			start := time.Now()
			l.run(b.N, lat)
			elapsed := time.Since(start)
			b.StopTimer()
			cpu, redisCPU = procCPU(pid)-cpu, procCPU(rs.Pid())-redisCPU
			if err := l.err(); err != nil {
				b.Fatal(err)
			}
			slices.Sort(lat)
			bucketReports := float64(b.N * rlqsBuckets)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "reports/s")
			b.ReportMetric(bucketReports/elapsed.Seconds(), "bucket-reports/s")
			b.ReportMetric(float64(cpu)/float64(time.Microsecond)/bucketReports, "cpu-µs/bucket-report")
			b.ReportMetric(float64(redisCPU)/float64(time.Microsecond)/bucketReports, "redis-cpu-µs/bucket-report")
			b.ReportMetric(float64(lat[max(int(math.Ceil(0.99*float64(len(lat))))-1, 0)])/float64(time.Microsecond), "p99-µs")
			b.ReportMetric(redisBytes, "redis-bytes/bucket")
		})
	}
	var mem []float64 // bytes per stream and per bucket, measured once per run
	b.Run("memory", func(b *testing.B) {
		if mem == nil {
			mem = rlqsMemory(b, dir, rs.Addr)
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(mem[0], "dianad-bytes/stream")
		b.ReportMetric(mem[1], "dianad-bytes/bucket")
	})
	if n := scrape(b, metrics, `diana_backend_errors_total{rule="rlqs"}`); n != 0 {
		b.Fatalf("dianad: %v quota reports answered by on_error: Redis did not answer in time", n)
	}
}

// rlqsMemory measures what a stream and a bucket of it hold in dianad: a dianad of its own,
// started with GOGC=1 so that its heap never runs more than 1% above what is live, takes 64
// streams of one bucket each, then 99 more buckets on each; its heap and goroutine stacks
// (go_memstats_heap_alloc_bytes + go_memstats_stack_inuse_bytes) grow by a stream's cost 64
// times, then by a bucket's 64 × 99 times. The stream's includes gRPC's (its HTTP/2 stream and
// connection: one connection per Envoy instance).
func rlqsMemory(b *testing.B, dir, redisAddr string) []float64 {
	const streams = 64
	b.Setenv("GOGC", "1") // dianad's, which inherits the environment
	addr, _, metrics := startDianaRLS(b, buildDianad(b), dir, redisAddr)
	held := func() float64 {
		return scrape(b, metrics, "go_memstats_heap_alloc_bytes") + scrape(b, metrics, "go_memstats_stack_inuse_bytes")
	}
	base := held()
	one := openRLQS(b, addr, streams, 1)
	defer one.close()
	one.each()
	withStreams := held()
	more := &rlqsLoad{streams: one.streams, report: openReport(rlqsBuckets)}
	more.each()
	withBuckets := held()
	if err := errors.Join(one.err(), more.err()); err != nil {
		b.Fatal(err)
	}
	return []float64{(withStreams - base) / streams, (withBuckets - withStreams) / (streams * (rlqsBuckets - 1))}
}

// fleetMemory is the memory redis-server holds for the fleets of the quota service: every
// key under its prefix, by MEMORY USAGE (exact: every element counted).
func fleetMemory(b testing.TB, rc *redis.Client) int64 {
	ctx := context.Background()
	var total int64
	iter := rc.Scan(ctx, 0, "*rlqs:*", 1000).Iterator()
	for iter.Next(ctx) {
		n, err := rc.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err != nil {
			b.Fatal(err)
		}
		total += n
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
	return total
}

// rlqsLoad is the closed-loop load of the simulated Envoy instances: one stream each.
type rlqsLoad struct {
	conns   []*grpc.ClientConn
	streams []pb.RateLimitQuotaService_StreamRateLimitQuotasClient
	report  *pb.RateLimitQuotaUsageReports // every stream's report: the same buckets
	failures
}

// openRLQS opens n streams to addr, each to report the same buckets.
func openRLQS(b testing.TB, addr string, n, buckets int) *rlqsLoad {
	l := &rlqsLoad{report: openReport(buckets)}
	for range n {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		l.conns = append(l.conns, conn)
		st, err := pb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
		if err != nil {
			l.close()
			b.Fatal(err)
		}
		l.streams = append(l.streams, st)
	}
	return l
}

// close ends the streams (their buckets leave the fleets) and the connections.
func (l *rlqsLoad) close() {
	for _, st := range l.streams {
		st.CloseSend()
		for {
			if _, err := st.Recv(); err != nil {
				break
			}
		}
	}
	for _, c := range l.conns {
		c.Close()
	}
}

// run sends n usage reports over the streams, each stream its next as soon as its last is
// answered, recording report i's time to its answer in lat[i] (nil: none recorded). An answer
// that is not a token bucket for each bucket reported is a failure.
func (l *rlqsLoad) run(n int, lat []time.Duration) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, st := range l.streams {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				start := time.Now()
				err := st.Send(l.report)
				var resp *pb.RateLimitQuotaResponse
				if err == nil {
					resp, err = st.Recv()
				}
				d := time.Since(start)
				if err == nil {
					err = checkAssigned(resp, len(l.report.BucketQuotaUsages))
				}
				switch {
				case err != nil:
					l.fail(err)
					return // the stream is gone
				case lat != nil:
					lat[i] = d
				}
			}
		})
	}
	wg.Wait()
}

// each sends one usage report on every stream at once and waits for their answers.
func (l *rlqsLoad) each() {
	var wg sync.WaitGroup
	for _, st := range l.streams {
		wg.Go(func() {
			err := st.Send(l.report)
			var resp *pb.RateLimitQuotaResponse
			if err == nil {
				resp, err = st.Recv()
			}
			if err == nil {
				err = checkAssigned(resp, len(l.report.BucketQuotaUsages))
			}
			if err != nil {
				l.fail(err)
			}
		})
	}
	wg.Wait()
}

// checkAssigned says why resp is not a token bucket for each of the n buckets reported.
func checkAssigned(resp *pb.RateLimitQuotaResponse, n int) error {
	if len(resp.BucketAction) != n {
		return fmt.Errorf("%d bucket actions, want %d", len(resp.BucketAction), n)
	}
	for _, a := range resp.BucketAction {
		if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
			return errors.New("not a token bucket: " + a.String())
		}
	}
	return nil
}

// openReport is a usage report of 100 requests into each of buckets buckets of tenants.
func openReport(buckets int) *pb.RateLimitQuotaUsageReports {
	m := &pb.RateLimitQuotaUsageReports{Domain: "quota"}
	for i := range buckets {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &pb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &pb.BucketId{Bucket: map[string]string{"name": "api", "tenant": "t" + strconv.Itoa(i)}},
			NumRequestsAllowed: 100})
	}
	return m
}
