package rls

import (
	"context"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// start is 10 s into a day (and so into every unit's window, all aligned on the epoch): every
// window ends a whole number of seconds later.
var start = time.Unix(20000*86400+10, 0)

// observed records the service's Observe calls.
type observed struct {
	mu  sync.Mutex
	got []string
}

func (o *observed) observe(key string, out Outcome, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, key+" "+out.String())
}

func (o *observed) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) == 0 {
		return ""
	}
	return o.got[len(o.got)-1]
}

// serve starts the service on a loopback listener, deciding in a memstore whose clock stands
// at start, and returns a client of it.
func serve(t *testing.T, cfg *Config, o Options) (pb.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	mem := memstore.New(memstore.Options{Clock: func() int64 { return start.UnixMicro() }})
	o.Store = rules.Each(mem.Decide)
	o.Now = func() time.Time { return start }
	g := NewGRPC(New(cfg, o))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn), conn
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// st is a descriptor status in short: code, requests per unit and unit ("-" for no limit),
// remaining, seconds until reset.
type st struct {
	code      string
	limit     string
	remaining uint32
	reset     int64
}

func short(s *pb.RateLimitResponse_DescriptorStatus) st {
	out := st{code: s.Code.String(), limit: "-", remaining: s.LimitRemaining, reset: s.DurationUntilReset.GetSeconds()}
	if l := s.CurrentLimit; l != nil {
		out.limit = l.Unit.String() + ":" + strconv.FormatUint(uint64(l.RequestsPerUnit), 10)
		if l.Name != "" {
			out.limit += ":" + l.Name
		}
	}
	return out
}

