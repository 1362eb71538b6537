package server

import (
	"context"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/internal/envoytest"
	"github.com/diana-gw/diana/internal/redistest"
)

// The rate limit service of dianad, end to end: dianad started from a config file with an rls
// section, called over real gRPC as Envoy calls it.

// examplesDir holds envoyproxy/ratelimit's README examples, one domain per file.
var examplesDir, _ = filepath.Abs(filepath.Join("..", "rls", "testdata", "examples"))

// rlsClient dials ts's rate limit service.
func rlsClient(t *testing.T, ts *testServer) (pb.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient(ts.RLSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn), conn
}

func rlsDesc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask sends one request and returns the overall code and each descriptor's remaining count.
func ask(t *testing.T, c pb.RateLimitServiceClient, domain string, hits uint32, descs ...*rlv3.RateLimitDescriptor) (string, []uint32) {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	var rem []uint32
	for _, s := range resp.Statuses {
		rem = append(rem, s.LimitRemaining)
	}
	return resp.OverallCode.String(), rem
}

func rlsConfig(dir, extra string) string {
	return header + "rls:\n  listen: \"127.0.0.1:0\"\n  config_dir: " + dir + "\n" + extra
}

// Local mode: the README's examples answered by dianad, with headers, metrics and health.
func TestRLSLocal(t *testing.T) {
	ts := startFile(t, rlsConfig(examplesDir, "  response_headers: true\n"))
	c, conn := rlsClient(t, ts)
	marketing := rlsDesc("message_type", "marketing", "to_number", "2061111111")
	number := rlsDesc("to_number", "2061111111")
	if code, rem := ask(t, c, "messaging", 5, marketing, number); code != "OK" || rem[0] != 0 || rem[1] != 95 {
		t.Fatalf("%s %v, want OK [0 95]", code, rem)
	}
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "messaging", Descriptors: []*rlv3.RateLimitDescriptor{marketing, number}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || len(resp.ResponseHeadersToAdd) != 3 ||
		resp.ResponseHeadersToAdd[0].Value != "5" || resp.ResponseHeadersToAdd[1].Value != "0" {
		t.Fatalf("over the limit: %v", resp)
	}
	if code, _ := ask(t, c, "example6", 50, rlsDesc("service", "s", "user", "user-a")); code != "OK" {
		t.Fatalf("shadow mode: %s", code)
	}
	if code, _ := ask(t, c, "nowhere", 1, rlsDesc("k", "v")); code != "OK" {
		t.Fatalf("unknown domain: %s", code)
	}
	for series, want := range map[string]float64{
		`diana_decisions_total{result="allowed",rule="rls:messaging.to_number"}`:                       2,
		`diana_decisions_total{result="denied",rule="rls:messaging.message_type_marketing.to_number"}`: 1,
		`diana_decisions_total{result="shadow_denied",rule="rls:example6.service.user_user-a"}`:        1,
		`diana_rls_unknown_domain_total`: 1,
	} {
		if got := metric(t, ts, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	hc := healthpb.NewHealthClient(conn)
	if r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", r, err)
	}
}

// The descriptor config is reloaded when a file changes; an invalid one is refused, counted and
// the running one kept.
func TestRLSReload(t *testing.T) {
	dir := t.TempDir()
	put := func(data string) { // renamed in, so that dianad never reads half a file
		tmp := filepath.Join(t.TempDir(), "d.yaml")
		if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "d.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	limit := func(n string) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: " + n + "}\n"
	}
	put(limit("2"))
	ts := startFile(t, rlsConfig(dir, ""))
	c, _ := rlsClient(t, ts)
	if code, rem := ask(t, c, "d", 2, rlsDesc("k", "a")); code != "OK" || rem[0] != 0 {
		t.Fatalf("%s %v", code, rem)
	}
	put(limit("5"))
	ts.Reload()
	peek := rlsDesc("k", "a")
	peek.HitsAddend = wrapperspb.UInt64(0) // asks without counting
	eventually(t, "the new limit", func() bool {
		code, _ := ask(t, c, "d", 1, peek)
		return code == "OK" && metric(t, ts, `diana_config_reloads_total{result="ok",source="rls"}`) == 1
	})
	if code, rem := ask(t, c, "d", 3, rlsDesc("k", "a")); code != "OK" || rem[0] != 0 {
		t.Fatalf("after the reload: %s %v, want OK [0]", code, rem)
	}
	put(limit("5") + "  - key: k\n")
	ts.Reload()
	eventually(t, "the refused reload", func() bool {
		return metric(t, ts, `diana_config_reloads_total{result="error",source="rls"}`) == 1
	})
	if code, _ := ask(t, c, "d", 1, rlsDesc("k", "a")); code != "OVER_LIMIT" {
		t.Fatalf("the running config was dropped: %s", code)
	}
}

// Cluster mode: two dianad instances count one limit in one redis-server; with Redis gone,
// on_error decides, counted as backend errors.
func TestRLSCluster(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 10}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := func(onError string) string {
		return rlsConfig(dir, "  mode: cluster\n  on_error: "+onError+"\n") + "redis: {addrs: [\"" + rs.Addr + "\"], timeout: " + exactTimeout + "}\n"
	}
	a, b := startFile(t, yaml("open")), startFile(t, yaml("closed"))
	ca, _ := rlsClient(t, a)
	cb, _ := rlsClient(t, b)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := ca
			if i%2 == 1 {
				c = cb
			}
			if code, _ := ask(t, c, "d", 1, rlsDesc("k", "shared")); code == "OK" {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 10 {
		t.Fatalf("%d of 16 requests allowed across two instances, want 10", ok)
	}
	rs.Stop()
	if code, _ := ask(t, ca, "d", 1, rlsDesc("k", "other")); code != "OK" {
		t.Fatalf("on_error open with Redis down: %s", code)
	}
	if code, _ := ask(t, cb, "d", 1, rlsDesc("k", "other")); code != "OVER_LIMIT" {
		t.Fatalf("on_error closed with Redis down: %s", code)
	}
	if got := metric(t, a, `diana_backend_errors_total{rule="rls:d.k"}`); got != 1 {
		t.Fatalf("backend errors %v, want 1", got)
	}
}

// TestRLSBatch: a descriptor with Diana's batch extension is counted in batched mode: across
// two instances sharing Redis it admits no more than its limit, and Redis sees far fewer script
// calls than requests.
func TestRLSBatch(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	doc := "domain: d\ndescriptors:\n  - key: k\n    batch: {max: 50}\n    rate_limit: {unit: year, requests_per_unit: 300}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := rlsConfig(dir, "  mode: cluster\n") + "redis: {addrs: [\"" + rs.Addr + "\"], timeout: " + exactTimeout + "}\n"
	a, b := startFile(t, yaml), startFile(t, yaml)
	ca, _ := rlsClient(t, a)
	cb, _ := rlsClient(t, b)
	ctx := context.Background()
	before, err := rs.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for i := range 400 {
		c := ca
		if i%4 == 3 { // uneven: 3 of 4 requests through a
			c = cb
		}
		if code, _ := ask(t, c, "d", 1, rlsDesc("k", "shared")); code == "OK" {
			ok++
		}
	}
	// Never over; under by at most what the two instances hold unspent, a batch of 50 each.
	if ok > 300 || ok < 200 {
		t.Fatalf("%d of 400 requests allowed by a limit of 300 in batches of up to 50 on two instances, want 200 to 300", ok)
	}
	after, err := rs.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls := after["evalsha"].Calls + after["eval"].Calls - before["evalsha"].Calls - before["eval"].Calls
	if calls > 100 {
		t.Fatalf("%d script calls for 400 requests, want far fewer (batches of up to 50)", calls)
	}
	t.Logf("%d of 400 allowed by a limit of 300; %d script calls", ok, calls)
}

// The rls section's errors name the field; the descriptor config's, the file and the field.
func TestRLSConfigErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"version: 1\nrls: {config_dir: /x}\n", "cfg.yaml: rls.listen: is required"},
		{"version: 1\nrls: {listen: \":1\"}\n", "cfg.yaml: rls.config_dir: is required"},
		{"version: 1\nrls: {listen: \":1\", config_dir: /x, mode: cluster}\n", "cfg.yaml: rls.mode: cluster mode needs the redis section"},
		{"version: 1\nrls: {listen: \":1\", config_dir: /x, on_error: closed}\n", "cfg.yaml: rls.on_error: applies only to mode cluster"},
		{"version: 1\nrls: {listen: \":99999\", config_dir: /x}\n", "cfg.yaml: rls.listen: must be host:port"},
		{"version: 1\nrls: {listen: \":1\", config_dir: /x, headers: true}\n", "cfg.yaml: rls.headers: unknown field"},
	} {
		doc, err := config.Decode([]byte(tc.doc), "cfg.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(doc, "cfg.yaml", false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.doc, err, tc.want)
		}
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Parse([]byte("version: 1\nrls: {listen: \":1\", config_dir: "+dir+"}\n"), "cfg.yaml")
	if err == nil || !strings.Contains(err.Error(), bad+`: descriptors[0].rate_limit.unit: must be one of second, minute, hour, day, week, month, year, got "fortnight"`) {
		t.Fatalf("Parse: %v", err)
	}
	if _, err := Parse([]byte("version: 1\nrls: {listen: \":1\", config_dir: "+filepath.Join(dir, "none")+"}\n"), "cfg.yaml"); err == nil || !strings.Contains(err.Error(), "rls: config_dir:") {
		t.Fatalf("Parse with a missing config_dir: %v", err)
	}
}

// examples/envoy-rls.yaml is a valid Envoy bootstrap whose rate limit filter asks the cluster of
// examples/diana-rls.yaml's rls.listen over HTTP/2, and dianad run on that config answers the
// descriptors its routes send from examples/ratelimit, as the comments there say.
func TestRLSExamples(t *testing.T) {
	t.Chdir("..") // the example's config_dir is relative to the repository's root
	cfg, _, rl := rlsExample(t, "examples/envoy-rls.yaml")
	if rl.Domain != "edge" {
		t.Fatalf("the filter asks for domain %q", rl.Domain)
	}
	cfg.RLS.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	ts := startConfig(t, cfg, "")
	c, _ := rlsClient(t, ts)
	ip, login := rlsDesc("remote_address", "203.0.113.9"), rlsDesc("remote_address", "203.0.113.9", "path", "/login")
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		if code, _ := ask(t, c, "edge", 1, ip, login); code != want {
			t.Fatalf("login %d: %s, want %s", i+1, code, want)
		}
	}
	if code, _ := ask(t, c, "edge", 1, rlsDesc("remote_address", "203.0.113.9"), rlsDesc("remote_address", "203.0.113.9", "path", "/home")); code != "OK" {
		t.Fatalf("another path: %s", code)
	}
	if code, _ := ask(t, c, "edge", 1, rlsDesc("remote_address", "192.0.2.66")); code != "OVER_LIMIT" {
		t.Fatalf("blocked address: %s", code)
	}
}

