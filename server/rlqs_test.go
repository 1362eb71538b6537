package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/diana-gw/diana/internal/envoytest"
	"github.com/diana-gw/diana/internal/redistest"
)

// Envoy's rate limit quota service in dianad: on the rls listener, from the descriptor config,
// reloaded with it, metered, and ended at shutdown.

// rlqsStream opens a StreamRateLimitQuotas call to ts's rls listener.
func rlqsStream(t *testing.T, ts *testServer) pb.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	conn, err := grpc.NewClient(ts.RLSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
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

// quotaReport sends one usage report of n requests into bucket {name: api} and returns the
// action answered (or pushed first).
func quotaReport(t *testing.T, st pb.RateLimitQuotaService_StreamRateLimitQuotasClient, n uint64) *pb.RateLimitQuotaResponse_BucketAction {
	t.Helper()
	if err := st.Send(&pb.RateLimitQuotaUsageReports{Domain: "q", BucketQuotaUsages: []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &pb.BucketId{Bucket: map[string]string{"name": "api"}}, NumRequestsAllowed: n}}}); err != nil {
		t.Fatal(err)
	}
	return quotaAction(t, st)
}

func quotaAction(t *testing.T, st pb.RateLimitQuotaService_StreamRateLimitQuotasClient) *pb.RateLimitQuotaResponse_BucketAction {
	t.Helper()
	m, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.BucketAction) != 1 {
		t.Fatalf("answer %v: want one action", m)
	}
	return m.BucketAction[0]
}

// perSecond is the rate of a token bucket action, 0 for another.
func perSecond(a *pb.RateLimitQuotaResponse_BucketAction) float64 {
	tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		return 0
	}
	return float64(tb.TokensPerFill.GetValue()) / float64(tb.FillInterval.GetSeconds())
}

func quotaLimit(n string) string {
	return "domain: q\ndescriptors:\n  - key: name\n    value: api\n    rate_limit: {unit: second, requests_per_unit: " + n + "}\n"
}

func TestRLQS(t *testing.T) {
	dir := t.TempDir()
	put := func(data string) {
		tmp := filepath.Join(t.TempDir(), "q.yaml")
		if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "q.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	put(quotaLimit("100"))
	ts := startFile(t, rlsConfig(dir, "  quota: {max_buckets_per_stream: 4, assignment_ttl: 20s}\n"))
	st := rlqsStream(t, ts)
	a := quotaReport(t, st, 1)
	if perSecond(a) != 100 || a.GetQuotaAssignmentAction().AssignmentTimeToLive.GetSeconds() != 20 {
		t.Fatalf("first assignment of a lone instance: %v, want the whole limit for 20s", a)
	}
	// A lowered limit is pushed on reload, before any report.
	put(quotaLimit("30"))
	ts.Reload()
	if a := quotaAction(t, st); perSecond(a) != 30 {
		t.Fatalf("pushed on reload: %v, want 30 a second", a)
	}
	// A limit removed: abandoned.
	put("domain: q\n")
	ts.Reload()
	if a := quotaAction(t, st); a.GetAbandonAction() == nil {
		t.Fatalf("pushed on reload: %v, want abandon_action", a)
	}
	// A bucket without limit: ALLOW_ALL.
	if a := quotaReport(t, st, 1); a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule().String() != "ALLOW_ALL" {
		t.Fatalf("no limit: %v", a)
	}
	// A bad stream: its status, counted.
	bad := rlqsStream(t, ts)
	bad.Send(&pb.RateLimitQuotaUsageReports{Domain: "nowhere", BucketQuotaUsages: []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &pb.BucketId{Bucket: map[string]string{"name": "api"}}}}})
	if _, err := bad.Recv(); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `domain "nowhere"`) {
		t.Fatalf("unknown domain: %v", err)
	}
	for series, want := range map[string]float64{
		`diana_rlqs_actions_total{action="token_bucket",reason="limit"}`: 2,
		`diana_rlqs_actions_total{action="abandon",reason="removed"}`:    1,
		`diana_rlqs_actions_total{action="allow_all",reason="no_limit"}`: 1,
		`diana_rlqs_refused_streams_total{reason="unknown_domain"}`:      1,
		`diana_rlqs_refused_streams_total{reason="too_many_buckets"}`:    0,
		`diana_rlqs_streams`: 1,
		`diana_rlqs_buckets`: 1,
	} {
		if got := metric(t, ts, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// Shutdown ends the stream at once (UNAVAILABLE: Envoy opens it again elsewhere) rather than
	// holding dianad for its whole shutdown timeout.
	start := time.Now()
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream at shutdown: %v", err)
	}
	if d := time.Since(start); d > waitFor/2 {
		t.Fatalf("shutdown took %v with a quota stream open", d)
	}
}