// The README's examples over real gRPC, call after call: golden answers worked out from
// envoyproxy/ratelimit's source (config_impl.go's GetLimit, ratelimit.go, base_limiter.go).
func TestShouldRateLimitExamples(t *testing.T) {
	type call struct {
		domain  string
		hits    uint32
		descs   []*rlv3.RateLimitDescriptor
		overall string
		want    []st
		metric  string // the last Observe call, "" to skip
	}
	hour := int64(3600 - 10)
	for _, tc := range []struct {
		name  string
		calls []call
	}{
		{"per-key limit, counted to its end", []call{
			{"mongo_cps", 499, []*rlv3.RateLimitDescriptor{desc("database", "users")}, "OK", []st{{"OK", "SECOND:500", 1, 1}}, "mongo_cps.database_users allowed"},
			{"mongo_cps", 0, []*rlv3.RateLimitDescriptor{desc("database", "users")}, "OK", []st{{"OK", "SECOND:500", 0, 1}}, ""},
			{"mongo_cps", 1, []*rlv3.RateLimitDescriptor{desc("database", "users")}, "OVER_LIMIT", []st{{"OVER_LIMIT", "SECOND:500", 0, 1}}, "mongo_cps.database_users denied"},
			{"mongo_cps", 1, []*rlv3.RateLimitDescriptor{desc("database", "default")}, "OK", []st{{"OK", "SECOND:500", 499, 1}}, ""},
		}},
		{"no matching limit", []call{
			{"mongo_cps", 1, []*rlv3.RateLimitDescriptor{desc("database", "other")}, "OK", []st{{"OK", "-", 0, 0}}, ""},
			{"unknown_domain", 1, []*rlv3.RateLimitDescriptor{desc("database", "users")}, "OK", []st{{"OK", "-", 0, 0}}, ""},
			{"example4", 1, []*rlv3.RateLimitDescriptor{desc("key", "value")}, "OK", []st{{"OK", "-", 0, 0}}, ""},
		}},
		{"nested descriptors, each counted", []call{
			{"messaging", 1, []*rlv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111")},
				"OK", []st{{"OK", "DAY:5", 4, 86400 - 10}, {"OK", "DAY:100", 99, 86400 - 10}}, ""},
			{"messaging", 4, []*rlv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111")},
				"OK", []st{{"OK", "DAY:5", 0, 86400 - 10}, {"OK", "DAY:100", 95, 86400 - 10}}, ""},
			// One descriptor over its limit does not keep the other from counting.
			{"messaging", 1, []*rlv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111")},
				"OVER_LIMIT", []st{{"OVER_LIMIT", "DAY:5", 0, 86400 - 10}, {"OK", "DAY:100", 94, 86400 - 10}}, ""},
			{"messaging", 1, []*rlv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2062222222")},
				"OK", []st{{"OK", "DAY:5", 4, 86400 - 10}}, ""},
		}},
		{"block list: requests_per_unit 0", []call{
			{"edge_proxy_per_ip", 1, []*rlv3.RateLimitDescriptor{desc("remote_address", "50.0.0.5")}, "OVER_LIMIT", []st{{"OVER_LIMIT", "SECOND:0", 0, 1}}, "edge_proxy_per_ip.remote_address_50.0.0.5 denied"},
			{"edge_proxy_per_ip", 1, []*rlv3.RateLimitDescriptor{desc("remote_address", "50.0.0.1")}, "OK", []st{{"OK", "SECOND:10", 9, 1}}, "edge_proxy_per_ip.remote_address allowed"},
		}},
		{"unlimited", []call{
			{"internal", 1, []*rlv3.RateLimitDescriptor{desc("ldap", "x"), desc("azure", "y")}, "OK", []st{{"OK", "-", math.MaxUint32, 0}, {"OK", "MINUTE:100", 99, 50}}, "internal.azure allowed"},
		}},
		{"shadow mode answers OK over the limit", []call{
			{"example6", 10, []*rlv3.RateLimitDescriptor{desc("service", "auth-service", "user", "user-a")}, "OK", []st{{"OK", "SECOND:10", 0, 1}}, "example6.service.user_user-a allowed"},
			{"example6", 1, []*rlv3.RateLimitDescriptor{desc("service", "auth-service", "user", "user-a")}, "OK", []st{{"OK", "SECOND:10", 0, 1}}, "example6.service.user_user-a shadow_denied"},
			{"example6", 21, []*rlv3.RateLimitDescriptor{desc("service", "auth-service", "user", "user-b")}, "OVER_LIMIT", []st{{"OVER_LIMIT", "SECOND:20", 0, 1}}, "example6.service.user_user-b denied"},
		}},
		{"replaces", []call{
			{"example7", 5, []*rlv3.RateLimitDescriptor{desc("key_1", "value_1", "user", "bkthomps")}, "OK", []st{{"OK", "SECOND:5:specific_limit", 0, 1}}, ""},
			// With the replacing limit in the same request, the named one is not checked at all.
			{"example7", 1, []*rlv3.RateLimitDescriptor{desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")},
				"OK", []st{{"OK", "-", 0, 0}, {"OK", "SECOND:10", 9, 1}}, ""},
			{"example7", 1, []*rlv3.RateLimitDescriptor{desc("key_1", "value_1", "user", "bkthomps")}, "OVER_LIMIT", []st{{"OVER_LIMIT", "SECOND:5:specific_limit", 0, 1}}, ""},
		}},
		{"wildcards, shared and not", []call{
			{"example11", 6, []*rlv3.RateLimitDescriptor{desc("files", "files/a.pdf")}, "OK", []st{{"OK", "HOUR:10", 4, hour}}, "example11.files_files/* allowed"},
			{"example11", 4, []*rlv3.RateLimitDescriptor{desc("files", "files/b.csv")}, "OK", []st{{"OK", "HOUR:10", 0, hour}}, ""},
			{"example11", 1, []*rlv3.RateLimitDescriptor{desc("files", "files/c.txt")}, "OVER_LIMIT", []st{{"OVER_LIMIT", "HOUR:10", 0, hour}}, ""},
			{"example11", 10, []*rlv3.RateLimitDescriptor{desc("files_no_share", "files_no_share/a.pdf")}, "OK", []st{{"OK", "HOUR:10", 0, hour}}, ""},
			{"example11", 10, []*rlv3.RateLimitDescriptor{desc("files_no_share", "files_no_share/b.csv")}, "OK", []st{{"OK", "HOUR:10", 0, hour}}, ""},
		}},
		{"detailed metric", []call{
			{"example8", 1, []*rlv3.RateLimitDescriptor{desc("key1", "some")}, "OK", []st{{"OK", "MINUTE:10", 9, 50}}, "example8.key1_some allowed"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obs observed
			client, _ := serve(t, readExamples(t), Options{Observe: obs.observe})
			for i, c := range tc.calls {
				resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: c.domain, Descriptors: c.descs, HitsAddend: c.hits})
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				var got []st
				for _, s := range resp.Statuses {
					got = append(got, short(s))
				}
				if resp.OverallCode.String() != c.overall || !equal(got, c.want) {
					t.Fatalf("call %d: %s %+v\nwant %s %+v", i, resp.OverallCode, got, c.overall, c.want)
				}
				if len(resp.ResponseHeadersToAdd) != 0 {
					t.Fatalf("call %d: headers %v without response_headers", i, resp.ResponseHeadersToAdd)
				}
				if c.metric != "" && obs.last() != c.metric {
					t.Fatalf("call %d: observed %q, want %q", i, obs.last(), c.metric)
				}
			}
		})
	}
}