// rlsExample reads examples/diana-rls.yaml and the Envoy bootstrap at path, checks that the
// bootstrap is valid (with its typed configs unpacked, which ValidateAll does not look into)
// and that its rate limit filter asks dianad's rls.listen over HTTP/2, and returns dianad's
// config, the connection manager and the filter's config.
func rlsExample(t *testing.T, path string) (*Config, *hcmv3.HttpConnectionManager, *ratelimitv3.RateLimit) {
	t.Helper()
	b := envoytest.Bootstrap(t, path)
	var hcm hcmv3.HttpConnectionManager
	if err := b.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	if err := hcm.ValidateAll(); err != nil {
		t.Fatalf("http_connection_manager: %v", err)
	}
	var rl ratelimitv3.RateLimit
	if err := hcm.HttpFilters[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	if err := rl.ValidateAll(); err != nil {
		t.Fatalf("ratelimit filter: %v", err)
	}
	cfgData, err := os.ReadFile("examples/diana-rls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(cfgData, "examples/diana-rls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cluster := rl.RateLimitService.GetGrpcService().GetEnvoyGrpc().GetClusterName()
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
		t.Fatalf("the filter asks cluster %q, which the bootstrap does not declare", cluster)
	}
	return cfg, &hcm, &rl
}

// examples/envoy-rls-stream-done.yaml checks each request with hits_addend 0 and charges the
// upstream's x-tokens-used when the stream is done; dianad, from examples/ratelimit/tokens.yaml,
// answers OK until a charge takes the key over its budget, then OVER_LIMIT to the checks.
func TestRLSStreamDoneExample(t *testing.T) {
	t.Chdir("..")
	cfg, hcm, rl := rlsExample(t, "examples/envoy-rls-stream-done.yaml")
	limits := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits()
	if rl.Domain != "tokens" || len(limits) != 2 ||
		limits[0].GetHitsAddend().GetNumber() == nil || limits[0].GetHitsAddend().GetNumber().Value != 0 || limits[0].ApplyOnStreamDone ||
		limits[1].GetHitsAddend().GetFormat() != "%RESP(x-tokens-used)%" || !limits[1].ApplyOnStreamDone {
		t.Fatalf("domain %q, rate limits %v: want a check with hits_addend 0 and a charge of x-tokens-used on stream done", rl.Domain, limits)
	}
	cfg.RLS.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	ts := startConfig(t, cfg, "")
	c, _ := rlsClient(t, ts)
	key := func(hits uint64) *rlv3.RateLimitDescriptor {
		d := rlsDesc("api_key", "k-1")
		d.HitsAddend = wrapperspb.UInt64(hits)
		return d
	}
	for i, s := range []struct {
		hits uint64
		code string
	}{{0, "OK"}, {15000, "OK"}, {0, "OK"}, {6000, "OVER_LIMIT"}, {0, "OVER_LIMIT"}} {
		if code, _ := ask(t, c, "tokens", 1, key(s.hits)); code != s.code {
			t.Fatalf("call %d (hits_addend %d): %s, want %s", i, s.hits, code, s.code)
		}
	}
}

// The README's examples through dianad in cluster mode, counted in a real redis-server: the
// calls whose answers do not depend on where a window starts (day windows, a cost above a
// limit, limits that count nothing).
func TestRLSClusterExamples(t *testing.T) {
	rs := redistest.Start(t)
	ts := startFile(t, rlsConfig(examplesDir, "  mode: cluster\n")+"redis: {addrs: [\""+rs.Addr+"\"], timeout: "+exactTimeout+"}\n")
	c, _ := rlsClient(t, ts)
	marketing, number := rlsDesc("message_type", "marketing", "to_number", "2061111111"), rlsDesc("to_number", "2061111111")
	for i, want := range []struct {
		code string
		rem  []uint32
	}{{"OK", []uint32{3, 98}}, {"OK", []uint32{1, 96}}, {"OVER_LIMIT", []uint32{0, 94}}} {
		if code, rem := ask(t, c, "messaging", 2, marketing, number); code != want.code || !slices.Equal(rem, want.rem) {
			t.Fatalf("nested, call %d: %s %v, want %s %v", i+1, code, rem, want.code, want.rem)
		}
	}
	if code, rem := ask(t, c, "internal", 1, rlsDesc("ldap", "x")); code != "OK" || rem[0] != math.MaxUint32 {
		t.Fatalf("unlimited: %s %v", code, rem)
	}
	if code, _ := ask(t, c, "edge_proxy_per_ip", 1, rlsDesc("remote_address", "50.0.0.5")); code != "OVER_LIMIT" {
		t.Fatalf("block list: %s", code)
	}
	if code, _ := ask(t, c, "example6", 11, rlsDesc("service", "s", "user", "user-a")); code != "OK" {
		t.Fatalf("shadow mode: %s", code)
	}
	if code, _ := ask(t, c, "example6", 21, rlsDesc("service", "s", "user", "user-b")); code != "OVER_LIMIT" {
		t.Fatalf("over a limit: %s", code)
	}
	if code, rem := ask(t, c, "example7", 6, rlsDesc("key_1", "value_1", "user", "bkthomps"), rlsDesc("key_2", "value_2", "user", "bkthomps")); code != "OK" || rem[0] != 0 || rem[1] != 4 {
		t.Fatalf("replaces: %s %v, want OK [0 4] (the replaced limit of 5 not checked)", code, rem)
	}
	if got := metric(t, ts, `diana_decisions_total{result="shadow_denied",rule="rls:example6.service.user_user-a"}`); got != 1 {
		t.Fatalf("shadow denials counted: %v", got)
	}
	n, err := rs.Client().DBSize(context.Background()).Result()
	if err != nil || n == 0 {
		t.Fatalf("Redis holds %d keys (%v): the counts are not there", n, err)
	}
}

// hits_addend, from the request and per descriptor, in every algorithm a descriptor can name,
// answered the same in local mode and in cluster mode (a real redis-server): a request's
// hits_addend is its cost (0: 1), a descriptor's own wins (0 included: asks without counting),
// and one beyond every limit is over it. envoyproxy/ratelimit's counting (no algorithm field)
// counts the hits of a request over the limit, so the check after one is over too; Diana's
// algorithms take nothing of a denied request. Day windows and rates, so that no window
// starts during the test.
func TestRLSHitsAddend(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	doc := `domain: d
descriptors:
  - key: ratelimit
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: fixed_window
    algorithm: fixed_window
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: sliding_window
    algorithm: {name: sliding_window, subwindows: 4}
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: sliding_log
    algorithm: sliding_log
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: token_bucket
    algorithm: token_bucket
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: leaky_bucket
    algorithm: {name: leaky_bucket, burst: 9, nodelay: true}
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: warm_up
    algorithm: {name: warm_up, warmup: 1h}
    rate_limit: {unit: day, requests_per_unit: 10}
`
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	local := startFile(t, rlsConfig(dir, ""))
	cluster := startFile(t, rlsConfig(dir, "  mode: cluster\n")+"redis: {addrs: [\""+rs.Addr+"\"], timeout: "+exactTimeout+"}\n")
	type step struct {
		req  uint32
		desc *uint64 // the descriptor's own hits_addend, nil: none
		code string
	}
	u := func(n uint64) *uint64 { return &n }
	for _, key := range []string{"ratelimit", "fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "warm_up"} {
		afterOver := "OK"
		if key == "ratelimit" {
			afterOver = "OVER_LIMIT"
		}
		steps := []step{
			{4, nil, "OK"},  // 4 of 10
			{9, u(0), "OK"}, // a check: nothing counted
			{0, u(5), "OK"}, // 9 of 10
			{0, nil, "OK"},  // the request's 0 is 1: 10 of 10
			{1, nil, "OVER_LIMIT"},
			{0, u(0), afterOver},
			{1, u(math.MaxUint64), "OVER_LIMIT"},
		}
		var answers [2][]string // local's and cluster's: code and remaining, call by call
		for n, ts := range []*testServer{local, cluster} {
			c, _ := rlsClient(t, ts)
			var rems []uint32
			for i, s := range steps {
				d := rlsDesc(key, "x")
				if s.desc != nil {
					d.HitsAddend = wrapperspb.UInt64(*s.desc)
				}
				resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", HitsAddend: s.req, Descriptors: []*rlv3.RateLimitDescriptor{d}})
				if err != nil {
					t.Fatal(err)
				}
				// warm_up starts cold, one request at a time: only local and cluster are compared.
				if key != "warm_up" && resp.OverallCode.String() != s.code {
					t.Fatalf("%s, %s mode, step %d: %s, want %s", key, ts.cfg.RLS.Mode, i, resp.OverallCode, s.code)
				}
				rems = append(rems, resp.Statuses[0].LimitRemaining)
				answers[n] = append(answers[n], resp.OverallCode.String()+" "+strconv.FormatUint(uint64(resp.Statuses[0].LimitRemaining), 10))
			}
			if want := []uint32{6, 6, 1, 0, 0, 0, 0}; key != "leaky_bucket" && key != "warm_up" && !slices.Equal(rems, want) {
				t.Fatalf("%s, %s mode: remaining %v, want %v", key, ts.cfg.RLS.Mode, rems, want)
			}
		}
		if !slices.Equal(answers[0], answers[1]) {
			t.Fatalf("%s: local mode answered %v, cluster mode %v", key, answers[0], answers[1])
		}
	}
}

// envoyproxy/ratelimit's example config through dianad in cluster mode, two instances on one
// redis-server, with its dynamic metadata: the calls of its integration-test script
// multiservice-tokenquota.sh (Envoy checks both services with hits_addend 0, routes by the
// metadata and charges the service that answered when the stream is done), alternating between
// the instances.
func TestRLSQuotaModeCluster(t *testing.T) {
	rs := redistest.Start(t)
	dir, _ := filepath.Abs(filepath.Join("..", "rls", "testdata", "ratelimit", "example"))
	yaml := rlsConfig(dir, "  mode: cluster\n  response_dynamic_metadata: true\n") + "redis: {addrs: [\"" + rs.Addr + "\"], timeout: " + exactTimeout + "}\n"
	a, b := startFile(t, yaml), startFile(t, yaml)
	ca, _ := rlsClient(t, a)
	cb, _ := rlsClient(t, b)
	check := func() []*rlv3.RateLimitDescriptor {
		d1, d2 := rlsDesc("service", "service_1"), rlsDesc("service", "service_2")
		d1.HitsAddend, d2.HitsAddend = wrapperspb.UInt64(0), wrapperspb.UInt64(0)
		return []*rlv3.RateLimitDescriptor{d1, d2}
	}
	for i, want := range []string{"service_1", "service_1", "service_2", "service_2", "service_2", ""} {
		c := []pb.RateLimitServiceClient{ca, cb}[i%2]
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "rl", Descriptors: check()})
		if err != nil {
			t.Fatal(err)
		}
		got := resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
		if got != want || (want == "") != (resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT) {
			t.Fatalf("request %d: %s routed to %q, want %q", i+1, resp.OverallCode, got, want)
		}
		if want == "" {
			break
		}
		done := rlsDesc("service", want)
		done.HitsAddend = wrapperspb.UInt64(1)
		if _, err := []pb.RateLimitServiceClient{cb, ca}[i%2].ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "rl", Descriptors: []*rlv3.RateLimitDescriptor{done}}); err != nil {
			t.Fatal(err)
		}
	}
}