// Two dianad in cluster mode on one redis-server divide one limit between the Envoy instances
// each serves.
func TestRLQSCluster(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "q.yaml"), []byte(quotaLimit("100")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := rlsConfig(dir, "  mode: cluster\n") + "redis: {addrs: [\"" + rs.Addr + "\"]}\n"
	a, b := rlqsStream(t, startFile(t, cfg)), rlqsStream(t, startFile(t, cfg))
	quotaReport(t, a, 1)
	quotaReport(t, b, 1)
	time.Sleep(100 * time.Millisecond)
	quotaReport(t, a, 30) // a's demand is now known; b's not yet: b counts for an equal share
	rateB := perSecond(quotaReport(t, b, 10))
	time.Sleep(100 * time.Millisecond)
	rateA := perSecond(quotaReport(t, a, 30))
	// Measured over real sleeps, so loosely: apart, each dianad would give its instance all 100.
	if rateA+rateB < 85 || rateA+rateB > 115 || rateA < 55 {
		t.Fatalf("the instances' shares: %v and %v a second, want about 100 together, the busier one the most", rateA, rateB)
	}
}

// rls.quota's fields are read, bounded and refused with their names.
func TestRLQSConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "q.yaml"), []byte(quotaLimit("1")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ quota, err string }{
		{"{max_buckets_per_stream: 5, max_buckets: 50, max_streams: 2, assignment_ttl: 1m}", ""},
		{"{assignment_ttl: 1500ms}", "rls.quota.assignment_ttl: must be whole seconds"},
		{"{assignment_ttl: 500ms}", "rls.quota.assignment_ttl"},
		{"{max_buckets: 0}", "rls.quota.max_buckets"},
		{"{max_bucket: 5}", "rls.quota.max_bucket"},
	} {
		c, err := Parse([]byte(rlsConfig(dir, "  quota: "+tc.quota+"\n")), "cfg.yaml")
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.quota, err)
		case tc.err == "" && (c.RLS.Quota != Quota{MaxBucketsPerStream: 5, MaxBuckets: 50, MaxStreams: 2, AssignmentTTL: time.Minute}):
			t.Errorf("%s: read as %+v", tc.quota, c.RLS.Quota)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want %q", tc.quota, err, tc.err)
		}
	}
}

// examples/envoy-rlqs.yaml is a valid Envoy bootstrap (go-control-plane's ValidateAll on the
// bootstrap, the filter's config and every bucket's settings) whose rate_limit_quota filter asks
// examples/diana-rls.yaml's rls.listen, and dianad run on that config assigns each bucket the
// filter builds its limit from examples/ratelimit/quota.yaml.
func TestRLQSExample(t *testing.T) {
	t.Chdir("..")
	b := envoytest.Bootstrap(t, "examples/envoy-rlqs.yaml")
	var hcm hcmv3.HttpConnectionManager
	if err := b.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	if err := hcm.ValidateAll(); err != nil {
		t.Fatalf("http_connection_manager: %v", err)
	}
	var fc rlqsfilterv3.RateLimitQuotaFilterConfig
	if hcm.HttpFilters[0].Name != "envoy.filters.http.rate_limit_quota" {
		t.Fatalf("first filter %s", hcm.HttpFilters[0].Name)
	}
	if err := hcm.HttpFilters[0].GetTypedConfig().UnmarshalTo(&fc); err != nil {
		t.Fatal(err)
	}
	if err := fc.ValidateAll(); err != nil {
		t.Fatalf("rate_limit_quota filter: %v", err)
	}
	// Each bucket's settings (typed configs, which ValidateAll does not open), and the bucket ids
	// they build, a custom value read as "acme".
	var buckets []map[string]string
	settings := func(where string, a interface {
		GetTypedConfig() *anypb.Any
	}) {
		var s rlqsfilterv3.RateLimitQuotaBucketSettings
		if err := a.GetTypedConfig().UnmarshalTo(&s); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if err := s.ValidateAll(); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		id := map[string]string{}
		for k, v := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
			id[k] = v.GetStringValue()
			if cv := v.GetCustomValue(); cv != nil {
				var in matcherv3.HttpRequestHeaderMatchInput
				if err := cv.GetTypedConfig().UnmarshalTo(&in); err != nil || in.ValidateAll() != nil {
					t.Fatalf("%s: custom value %s: %v", where, k, err)
				}
				id[k] = "acme"
			}
		}
		buckets = append(buckets, id)
	}
	for i, m := range fc.BucketMatchers.GetMatcherList().GetMatchers() {
		settings("matchers["+strconv.Itoa(i)+"]", m.GetOnMatch().GetAction())
	}
	settings("on_no_match", fc.BucketMatchers.GetOnNoMatch().GetAction())

	cfgData, err := os.ReadFile("examples/diana-rls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(cfgData, "examples/diana-rls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cluster := fc.RlqsServer.GetEnvoyGrpc().GetClusterName()
	found := false
	for _, c := range b.StaticResources.Clusters {
		if c.Name != cluster {
			continue
		}
		found = true
		var po upstreamsv3.HttpProtocolOptions
		if err := c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&po); err != nil || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
			t.Errorf("cluster %s: not HTTP/2 (%v)", cluster, err)
		}
		sa := c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress()
		if got := net.JoinHostPort(sa.Address, strconv.Itoa(int(sa.GetPortValue()))); got != cfg.RLS.Listen {
			t.Errorf("cluster %s points at %s, dianad's rls.listen is %s", cluster, got, cfg.RLS.Listen)
		}
	}
	if !found {
		t.Fatalf("the filter asks cluster %q, which the bootstrap lacks", cluster)
	}

	cfg.RLS.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	st := rlqsStream(t, startConfig(t, cfg, ""))
	for i, id := range buckets {
		if err := st.Send(&pb.RateLimitQuotaUsageReports{Domain: fc.Domain, BucketQuotaUsages: []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &pb.BucketId{Bucket: id}, NumRequestsAllowed: 1}}}); err != nil {
			t.Fatal(err)
		}
		if got, want := perSecond(quotaAction(t, st)), []float64{100, 1000}[i]; got != want {
			t.Errorf("bucket %v: %v a second, want quota.yaml's %v", id, got, want)
		}
	}
}

