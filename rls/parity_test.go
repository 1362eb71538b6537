package rls

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// Parity with envoyproxy/ratelimit: the configs of its example (examples/ratelimit/config) and
// of its integration tests (test/integration/runtime/current/ratelimit), copied as is under
// testdata/ratelimit, loaded by the service and called as its tests call its server, with the
// answers its tests expect. The calls and their answers are facts recorded from its sources,
// named at each scenario; the seconds until reset, which its tests take from the answer, are
// its CalculateReset: the unit's length minus the time into it (start is 10 s into a day).

// clocked serves cfg on a loopback gRPC listener, deciding in a memstore whose clock is the
// returned one (µs, from start), and returns a client and the service.
func clocked(t *testing.T, cfg *Config, o Options) (pb.RateLimitServiceClient, *Service, *atomic.Int64) {
	t.Helper()
	var now atomic.Int64
	now.Store(start.UnixMicro())
	mem := memstore.New(memstore.Options{Clock: now.Load})
	o.Store = rules.Each(mem.Decide)
	o.Now = func() time.Time { return time.UnixMicro(now.Load()) }
	svc := New(cfg, o)
	g := NewGRPC(svc)
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
	return pb.NewRateLimitServiceClient(conn), svc, &now
}

// readTestdata parses the config files of testdata/ratelimit/<dirs>.
func readTestdata(t *testing.T, dirs ...string) *Config {
	t.Helper()
	var files []File
	for _, d := range dirs {
		fs, _, err := ReadDir(filepath.Join("testdata", "ratelimit", d))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	c, err := Parse(files, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// call is one ShouldRateLimit call and the answer expected; want nil skips the statuses.
type call struct {
	descs   []*rlv3.RateLimitDescriptor
	overall string
	want    []st
	meta    string // the dynamic metadata's "metadata" as JSON, "-" for none, "" to skip
}

func play(t *testing.T, c pb.RateLimitServiceClient, domain string, calls ...call) {
	t.Helper()
	for i, cl := range calls {
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: cl.descs})
		if err != nil {
			t.Fatalf("%s call %d: %v", domain, i, err)
		}
		var got []st
		for _, s := range resp.Statuses {
			got = append(got, short(s))
		}
		if resp.OverallCode.String() != cl.overall || cl.want != nil && !equal(got, cl.want) {
			t.Fatalf("%s call %d: %s %+v\nwant %s %+v", domain, i, resp.OverallCode, got, cl.overall, cl.want)
		}
		if cl.meta == "" {
			continue
		}
		m := resp.DynamicMetadata.GetFields()["metadata"]
		if cl.meta == "-" {
			if m != nil {
				t.Fatalf("%s call %d: metadata %v, want none", domain, i, m)
			}
			continue
		}
		want := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(cl.meta), want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(m.GetStructValue(), want) {
			t.Fatalf("%s call %d: metadata %v, want %s", domain, i, m, cl.meta)
		}
	}
}

// hits returns d with its own hits_addend n.
func hits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func descs(ds ...*rlv3.RateLimitDescriptor) []*rlv3.RateLimitDescriptor { return ds }

// test/integration/integration_test.go: testBasicBaseConfig (its calls, for the plain keys and
// for the _local ones), testConfigReload and testShareThreshold.
func TestParityIntegration(t *testing.T) {
	for _, suffix := range []string{"", "_local"} {
		t.Run("basic"+suffix, func(t *testing.T) {
			c, _, now := clocked(t, readTestdata(t, "integration"), Options{})
			play(t, c, "foo", call{descs(desc("hello"+suffix, "world")), "OK", []st{{"OK", "-", 0, 0}}, ""})
			play(t, c, "basic", call{descs(desc("key1"+suffix, "foo")), "OK", []st{{"OK", "SECOND:50", 49, 1}}, ""})
			var calls []call
			for i := range 25 {
				if i < 20 {
					calls = append(calls, call{descs(desc("key2"+suffix, "4711")), "OK", []st{{"OK", "MINUTE:20", uint32(20 - (i + 1)), 50}}, ""})
				} else {
					calls = append(calls, call{descs(desc("key2"+suffix, "4711")), "OVER_LIMIT", []st{{"OVER_LIMIT", "MINUTE:20", 0, 50}}, ""})
				}
			}
			play(t, c, "another", calls...)
			calls = calls[:0]
			for i := range 15 {
				code, rem2 := "OK", uint32(10-(i+1))
				if i >= 10 {
					code, rem2 = "OVER_LIMIT", 0
				}
				calls = append(calls, call{descs(desc("key2"+suffix, "4712"), desc("key3"+suffix, "4712")), code,
					[]st{{"OK", "MINUTE:20", uint32(20 - (i + 1)), 50}, {code, "HOUR:10", rem2, 3590}}, ""})
			}
			play(t, c, "another", calls...)
			// DurationUntilReset ticks down: two hits of key4 two seconds apart.
			ask := func() int64 {
				r, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "another", Descriptors: descs(desc("key4"+suffix, "durTest")), HitsAddend: 1})
				if err != nil {
					t.Fatal(err)
				}
				return r.Statuses[0].DurationUntilReset.GetSeconds()
			}
			first := ask()
			now.Add(2 * time.Second.Microseconds())
			if second := ask(); second >= first {
				t.Fatalf("duration until reset %d s, then %d s two seconds later", first, second)
			}
		})
	}
	t.Run("reload", func(t *testing.T) {
		c, svc, _ := clocked(t, readTestdata(t, "integration"), Options{})
		play(t, c, "reload", call{descs(desc("block", "foo")), "OK", []st{{"OK", "-", 0, 0}}, ""})
		svc.SetConfig(readTestdata(t, "integration", "reload"))
		play(t, c, "reload", call{descs(desc("key1", "foo")), "OK", []st{{"OK", "SECOND:50", 49, 1}}, ""})
	})
	t.Run("share_threshold", func(t *testing.T) {
		c, _, _ := clocked(t, readTestdata(t, "integration"), Options{})
		var calls []call
		for range 10 {
			calls = append(calls, call{descs(desc("files", "files/a.pdf")), "OK", nil, ""})
		}
		calls = append(calls, call{descs(desc("files", "files/b.csv")), "OVER_LIMIT", []st{{"OVER_LIMIT", "HOUR:10", 0, 3590}}, ""})
		for i := range 10 {
			calls = append(calls, call{descs(desc("files_no_share", fmt.Sprintf("files_no_share/%d", i))), "OK", []st{{"OK", "HOUR:10", 9, 3590}}, ""})
		}
		play(t, c, "share-threshold-test", calls...)
	})
}