// rls.merge_domain_config merges the files of one domain, as MERGE_DOMAIN_CONFIG does; without
// it dianad refuses to start on them.
func TestRLSMergeDomains(t *testing.T) {
	dir, _ := filepath.Abs(filepath.Join("..", "rls", "testdata", "ratelimit", "merge"))
	if _, err := Parse([]byte(rlsConfig(dir, "")), "cfg.yaml"); err == nil || !strings.Contains(err.Error(), `duplicate domain "test-domain"`) {
		t.Fatalf("without merge_domain_config: %v", err)
	}
	ts := startFile(t, rlsConfig(dir, "  merge_domain_config: true\n"))
	c, _ := rlsClient(t, ts)
	if code, rem := ask(t, c, "test-domain", 1, rlsDesc("key1", "value1"), rlsDesc("key2", "value2")); code != "OK" || !slices.Equal(rem, []uint32{9, 19}) {
		t.Fatalf("%s %v, want OK [9 19]: both files' limits", code, rem)
	}
}

// on_error local decides a plain limit (counted in Redis as envoyproxy/ratelimit counts) by
// the limit itself in this process while Redis is down.
func TestRLSClusterLocalFallback(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startFile(t, rlsConfig(dir, "  mode: cluster\n  on_error: local\n")+"redis: {addrs: [\""+rs.Addr+"\"], timeout: "+exactTimeout+"}\n")
	c, _ := rlsClient(t, ts)
	rs.Stop()
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		if code, _ := ask(t, c, "d", 1, rlsDesc("k", "v")); code != want {
			t.Fatalf("call %d with Redis down: %s, want %s", i+1, code, want)
		}
	}
}

// rls.quota_mode and rls.shadow_mode reach the service: in quota mode a request passes while one
// of its descriptors has room; in shadow mode every request passes.
func TestRLSGlobalModes(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: year, requests_per_unit: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	quota, _ := rlsClient(t, startFile(t, rlsConfig(dir, "  quota_mode: true\n")))
	shadow, _ := rlsClient(t, startFile(t, rlsConfig(dir, "  shadow_mode: true\n")))
	for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
		if code, _ := ask(t, quota, "d", 1, rlsDesc("a", "x"), rlsDesc("b", "x")); code != want {
			t.Fatalf("quota mode, call %d: %s, want %s", i+1, code, want)
		}
		if code, _ := ask(t, shadow, "d", 1, rlsDesc("a", "x")); code != "OK" {
			t.Fatalf("shadow mode, call %d: %s", i+1, code)
		}
	}
}