// In cluster mode the quota service's Redis round trips go through the breaker of dianad's
// decisions: with redis-server stopped (SIGSTOP) the failed reports open it, metered and
// logged as the decisions' are; while it is open each report is answered by rls.on_error at
// once, without a round trip; after Redis is back it closes and the split resumes.
func TestRLQSBreaker(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "q.yaml"), []byte(quotaLimit("100")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := rlsConfig(dir, "  mode: cluster\n  on_error: closed\n") + "redis: {addrs: [\"" + rs.Addr + "\"], timeout: " + faultTimeout +
		", breaker_failures: 3, breaker_open_for: 700ms}\n"
	ts := startFile(t, cfg)
	st := rlqsStream(t, ts)
	if a := quotaReport(t, st, 1); perSecond(a) != 100 {
		t.Fatalf("with Redis up: %v", a)
	}
	deny := func(a *pb.RateLimitQuotaResponse_BucketAction) bool {
		return a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule().String() == "DENY_ALL"
	}
	rs.Pause()
	t.Cleanup(rs.Resume)
	// Three failed round trips open it; more if a timeout fell while this busy machine starved
	// dianad of CPU (not counted against Redis).
	failed := 0
	for ; metric(t, ts, breakerOpen) != 1; failed++ {
		if failed == 20 {
			t.Fatalf("%s = %v after %d failed reports", breakerOpen, metric(t, ts, breakerOpen), failed)
		}
		if a := quotaReport(t, st, 10); !deny(a) {
			t.Fatalf("report %d with Redis stopped: %v, want DENY_ALL (on_error closed)", failed, a)
		}
	}
	// With the breaker open, a report is answered without a round trip to Redis (counted
	// below): what "at once" means, whatever the machine's load.
	trips := metric(t, ts, redisTrips)
	for i := range 5 {
		if a := quotaReport(t, st, 10); !deny(a) {
			t.Fatalf("report %d with the breaker open: %v, want DENY_ALL", i, a)
		}
	}
	if got := metric(t, ts, redisTrips); got != trips {
		t.Fatalf("%v round trips to Redis while the breaker was open", got-trips)
	}
	if got := metric(t, ts, `diana_backend_errors_total{rule="rlqs"}`); got != float64(failed+5) {
		t.Fatalf("backend errors of rlqs: %v, want %d (%d failed round trips, 5 skipped)", got, failed+5, failed)
	}
	rs.Resume()
	time.Sleep(700 * time.Millisecond)
	if a := quotaReport(t, st, 10); perSecond(a) != 100 || metric(t, ts, breakerOpen) != 0 {
		t.Fatalf("after Redis came back: %v, %s = %v", a, breakerOpen, metric(t, ts, breakerOpen))
	}
}