// integration-test/scripts/*.sh, run through Envoy (examples/envoy/proxy.yaml, domain rl)
// against its server loaded with examples/ratelimit/config, with RESPONSE_DYNAMIC_METADATA
// on: the descriptors Envoy sends for each curl (a request_headers action whose header is
// absent drops its descriptor; hits_addend and apply_on_stream_done as the routes set them),
// and the answers the scripts expect. Each script starts on fresh counts (each ends by
// waiting out its minute windows).
func TestParityExample(t *testing.T) {
	cfg := readTestdata(t, "example")
	if cfg.Domains() != 2 {
		t.Fatalf("%d domains, want rl and mongo_cps", cfg.Domains())
	}
	o := Options{DynamicMetadata: true}
	ok := func(ds ...*rlv3.RateLimitDescriptor) call { return call{ds, "OK", nil, ""} }
	over := func(ds ...*rlv3.RateLimitDescriptor) call { return call{ds, "OVER_LIMIT", nil, ""} }
	t.Run("simple-get", func(t *testing.T) {
		c, _, _ := clocked(t, cfg, o)
		play(t, c, "rl", call{descs(desc("foo", "test", "baz", "shady")), "OK", []st{{"OK", "MINUTE:3", 2, 50}}, "-"})
	})
	t.Run("trigger-ratelimit", func(t *testing.T) {
		c, _, _ := clocked(t, cfg, o)
		d := func() *rlv3.RateLimitDescriptor { return desc("foo", "pelle", "baz", "not-so-shady") }
		play(t, c, "rl", ok(d()), ok(d()), call{descs(d()), "OK", []st{{"OK", "MINUTE:3", 0, 50}}, ""}, over(d()),
			call{descs(d()), "OVER_LIMIT", []st{{"OVER_LIMIT", "MINUTE:3", 0, 50}}, ""})
	})
	t.Run("trigger-shadow-mode-key", func(t *testing.T) {
		var obs observed
		o := o
		o.Observe = obs.observe
		c, _, _ := clocked(t, cfg, o)
		d := func() *rlv3.RateLimitDescriptor { return desc("foo", "pelle", "baz", "shady") }
		play(t, c, "rl", ok(d()), ok(d()), ok(d()), ok(d()), ok(d()), call{descs(d()), "OK", []st{{"OK", "MINUTE:3", 0, 50}}, ""})
		if obs.last() != "rl.foo.baz_shady shadow_denied" {
			t.Fatalf("observed %q", obs.last())
		}
	})
	t.Run("value-included-in-stats-key-when-unspecified", func(t *testing.T) {
		var obs observed
		o := o
		o.Observe = obs.observe
		c, _, _ := clocked(t, cfg, o)
		d := func() *rlv3.RateLimitDescriptor { return desc("unspec", "unspecified_value") }
		play(t, c, "rl", ok(d()), ok(d()), over(d()))
		if obs.last() != "rl.unspec_unspecified_value denied" {
			t.Fatalf("observed %q: the over-limit count goes under the detailed key", obs.last())
		}
	})
	t.Run("replaces", func(t *testing.T) {
		c, _, _ := clocked(t, cfg, o)
		four := func(foo, bar, dst string) []*rlv3.RateLimitDescriptor {
			return descs(desc("foo", foo, "bar", bar), desc("source_cluster", "proxy", "destination_cluster", dst))
		}
		five := func() []*rlv3.RateLimitDescriptor {
			return append(four("my_foo", "bkthomps", "fake"), desc("category", "account"))
		}
		two := func(foo, bar string) []*rlv3.RateLimitDescriptor { return descs(desc("foo", foo, "bar", bar)) }
		play(t, c, "rl",
			over(two("bkthomps", "banned")...),
			over(four("bkthomps", "banned", "mock")...),
			ok(four("bkthomps", "banned", "override")...), ok(four("bkthomps", "banned", "override")...), over(four("bkthomps", "banned", "override")...),
			ok(four("my_foo", "bkthomps", "bkthomps")...), ok(four("my_foo", "bkthomps", "bkthomps")...), over(four("my_foo", "bkthomps", "bkthomps")...),
			ok(four("my_foo", "bkthomps", "not_bkthomps")...), over(four("my_foo", "bkthomps", "not_bkthomps")...),
			over(four("my_foo", "bkthomps", "bkthomps")...),
			ok(five()...), ok(five()...), ok(five()...), ok(five()...), over(five()...),
			ok(two("foo_2", "bkthomps")...), over(two("foo_2", "bkthomps")...),
			ok(four("foo_3", "bar_3", "fake")...), ok(four("foo_3", "bar_3", "fake")...), over(four("foo_3", "bar_3", "fake")...),
			over(five()...),
		)
	})
	s1 := `{"service_with_quota": {"name": "service_1"}}`
	s2 := `{"service_with_quota": {"name": "service_2"}}`
	t.Run("quota", func(t *testing.T) {
		c, _, now := clocked(t, cfg, o)
		d := func() []*rlv3.RateLimitDescriptor {
			return descs(desc("service", "service_1"), desc("service", "service_2"))
		}
		play(t, c, "rl",
			call{d(), "OK", []st{{"OK", "MINUTE:1", 0, 50}, {"OK", "MINUTE:2", 1, 50}}, s1},
			call{d(), "OK", []st{{"OVER_LIMIT", "MINUTE:1", 0, 50}, {"OK", "MINUTE:2", 0, 50}}, s2},
			call{d(), "OVER_LIMIT", []st{{"OVER_LIMIT", "MINUTE:1", 0, 50}, {"OVER_LIMIT", "MINUTE:2", 0, 50}}, "-"})
		now.Add(time.Minute.Microseconds())
		play(t, c, "rl", call{d(), "OK", nil, s1})
	})
	t.Run("token-quota", func(t *testing.T) {
		c, _, now := clocked(t, cfg, o)
		check := func() call { return ok(hits(desc("service", "service_2"), 0)) }
		done := func() call { return call{descs(hits(desc("service", "service_2"), 1)), "", nil, ""} }
		for i := range 3 {
			play(t, c, "rl", check())
			respond(t, c, done(), i)
		}
		play(t, c, "rl", over(hits(desc("service", "service_2"), 0)))
		now.Add(time.Minute.Microseconds())
		play(t, c, "rl", check())
	})
	t.Run("multiservice-tokenquota", func(t *testing.T) {
		c, _, now := clocked(t, cfg, o)
		check := func(meta string) call {
			return call{descs(hits(desc("service", "service_1"), 0), hits(desc("service", "service_2"), 0)), "OK", nil, meta}
		}
		done := func(service string) call { return call{descs(hits(desc("service", service), 1)), "", nil, ""} }
		// The metadata names the service Envoy routes to, charged when the stream is done.
		for i, served := range []string{"service_1", "service_1", "service_2", "service_2", "service_2"} {
			meta := s1
			if served == "service_2" {
				meta = s2
			}
			play(t, c, "rl", check(meta))
			respond(t, c, done(served), i)
		}
		play(t, c, "rl", call{descs(hits(desc("service", "service_1"), 0), hits(desc("service", "service_2"), 0)), "OVER_LIMIT", nil, "-"})
		now.Add(time.Minute.Microseconds())
		play(t, c, "rl", check(s1))
	})
}