func equal(a, b []st) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// With Headers, the answer carries the RateLimit headers of the descriptor closest to its
// limit, or of the last one over it.
func TestHeaders(t *testing.T) {
	client, _ := serve(t, readExamples(t), Options{Headers: true})
	ask := func(hits uint32, descs ...*rlv3.RateLimitDescriptor) map[string]string {
		resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "messaging", Descriptors: descs, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		h := map[string]string{}
		for _, v := range resp.ResponseHeadersToAdd {
			h[v.Key] = v.Value
		}
		return h
	}
	marketing, number := desc("message_type", "marketing", "to_number", "1"), desc("to_number", "1")
	if h := ask(2, marketing, number); h[HeaderLimit] != "5" || h[HeaderRemaining] != "3" || h[HeaderReset] != "86390" {
		t.Fatalf("headers %v, want the marketing limit's (5, 3 left, 86390 s)", h)
	}
	if h := ask(4, number, marketing); h[HeaderLimit] != "5" || h[HeaderRemaining] != "0" {
		t.Fatalf("headers %v, want the marketing limit's, over it", h)
	}
	if h := ask(1, desc("nothing", "x")); len(h) != 0 {
		t.Fatalf("headers %v for a descriptor without a limit", h)
	}
}

// A descriptor's own hits_addend wins over the request's, 0 included (check only); Envoy's limit
// override counts a fixed window of its own; Diana's algorithm field counts with another
// algorithm, whose reset is its own (a sliding window's: until its estimate is 0, 50 + 60 s).
func TestHitsOverrideAlgorithm(t *testing.T) {
	cfg, err := Parse([]File{{Name: "a.yaml", Data: []byte(`domain: d
descriptors:
  - key: sw
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tb
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 10}
`)}}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client, _ := serve(t, cfg, Options{})
	ask := func(d *rlv3.RateLimitDescriptor, hits uint32) st {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{d}, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		return short(resp.Statuses[0])
	}
	peek := desc("sw", "a")
	peek.HitsAddend = wrapperspb.UInt64(0)
	if got := ask(desc("sw", "a"), 7); got != (st{"OK", "MINUTE:10", 3, 110}) {
		t.Fatalf("sliding window: %+v", got)
	}
	if got := ask(peek, 100); got != (st{"OK", "MINUTE:10", 3, 110}) {
		t.Fatalf("hits_addend 0: %+v", got)
	}
	if got := ask(desc("sw", "a"), 4); got.code != "OVER_LIMIT" {
		t.Fatalf("sliding window over: %+v", got)
	}
	if got := ask(desc("tb", "a"), 10); got != (st{"OK", "MINUTE:10", 0, 60}) {
		t.Fatalf("token bucket: %+v", got)
	}
	over := desc("route", "x")
	over.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_HOUR}
	if got := ask(over, 3); got != (st{"OK", "HOUR:3", 0, 3590}) {
		t.Fatalf("override: %+v", got)
	}
	if got := ask(over, 1); got.code != "OVER_LIMIT" {
		t.Fatalf("override over: %+v", got)
	}
	check := desc("route", "x")
	check.Limit, check.HitsAddend = over.Limit, wrapperspb.UInt64(0)
	if got := ask(check, 1); got.code != "OVER_LIMIT" {
		t.Fatalf("a check after the override went over: %+v, want OVER_LIMIT (its hits counted, as there)", got)
	}
	resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "unknown", Descriptors: []*rlv3.RateLimitDescriptor{over}, HitsAddend: 9})
	if err != nil || short(resp.Statuses[0]) != (st{"OK", "-", 0, 0}) {
		t.Fatalf("an override in an unknown domain: %v %v, want no limit, as there", resp, err)
	}
}

