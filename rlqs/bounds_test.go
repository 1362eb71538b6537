package rlqs

import (
	"context"
	"io"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func usage(id map[string]string, allowed, denied uint64) *pb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &pb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &pb.BucketId{Bucket: id}, NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

func many(n int) []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	var us []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage
	for i := range n {
		us = append(us, usage(map[string]string{"name": "api", "tenant": itoa(i)}, 1, 0))
	}
	return us
}

// Bad streams end with a status that names the field and the bound, and leave nothing held.
func TestBadStreams(t *testing.T) {
	long := map[string]string{}
	for i := range MaxBucketEntries + 1 {
		long["k"+itoa(i)] = "v"
	}
	for _, tc := range []struct {
		name   string
		msgs   []*pb.RateLimitQuotaUsageReports
		code   codes.Code
		want   string
		reason string
	}{
		{"no domain", []*pb.RateLimitQuotaUsageReports{{BucketQuotaUsages: many(1)}},
			codes.InvalidArgument, "domain: required in the stream's first report", RefusedMalformed},
		{"unknown domain", []*pb.RateLimitQuotaUsageReports{{Domain: "nope", BucketQuotaUsages: many(1)}},
			codes.NotFound, `domain "nope": no descriptor config declares it`, RefusedUnknownDomain},
		{"domain changed", []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: many(1)}, {Domain: "other", BucketQuotaUsages: many(1)}},
			codes.InvalidArgument, `domain: "other", but the stream is for "edge"`, RefusedMalformed},
		{"empty bucket id", []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: append(many(1), usage(nil, 1, 0))}},
			codes.InvalidArgument, "bucket_quota_usages[1].bucket_id: empty", RefusedMalformed},
		{"empty key", []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: append(many(1), usage(map[string]string{"": "x"}, 1, 0))}},
			codes.InvalidArgument, "bucket_quota_usages[1].bucket_id: an entry has an empty key", RefusedMalformed},
		{"empty value", []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: many(1)}, {BucketQuotaUsages: []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"name": ""}, 1, 0)}}},
			codes.InvalidArgument, `bucket_quota_usages[0].bucket_id: entry "name" has an empty value`, RefusedMalformed},
		{"too many entries", []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(long, 1, 0)}}},
			codes.InvalidArgument, "33 entries: at most 32", RefusedMalformed},
		{"too long", []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"k": strings.Repeat("v", MaxBucketLen)}, 1, 0)}}},
			codes.InvalidArgument, "4097 bytes of keys and values: at most 4096", RefusedMalformed},
		{"absurd usage", []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(acme, 1<<63, 1<<63)}}},
			codes.InvalidArgument, "bucket_quota_usages[0]: 9223372036854775808 requests allowed and 9223372036854775808 denied in one report", RefusedAbsurd},
		{"flood of buckets", []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: many(5)}, {BucketQuotaUsages: many(9)}},
			codes.ResourceExhausted, "9 buckets on one stream: at most 8 are tracked (rls.quota.max_buckets_per_stream)", RefusedTooMany},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var refused []string
			s := New(config(t, apiLimit(100)), Options{MaxBucketsPerStream: 8, Refused: func(r string, _ error) { refused = append(refused, r) }})
			addr := serve(t, s)
			err := play(t, addr, tc.msgs)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("stream ended with %v, want %v %q", err, tc.code, tc.want)
			}
			if len(refused) != 1 || refused[0] != tc.reason {
				t.Errorf("refused %v, want [%s]", refused, tc.reason)
			}
			if st := s.Stats(); st.Buckets != 0 || st.Streams != 0 {
				t.Errorf("after the stream: %+v held", st)
			}
		})
	}
}

// The bounds across streams: buckets in total, and streams.
func TestBoundsAcrossStreams(t *testing.T) {
	s := New(config(t, apiLimit(100)), Options{MaxBuckets: 6, MaxStreams: 2})
	addr := serve(t, s)
	first := open(t, addr)
	if err := first.Send(&pb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: many(5)}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	err := play(t, addr, []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: many(2)}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "7 buckets across every stream: at most 6 are tracked (rls.quota.max_buckets)") {
		t.Fatalf("second stream: %v", err)
	}
	second := open(t, addr)
	if err := second.Send(&pb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: many(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); err != nil {
		t.Fatal(err)
	}
	err = play(t, addr, []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: many(1)}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "2 streams open already") {
		t.Fatalf("third stream: %v", err)
	}
	if st := s.Stats(); st.Buckets != 6 || st.Streams != 2 {
		t.Fatalf("stats %+v, want 2 streams holding 6 buckets", st)
	}
}

func open(t *testing.T, addr string) pb.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := pb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// play sends msgs, each after the answer to the one before, and returns how the stream ended.
func play(t *testing.T, addr string, msgs []*pb.RateLimitQuotaUsageReports) error {
	t.Helper()
	st := open(t, addr)
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			break // the stream ended: Recv tells how
		}
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
	st.CloseSend()
	_, err := st.Recv()
	return err
}

// A stream that ends takes its instance out of every bucket of the fleet.
func TestLeaveOnEnd(t *testing.T) {
	table := NewTable(nil)
	s := New(config(t, apiLimit(100)), Options{Fleet: table})
	addr := serve(t, s)
	if err := play(t, addr, []*pb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: many(3)}}); err != io.EOF {
		t.Fatalf("stream: %v, want its clean end", err)
	}
	if n := table.Groups(); n != 0 {
		t.Fatalf("the fleet still holds %d buckets of the ended stream", n)
	}
	st := open(t, addr)
	st.Send(&pb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: many(3)})
	if _, err := st.Recv(); err != nil || table.Groups() != 3 {
		t.Fatalf("a live stream's buckets: %d in the fleet (%v)", table.Groups(), err)
	}
}