// respond sends the call Envoy makes when a stream is done (apply_on_stream_done), whose answer
// it ignores.
func respond(t *testing.T, c pb.RateLimitServiceClient, cl call, i int) {
	t.Helper()
	if _, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "rl", Descriptors: cl.descs}); err != nil {
		t.Fatalf("stream done %d: %v", i, err)
	}
}

// The dynamic metadata, as its service's tests expect it (src/service/ratelimit_test.go,
// TestRatelimitToMetadata): domain, descriptors with their entries, limit and hits_addend,
// the request's hits_addend, and the metadata of the descriptors that passed, merged.
func TestDynamicMetadata(t *testing.T) {
	cfg, err := Parse([]File{{Name: "a.yaml", Data: []byte(`domain: d
descriptors:
  - key: regular_key
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata: {name: service_1}
  - key: quota_key
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {name: service_2, nested: {a: 1, list: [x, true, 2.5]}}
  - key: another_quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {name: service_3, nested: {a: 2, b: 3}}
  - key: free
    rate_limit: {unlimited: true}
    metadata: {unlimited: yes}
`)}}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := clocked(t, cfg, Options{DynamicMetadata: true})
	over := desc("quota_key", "v")
	over.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 1}
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", HitsAddend: 2,
		Descriptors: descs(desc("regular_key", "regular_val"), hits(desc("quota_key", "quota_val"), 3), desc("another_quota", "another_val"), desc("free", "x"))})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("overall %s: regular_key allows nothing", resp.OverallCode)
	}
	want := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(`{
		"domain": "d",
		"hitsAddend": 2,
		"descriptors": [
			{"entries": ["regular_key=regular_val"]},
			{"entries": ["quota_key=quota_val"], "hitsAddend": 3},
			{"entries": ["another_quota=another_val"]},
			{"entries": ["free=x"]}
		],
		"metadata": {"name": "service_2", "nested": {"a": 1, "b": 3, "list": ["x", true, 2.5]}}
	}`), want); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(resp.DynamicMetadata, want) {
		got, _ := protojson.Marshal(resp.DynamicMetadata)
		t.Fatalf("dynamic metadata %s", got)
	}
	// A limit override is named by its text; without the option, no metadata.
	resp, err = c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: descs(over)})
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.DynamicMetadata.GetFields()["descriptors"].GetListValue().GetValues()[0].GetStructValue().GetFields()["limit"]; l.GetStringValue() != over.Limit.String() {
		t.Fatalf("limit override %v, want %q", l, over.Limit.String())
	}
	c2, _, _ := clocked(t, cfg, Options{})
	if resp, err := c2.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: descs(desc("quota_key", "v"))}); err != nil || resp.DynamicMetadata != nil {
		t.Fatalf("without DynamicMetadata: %v %v", resp.GetDynamicMetadata(), err)
	}
}