// Bad requests get InvalidArgument with the reason, in bounded time.
func TestBadRequests(t *testing.T) {
	client, _ := serve(t, readExamples(t), Options{})
	many := make([]*rlv3.RateLimitDescriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = desc("k", "v")
	}
	long := desc("k", strings.Repeat("v", MaxDescriptorLen))
	empty := &rlv3.RateLimitDescriptor{}
	for range MaxDescriptorLen/2 + 1 {
		empty.Entries = append(empty.Entries, &rlv3.RateLimitDescriptor_Entry{})
	}
	badUnit := desc("k", "v")
	badUnit.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	for _, tc := range []struct {
		req  *pb.RateLimitRequest
		want string
	}{
		{&pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}}, "rate limit domain must not be empty"},
		{&pb.RateLimitRequest{Domain: "d"}, "rate limit descriptor list must not be empty"},
		{&pb.RateLimitRequest{Domain: "d", Descriptors: many}, "257 descriptors: at most 256"},
		{&pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{long}}, "descriptors[0]: 16387 bytes"},
		{&pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v"), empty}}, "descriptors[1]: 16386 bytes"},
		{&pb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*rlv3.RateLimitDescriptor{badUnit}}, "descriptors[0].limit: unit UNKNOWN"},
	} {
		_, err := client.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want InvalidArgument with %q", err, tc.want)
		}
	}
}

// The health service answers SERVING for "" and "ratelimit", NOT_SERVING once draining; the
// reflection service lists RateLimitService.
func TestHealthAndReflection(t *testing.T) {
	mem := memstore.New(memstore.Options{})
	g := NewGRPC(New(nil, Options{Store: rules.Each(mem.Decide)}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	defer g.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	hc := healthpb.NewHealthClient(conn)
	for _, name := range []string{"", HealthName} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", name, r, err)
		}
	}
	g.Draining()
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: HealthName}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health while draining: %v %v", r, err)
	}
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Fatalf("reflection lists %v", names)
	}
}

// unit_multiplier (Envoy PR #47307) makes the window that many units, aligned on the epoch as
// every window; the limit in the answer carries it as its field 4, a UInt32Value.
func TestUnitMultiplier(t *testing.T) {
	cfg, err := Parse([]File{{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 3}\n")}}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _, now := clocked(t, cfg, Options{Headers: true})
	ask := func() (*pb.RateLimitResponse, st) {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp, short(resp.Statuses[0])
	}
	resp, got := ask()
	if got != (st{"OK", "MINUTE:3", 2, 290}) {
		t.Fatalf("first hit: %+v, want 2 left and the 5-minute window's end in 290 s", got)
	}
	if h := resp.ResponseHeadersToAdd; len(h) != 3 || h[2].Value != "290" {
		t.Fatalf("headers %v", h)
	}
	raw := resp.Statuses[0].CurrentLimit.ProtoReflect().GetUnknown()
	num, typ, n := protowire.ConsumeTag(raw)
	inner, m := protowire.ConsumeBytes(raw[n:])
	if num != 4 || typ != protowire.BytesType || m < 0 || n+m != len(raw) {
		t.Fatalf("the limit's unknown fields %x: want unit_multiplier, field 4, alone", raw)
	}
	if num, _, n := protowire.ConsumeTag(inner); num != 1 || n < 0 {
		t.Fatalf("unit_multiplier %x: want a UInt32Value", inner)
	} else if v, _ := protowire.ConsumeVarint(inner[n:]); v != 5 {
		t.Fatalf("unit_multiplier %d, want 5", v)
	}
	ask()
	ask()
	now.Add(time.Minute.Microseconds()) // within the same 5 minutes
	if _, got := ask(); got != (st{"OVER_LIMIT", "MINUTE:3", 0, 230}) {
		t.Fatalf("fourth hit a minute later: %+v", got)
	}
	now.Add(4 * time.Minute.Microseconds())
	if _, got := ask(); got != (st{"OK", "MINUTE:3", 2, 290}) {
		t.Fatalf("in the next 5 minutes: %+v", got)
	}
}

// Diana's algorithm field as an object: the algorithm's other parameters beside its name.
func TestAlgorithmObject(t *testing.T) {
	cfg, err := Parse([]File{{Name: "a.yaml", Data: []byte(`domain: d
descriptors:
  - key: tb
    algorithm: {name: token_bucket, burst: 6}
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: lb
    algorithm: {name: leaky_bucket, burst: 2, nodelay: true}
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: wu
    algorithm: {name: warm_up, warmup: 10s}
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: sw
    algorithm: {name: sliding_window, subwindows: 4}
    rate_limit: {unit: minute, requests_per_unit: 2}
`)}}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := clocked(t, cfg, Options{})
	admitted := func(key string, n int) int {
		ok := 0
		for range n {
			resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc(key, "x")}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode == pb.RateLimitResponse_OK {
				ok++
			}
		}
		return ok
	}
	for _, tc := range []struct {
		key  string
		want int
	}{{"tb", 6}, {"lb", 3}, {"wu", 1}, {"sw", 2}} {
		if got := admitted(tc.key, 10); got != tc.want {
			t.Errorf("%s: %d of 10 admitted at once, want %d", tc.key, got, tc.want)
		}
	}
}

// QUOTA_MODE and SHADOW_MODE, envoyproxy/ratelimit's settings for every descriptor: in quota
// mode a request is refused only when all its descriptors (unlimited ones aside) are over; in
// shadow mode it is never refused, the statuses unchanged and the denials counted.
func TestGlobalModes(t *testing.T) {
	cfg, err := Parse([]File{{Name: "a.yaml", Data: []byte(`domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
`)}}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var obs observed
	q, _, _ := clocked(t, cfg, Options{QuotaMode: true})
	sh, _, _ := clocked(t, cfg, Options{ShadowMode: true, Observe: obs.observe})
	ab := func() []*rlv3.RateLimitDescriptor { return descs(desc("a", "x"), desc("b", "x"), desc("free", "x")) }
	play(t, q, "d",
		call{ab(), "OK", []st{{"OK", "MINUTE:1", 0, 50}, {"OK", "MINUTE:2", 1, 50}, {"OK", "-", math.MaxUint32, 0}}, ""},
		call{ab(), "OK", []st{{"OVER_LIMIT", "MINUTE:1", 0, 50}, {"OK", "MINUTE:2", 0, 50}, {"OK", "-", math.MaxUint32, 0}}, ""},
		call{ab(), "OVER_LIMIT", []st{{"OVER_LIMIT", "MINUTE:1", 0, 50}, {"OVER_LIMIT", "MINUTE:2", 0, 50}, {"OK", "-", math.MaxUint32, 0}}, ""})
	play(t, sh, "d",
		call{descs(desc("a", "x")), "OK", []st{{"OK", "MINUTE:1", 0, 50}}, ""},
		call{descs(desc("a", "x")), "OK", []st{{"OVER_LIMIT", "MINUTE:1", 0, 50}}, ""})
	if obs.last() != "d.a shadow_denied" {
		t.Fatalf("observed %q", obs.last())
	}
}

// TestConcurrentRequests: requests of different sizes (some beyond what a pooled scratch
// keeps) from many goroutines at once each get their own answers, over real gRPC: the working
// memory reused across requests carries nothing from one to another.
func TestConcurrentRequests(t *testing.T) {
	cfg, err := Parse([]File{{Name: "a.yaml", Data: []byte(`domain: d
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: free
  - key: unl
    rate_limit: {unlimited: true}
`)}}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client, _ := serve(t, cfg, Options{})
	const goroutines, calls = 8, 30
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			n := 1 + g*3                                     // 1 to 22 descriptors
			key, other := "free", st{code: "OK", limit: "-"} // no limit, or unlimited for odd g
			if g%2 == 1 {
				key, other = "unl", st{code: "OK", limit: "-", remaining: math.MaxUint32}
			}
			descs := []*rlv3.RateLimitDescriptor{desc("client", strconv.Itoa(g))}
			for range n - 1 {
				descs = append(descs, desc(key, "x"))
			}
			for i := range calls {
				resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: descs})
				if err != nil {
					t.Error(err)
					return
				}
				if len(resp.Statuses) != n {
					t.Errorf("goroutine %d: %d statuses, want %d", g, len(resp.Statuses), n)
					return
				}
				want := st{code: "OK", limit: "HOUR:1000", remaining: uint32(1000 - i - 1), reset: 3590}
				if got := short(resp.Statuses[0]); got != want {
					t.Errorf("goroutine %d, call %d: %+v, want %+v", g, i, got, want)
					return
				}
				for j, s := range resp.Statuses[1:] {
					if got := short(s); got != other {
						t.Errorf("goroutine %d, call %d, descriptor %d: %+v, want %+v", g, i, j+1, got, other)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