// The limits its config tests find (test/config/config_test.go: TestWildcardConfig,
// TestShareThreshold, TestMetadata), in its test configs copied as is: each descriptor's stats
// key and requests per unit ("" for none), and where several values share a count.
func TestParityLookup(t *testing.T) {
	type entry = [2]string
	for _, file := range []struct {
		name  string
		cases []struct {
			entries []entry
			metric  string
			rpu     uint32
			meta    string // the limit's metadata as JSON, "" for none
		}
		shared [][][]entry // groups of descriptors counted under one key
	}{
		{name: "wildcard.yaml", cases: []struct {
			entries []entry
			metric  string
			rpu     uint32
			meta    string
		}{
			{[]entry{{"noVal", "foo1"}}, "test-domain.noVal", 20, ""},
			{[]entry{{"wild", "foo1"}}, "test-domain.wild_foo*", 20, ""},
			{[]entry{{"wild", "foo2"}}, "test-domain.wild_foo*", 20, ""},
			{[]entry{{"nestedWild", "val1"}, {"wild", "goo2"}}, "test-domain.nestedWild_val1.wild_goo*", 20, ""},
			{[]entry{{"wild", "bar"}}, "", 0, ""},
			{[]entry{{"noWild", "foo1"}}, "", 0, ""},
			{[]entry{{"midWild", "barab"}}, "test-domain.midWild_bar*b", 20, ""},
			{[]entry{{"midWild", "bar123b"}}, "test-domain.midWild_bar*b", 20, ""},
			{[]entry{{"midWild", "barb"}}, "test-domain.midWild_bar*b", 20, ""},
			{[]entry{{"midWild", "bara"}}, "", 0, ""},
			{[]entry{{"midWild", "xbarb"}}, "", 0, ""},
			{[]entry{{"multiWild", "foo123bar456baz"}}, "test-domain.multiWild_foo*bar*baz", 10, ""},
			{[]entry{{"multiWild", "foobarbaz"}}, "test-domain.multiWild_foo*bar*baz", 10, ""},
			{[]entry{{"multiWild", "foo123baz"}}, "", 0, ""},
			{[]entry{{"multiWild", "bar456baz"}}, "", 0, ""},
		}},
		{name: "share_threshold.yaml", cases: []struct {
			entries []entry
			metric  string
			rpu     uint32
			meta    string
		}{
			{[]entry{{"files", "files/a.pdf"}}, "test-domain.files_files/*", 100, ""},
			{[]entry{{"route", "api/v1"}, {"method", "GET"}}, "test-domain.route_api/*.method", 60, ""},
			{[]entry{{"service", "svc/user"}, {"endpoint", "get"}}, "test-domain.service_svc/*.endpoint_get", 80, ""},
			{[]entry{{"nested", "parent"}, {"files", "nested/file1.txt"}}, "test-domain.nested_parent.files_nested/*", 200, ""},
			{[]entry{{"files", "top/file1.txt"}, {"files", "nested/file1.txt"}}, "test-domain.files_top/*.files_nested/*", 300, ""},
			{[]entry{{"path", "path/foo"}, {"file", "file/doc1"}, {"type", "pdf"}}, "test-domain.path_path/*.file_file/*.type", 120, ""},
			{[]entry{{"user", "user/alice"}, {"resource", "res/file1"}, {"action", "read"}}, "test-domain.user_user/*.resource_res/*.action", 150, ""},
			{[]entry{{"file", "test1"}}, "test-domain.file_test1", 50, ""},
			{[]entry{{"file", "test2"}}, "test-domain.file_test*", 100, ""},
			{[]entry{{"midpath", "/api/v1"}}, "test-domain.midpath_/api*v1", 100, ""},
			{[]entry{{"midpath", "/api/v2"}}, "", 0, ""},
			{[]entry{{"multiroute", "svcAepBrpc"}}, "test-domain.multiroute_svc*ep*rpc", 50, ""},
			{[]entry{{"multiroute", "svcABCrpc"}}, "", 0, ""},
			{[]entry{{"midroute", "/api-beta-v2"}}, "test-domain.midroute_/api*v2", 80, ""},
			{[]entry{{"tenant", "t1prod"}, {"resource", "resAv2"}}, "test-domain.tenant_t*prod.resource_res*v2", 60, ""},
		}, shared: [][][]entry{
			{{{"files", "files/a.pdf"}}, {{"files", "files/b.csv"}}},
			{{{"midpath", "/api/v1"}}, {{"midpath", "/api-x-v1"}}},
			{{{"tenant", "t1prod"}, {"resource", "resAv2"}}, {{"tenant", "t99prod"}, {"resource", "resBBBv2"}}},
		}},
		{name: "metadata.yaml", cases: []struct {
			entries []entry
			metric  string
			rpu     uint32
			meta    string
		}{
			{[]entry{{"key1", "value1"}, {"subkey1", "something"}}, "test-domain.key1_value1.subkey1", 5, `{"name": "service_1"}`},
			{[]entry{{"key1", "value1"}, {"subkey1", "subvalue1"}}, "test-domain.key1_value1.subkey1_subvalue1", 10, ""},
			{[]entry{{"key2", "something"}}, "test-domain.key2", 20, `{"service_with_quota": {"name": "service_2"}}`},
		}},
	} {
		t.Run(file.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "ratelimit", "config", file.name))
			if err != nil {
				t.Fatal(err)
			}
			c, err := Parse([]File{{Name: file.name, Data: data}}, ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			entries := func(es []entry) []*rlv3.RateLimitDescriptor_Entry {
				var out []*rlv3.RateLimitDescriptor_Entry
				for _, e := range es {
					out = append(out, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
				}
				return out
			}
			for _, tc := range file.cases {
				m, _ := c.lookup("test-domain", entries(tc.entries))
				got, rpu := "", uint32(0)
				if m.limit != nil {
					got, rpu = m.metric, m.limit.RequestsPerUnit
				}
				if got != tc.metric || rpu != tc.rpu {
					t.Errorf("%v: limit %q (%d per unit), want %q (%d)", tc.entries, got, rpu, tc.metric, tc.rpu)
				}
				var meta *structpb.Struct
				if m.limit != nil {
					meta = m.limit.Metadata
				}
				if tc.meta == "" {
					if meta != nil {
						t.Errorf("%v: metadata %v, want none", tc.entries, meta)
					}
					continue
				}
				want := &structpb.Struct{}
				if err := protojson.Unmarshal([]byte(tc.meta), want); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(meta, want) {
					t.Errorf("%v: metadata %v, want %s", tc.entries, meta, tc.meta)
				}
			}
			for _, group := range file.shared {
				var keys []string
				for _, es := range group {
					m, _ := c.lookup("test-domain", entries(es))
					keys = append(keys, storeKey("test-domain", entries(es), m.limit, m.shared))
				}
				for _, k := range keys[1:] {
					if k != keys[0] {
						t.Errorf("%v: counted under %q, want one count", group, keys)
					}
				}
			}
		})
	}
}

// MERGE_DOMAIN_CONFIG (its TestDomainMerge, TestDuplicateKeyDomainMerge on its test configs):
// two files of one domain merge, their top-level descriptors distinct; without the option the
// domain is refused in the second file.
func TestParityMergeDomains(t *testing.T) {
	files, _, err := ReadDir(filepath.Join("testdata", "ratelimit", "merge"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(files, ParseOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, value string
		rpu        uint32
	}{{"key1", "value1", 10}, {"key2", "value2", 20}} {
		m, _ := c.lookup("test-domain", []*rlv3.RateLimitDescriptor_Entry{{Key: tc.key, Value: tc.value}})
		if m.limit == nil || m.limit.RequestsPerUnit != tc.rpu {
			t.Errorf("%s_%s: %+v, want %d per unit", tc.key, tc.value, m.limit, tc.rpu)
		}
	}
	if _, err := Parse([]File{files[0], files[0]}, ParseOptions{MergeDomains: true}); err == nil ||
		!strings.Contains(err.Error(), `merge_domain_key1.yaml: descriptors: duplicate descriptor "test-domain.key1_value1", also in`) {
		t.Errorf("the same top-level descriptor twice: %v", err)
	}
	if _, err := Parse(files, ParseOptions{}); err == nil || !strings.Contains(err.Error(), `domain: duplicate domain "test-domain"`) {
		t.Errorf("without merging: %v", err)
	}
}
