package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/bridge"
	"github.com/Kong/go-pdk/bridge/bridgetest"
	kpp "github.com/Kong/go-pdk/server/kong_plugin_protocol"
	"github.com/Kong/go-pdk/test"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/shared/rules"
)

var pluginSeq atomic.Int64

// newConfig decodes cfg as go-pdk does, with a fresh plugin id (so tests share no counts)
// unless cfg has one.
func newConfig(t testing.TB, cfg map[string]any) *Config {
	t.Helper()
	if _, ok := cfg["__plugin_id"]; !ok {
		cfg["__plugin_id"] = fmt.Sprintf("test-%d-%d", pluginSeq.Add(1), len(t.Name()))
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := New().(*Config)
	if err := json.Unmarshal(b, c); err != nil {
		t.Fatalf("UnmarshalJSON failed (Kong would answer 500): %v", err)
	}
	return c
}

func mustValid(t testing.TB, c *Config) {
	t.Helper()
	if c.err != nil {
		t.Fatalf("config invalid: %v", c.err)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		want string // "" valid; else a substring of the error, which starts with the field
		warn string // valid, with a warning starting with this (the field)
	}{
		{"defaults", map[string]any{}, "", ""},
		{"kong keys", map[string]any{"route_id": nil, "service_id": "s1", "consumer_id": nil, "__seq__": 3, "__key__": "k", "__ws_id": "w", "plugin_instance_name": "p"}, "", ""},
		{"every group", map[string]any{"ip_limit": 5, "consumer_limit": 5, "device_limit": 5, "path_limit": 5, "global_limit": 5}, "", ""},
		{"token bucket burst", map[string]any{"algorithm": "token_bucket", "limit": 10, "window": "1s", "burst": 20}, "", ""},
		{"warm up", map[string]any{"algorithm": "warm_up", "limit": 10, "window": "1s", "warmup": "10s"}, "", ""},
		{"concurrency", map[string]any{"algorithm": "concurrency", "limit": 10}, "", ""},
		{"sub-windows", map[string]any{"algorithm": "sliding_window", "limit": 10, "window": "1m", "subwindows": 60, "ip_limit": 5}, "", ""},
		{"too many sub-windows", map[string]any{"subwindows": 61}, "subwindows: ", ""},
		{"sub-windows shorter than 1 µs", map[string]any{"window": "2us", "subwindows": 3}, "", "subwindows: is lowered to 2 for the rule diana.main.sliding_window"},
		{"sub-windows of another algorithm", map[string]any{"algorithm": "token_bucket", "limit": 10, "subwindows": 6}, "", "subwindows: is ignored"},
		{"redis", map[string]any{"policy": "redis", "redis_addrs": []string{"a:1", "b:2"}, "fallback_nodes": 3}, "", ""},
		{"leased", map[string]any{"policy": "redis", "batch_max": 50, "batch_max_age": "200ms", "ip_limit": 5}, "", ""},
		{"leased token bucket", map[string]any{"policy": "redis", "algorithm": "token_bucket", "limit": 100, "window": "1s", "batch_max": 20}, "", ""},
		{"leased without redis", map[string]any{"batch_max": 50}, "", "batch_max: is ignored: it applies only when policy is redis"},
		{"leased concurrency", map[string]any{"policy": "redis", "algorithm": "concurrency", "batch_max": 5}, "", "batch_max: is ignored for the rule diana.main.concurrency, which decides every request in Redis: concurrency cannot be batched"},
		{"leased bucket age too long", map[string]any{"policy": "redis", "algorithm": "token_bucket", "limit": 10, "window": "1s", "batch_max": 5, "batch_max_age": "5s"}, "", "batch_max: is ignored for the rule"},
		{"bucket refilling for ever", map[string]any{"algorithm": "token_bucket", "limit": 1, "window": "1d", "burst": 10000}, "", "burst: is lowered to 3650 for the rule diana.main.token_bucket"},
		{"warm-up storing too much", map[string]any{"algorithm": "warm_up", "limit": 1000000000000000, "window": "1s", "warmup": "9y"}, "", "warmup: is lowered to 1s for the rule"},
		{"fallback share too long", map[string]any{"policy": "redis", "algorithm": "token_bucket", "limit": 1, "window": "9y", "fallback_nodes": 2}, "", "fallback_nodes: is ignored for the rule"},
		{"warm_up split by fallback_nodes", map[string]any{"policy": "redis", "algorithm": "warm_up", "fallback_nodes": 3}, "", "fallback_nodes: for the rule diana.main.warm_up: warm_up does not split across nodes"},
		{"sentinel and cluster", map[string]any{"policy": "redis", "redis_addrs": []string{"s1:26379"}, "redis_sentinel_master": "m", "redis_cluster": true}, "", "redis_cluster: is ignored"},
		{"redis fields with policy local", map[string]any{"redis_host": "redis.example"}, "", "redis_host: is ignored: it applies only when policy is redis"},
		{"address without a port", map[string]any{"policy": "redis", "redis_addrs": []string{"redis.example", "[::1]"}}, "", ""},
		{"compound window", map[string]any{"window": "1m30s"}, "window: must be a duration above 0: a whole number and one unit", ""},
		{"month window", map[string]any{"window": "1M"}, "window: must be a duration above 0", ""},
		{"fraction window", map[string]any{"window": "1.5s"}, "window: must be a duration above 0", ""},
		{"window beyond 10 years", map[string]any{"window": "3651d"}, "window: must be a duration above 0", ""},
		{"empty header name", map[string]any{"limit_by": "header", "header_name": ""}, "header_name: cannot be empty", ""},
		{"bad algorithm", map[string]any{"algorithm": "nope"}, "algorithm: must be one of", ""},
		{"adaptive", map[string]any{"algorithm": "adaptive", "limit": 2}, "", ""}, // max_limit 2, min_limit 2
		{"adaptive with redis", map[string]any{"algorithm": "adaptive", "policy": "redis"}, "policy: must be local when algorithm is adaptive", ""},
		{"bad window", map[string]any{"window": "60"}, "window: ", ""},
		{"zero window", map[string]any{"ip_limit": 1, "ip_window": "0s"}, "ip_window: ", ""},
		{"bad limit", map[string]any{"limit": 0}, "limit: ", ""},
		{"sliding log too big", map[string]any{"algorithm": "sliding_log", "limit": 20000}, "limit: must be between 1 and 10000 when algorithm is concurrency or sliding_log", ""},
		{"sliding log group too big", map[string]any{"algorithm": "sliding_log", "ip_limit": 20000}, "ip_limit: must be between 0 and 10000 when algorithm is concurrency or sliding_log", ""},
		{"bad ban", map[string]any{"ban": "5"}, "ban: ", ""},
		{"bad limit_by", map[string]any{"limit_by": "cookie"}, "limit_by: ", ""},
		{"header without name", map[string]any{"limit_by": "header"}, "header_name: is required", ""},
		{"bad header name", map[string]any{"limit_by": "header", "header_name": "X Bad"}, "header_name: ", ""},
		{"bad path", map[string]any{"limit_by": "path", "path": "api/**"}, "path: ", ""},
		{"path without limit_by path", map[string]any{"path": "/x"}, "", "path: is ignored: it applies only when limit_by is path"},
		{"header name without limit_by header", map[string]any{"header_name": "X-A"}, "", "header_name: is ignored"},
		{"bad device header", map[string]any{"device_limit": 3, "device_header": "a b"}, "device_header: ", ""},
		{"bad code", map[string]any{"error_code": 200}, "error_code: ", ""},
		{"closed and local", map[string]any{"policy": "redis", "fail_closed": true, "fallback_nodes": 2}, "fallback_nodes: must be 0 when fail_closed is true", ""},
		{"bad redis address", map[string]any{"policy": "redis", "redis_addrs": []string{"a:1", "host:65536"}}, "redis_addrs[1]: must be host:port", ""},
		{"wrong type", map[string]any{"shadow": "yes"}, "shadow: ", ""},
		{"not JSON object", nil, "must be an object", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b []byte
			if tc.cfg == nil {
				b = []byte(`[1]`)
			} else {
				b, _ = json.Marshal(tc.cfg)
			}
			s, err := parse(b, false)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted; want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q; want it to contain %q", err, tc.want)
			case err == nil && tc.warn == "" && len(s.Warnings) > 0:
				t.Fatalf("warnings %q, want none", s.Warnings)
			case tc.warn != "" && (len(s.Warnings) != 1 || !strings.HasPrefix(s.Warnings[0], tc.warn)):
				t.Fatalf("warnings %q, want one starting with %q", s.Warnings, tc.warn)
			}
		})
	}
}

func TestStrictRejectsUnknownKeys(t *testing.T) {
	if _, err := parse([]byte(`{"limt": 5}`), true); err == nil || !strings.Contains(err.Error(), "limt") {
		t.Fatalf("got %v, want an error naming limt", err)
	}
	if _, err := parse([]byte(`{"limt": 5}`), false); err != nil {
		t.Fatalf("Kong-sent configs tolerate unknown keys, got %v", err)
	}
}

// The allowed path of a per-IP limit costs two PDK calls; a denial one exit with the headers
// and the JSON body; clients are counted apart.
func TestAccessPerIP(t *testing.T) {
	c := newConfig(t, map[string]any{"algorithm": "fixed_window", "limit": 3, "window": "1h"})
	mustValid(t, c)
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "2001:db8::1"} {
		for i := 1; i <= 4; i++ {
			res := event(t, c, "access", &kongReq{IP: ip})
			if i <= 3 {
				want := []string{"kong.client.get_forwarded_ip", "kong.response.set_headers"}
				if !reflect.DeepEqual(res.Calls, want) || res.Exit {
					t.Fatalf("%s request %d: calls %v exit %v, want %v", ip, i, res.Calls, res.Exit, want)
				}
				if got := res.Headers["Ratelimit-Remaining"]; !reflect.DeepEqual(got, []string{fmt.Sprint(3 - i)}) {
					t.Fatalf("%s request %d: RateLimit-Remaining %v", ip, i, got)
				}
				if got := res.Headers["Ratelimit-Limit"]; !reflect.DeepEqual(got, []string{"3"}) {
					t.Fatalf("RateLimit-Limit %v", got)
				}
				continue
			}
			if !reflect.DeepEqual(res.Calls, []string{"kong.client.get_forwarded_ip", "kong.response.exit"}) {
				t.Fatalf("%s denial: calls %v", ip, res.Calls)
			}
			var body struct {
				Message    string `json:"message"`
				RetryAfter int64  `json:"retry_after"`
			}
			if err := json.Unmarshal([]byte(res.Body), &body); err != nil {
				t.Fatalf("body %q: %v", res.Body, err)
			}
			if res.Status != 429 || body.Message != "API rate limit exceeded" || body.RetryAfter < 1 || body.RetryAfter > 3600 {
				t.Fatalf("denial %d %+v", res.Status, body)
			}
			if res.Headers["Retry-After"] == nil || res.Headers["Ratelimit-Remaining"][0] != "0" ||
				res.Headers["Content-Type"][0] != "application/json; charset=utf-8" {
				t.Fatalf("denial headers %v", res.Headers)
			}
		}
	}
	// IPv6 clients of one /64 share a count.
	if res := event(t, c, "access", &kongReq{IP: "2001:db8::2"}); !res.Exit {
		t.Fatal("2001:db8::2 (same /64 as 2001:db8::1) was admitted")
	}
}

func TestHideHeadersAndErrorReply(t *testing.T) {
	c := newConfig(t, map[string]any{"limit": 1, "hide_client_headers": true, "error_code": 503, "error_message": "slow down"})
	mustValid(t, c)
	if res := event(t, c, "access", &kongReq{IP: "1.1.1.1"}); !reflect.DeepEqual(res.Calls, []string{"kong.client.get_forwarded_ip"}) {
		t.Fatalf("allowed with hidden headers: calls %v, want only get_forwarded_ip", res.Calls)
	}
	res := event(t, c, "access", &kongReq{IP: "1.1.1.1"})
	if !res.Exit || res.Status != 503 || !strings.Contains(res.Body, `"message":"slow down"`) {
		t.Fatalf("denial %+v", res)
	}
	if len(res.Headers) != 1 || res.Headers["Content-Type"] == nil {
		t.Fatalf("hidden headers leaked on the denial: %v", res.Headers)
	}
}

// Each dimension asks Kong for its value only, and counts by it. A request without the value
// counts by its address, as Kong's rate-limiting falls back to the IP, asked for only then: it is
// limited, never let through. A request the limit
// does not match (another path) is not limited.
func TestDimensions(t *testing.T) {
	const ipCall = "kong.client.get_forwarded_ip"
	for _, tc := range []struct {
		name      string
		cfg       map[string]any
		calls     []string
		a, b      kongReq // two identities; a is also sent again to be denied
		missing   *kongReq
		unmatched *kongReq
	}{
		{"consumer", map[string]any{"limit_by": "consumer"}, []string{"kong.client.get_consumer"},
			kongReq{Consumer: "c1"}, kongReq{Consumer: "c2"}, &kongReq{}, nil},
		{"credential", map[string]any{"limit_by": "credential"}, []string{"kong.client.get_credential"},
			kongReq{Credential: "k1"}, kongReq{Credential: "k2"}, &kongReq{Headers: map[string]string{strings.ToLower(credentialHeader): "forged"}}, nil},
		{"header", map[string]any{"limit_by": "header", "header_name": "X-Api-Key"}, []string{"kong.request.get_headers"},
			kongReq{Headers: map[string]string{"x-api-key": "a"}}, kongReq{Headers: map[string]string{"x-api-key": "b"}}, &kongReq{}, nil},
		{"path", map[string]any{"limit_by": "path"}, []string{"kong.request.get_path"},
			kongReq{Path: "/a"}, kongReq{Path: "/b"}, nil, nil},
		{"path pattern", map[string]any{"limit_by": "path", "path": "/api/**"}, []string{"kong.request.get_path"},
			kongReq{Path: "/api/x"}, kongReq{Path: "/api/y"}, nil, &kongReq{Path: "/other"}},
		{"service from router", map[string]any{"limit_by": "service"}, []string{"kong.router.get_service"},
			kongReq{Service: "s1"}, kongReq{Service: "s2"}, &kongReq{}, nil},
		{"global", map[string]any{"limit_by": "global"}, nil, kongReq{}, kongReq{}, nil, nil},
		{"device group", map[string]any{"limit_by": "global", "limit": 1000, "device_limit": 1}, []string{"kong.request.get_headers"},
			kongReq{Headers: map[string]string{"x-device-id": "d1"}}, kongReq{Headers: map[string]string{"x-device-id": "d2"}}, &kongReq{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg["algorithm"] = "fixed_window"
			if tc.cfg["limit"] == nil {
				tc.cfg["limit"] = 1
			}
			c := newConfig(t, tc.cfg)
			mustValid(t, c)
			calls := append(append([]string{}, tc.calls...), "kong.response.set_headers")
			if res := event(t, c, "access", &tc.a); !reflect.DeepEqual(res.Calls, calls) {
				t.Fatalf("first request: calls %v, want %v", res.Calls, calls)
			}
			if tc.name != "global" {
				if res := event(t, c, "access", &tc.b); res.Exit {
					t.Fatal("another identity was denied")
				}
			}
			if res := event(t, c, "access", &tc.a); !res.Exit {
				t.Fatal("second request of the same identity was admitted")
			}
			if tc.missing != nil {
				if res := event(t, c, "access", tc.missing); res.Exit || !slices.Contains(res.Calls, ipCall) {
					t.Fatalf("the first request without the value: %+v, want it admitted, asking for the address", res)
				}
				if res := event(t, c, "access", tc.missing); !res.Exit {
					t.Fatal("a request without the value escaped the limit")
				}
			}
			if tc.unmatched != nil {
				for i := 0; i < 3; i++ {
					if res := event(t, c, "access", tc.unmatched); res.Exit {
						t.Fatalf("a request the limit does not match was limited: %+v", res)
					}
				}
			}
		})
	}
}

// A service-scoped instance takes the service from Kong's config keys, with no PDK call.
func TestServiceFromConfig(t *testing.T) {
	c := newConfig(t, map[string]any{"limit_by": "service", "service_id": "svc-1", "hide_client_headers": true})
	mustValid(t, c)
	if res := event(t, c, "access", &kongReq{}); len(res.Calls) != 0 {
		t.Fatalf("calls %v, want none", res.Calls)
	}
}

// Several limits in one instance: a request denied by one takes nothing from the others.
func TestSeveralLimits(t *testing.T) {
	c := newConfig(t, map[string]any{"algorithm": "fixed_window", "limit": 2, "window": "1h", "consumer_limit": 3, "consumer_window": "1h", "global_limit": 4, "global_window": "1h"})
	mustValid(t, c)
	admit := func(ip, cons string) bool { return !event(t, c, "access", &kongReq{IP: ip, Consumer: cons}).Exit }
	seq := []struct {
		ip, cons string
		want     bool
	}{
		{"1.0.0.1", "a", true}, {"1.0.0.1", "a", true}, {"1.0.0.1", "a", false}, // ip limit 2
		{"1.0.0.2", "a", true}, {"1.0.0.2", "a", false}, // consumer a limit 3
		{"1.0.0.3", "b", true}, {"1.0.0.4", "b", false}, // global limit 4
	}
	for i, s := range seq {
		if got := admit(s.ip, s.cons); got != s.want {
			t.Fatalf("step %d (%s, %s): admitted %v, want %v", i, s.ip, s.cons, got, s.want)
		}
	}
}

// Two instances of one plugin (two nginx workers) share a count; another plugin does not.
func TestInstancesShareCounts(t *testing.T) {
	cfg := func(id string) map[string]any {
		return map[string]any{"__plugin_id": id, "algorithm": "fixed_window", "limit": 2, "window": "1h"}
	}
	id := fmt.Sprintf("shared-%d", pluginSeq.Add(1))
	w1, w2, other := newConfig(t, cfg(id)), newConfig(t, cfg(id)), newConfig(t, cfg(id+"-other"))
	r := &kongReq{IP: "9.9.9.9"}
	if event(t, w1, "access", r).Exit || event(t, w2, "access", r).Exit {
		t.Fatal("first two requests denied")
	}
	if !event(t, w1, "access", r).Exit || !event(t, w2, "access", r).Exit {
		t.Fatal("workers do not share the limit")
	}
	if event(t, other, "access", r).Exit {
		t.Fatal("another plugin instance shares the count")
	}
}

func TestInvalidConfigFailsOpen(t *testing.T) {
	c := newConfig(t, map[string]any{"limit": "ten"})
	if c.err == nil || !strings.Contains(c.err.Error(), "limit") {
		t.Fatalf("err %v, want one naming limit", c.err)
	}
	if res := event(t, c, "access", &kongReq{IP: "1.2.3.4"}); res.Exit || len(res.Logs) != 1 || !strings.Contains(res.Logs[0], "limit") {
		t.Fatalf("%+v, want the request let through and an error in Kong's log naming limit", res)
	}
	if res := event(t, c, "access", &kongReq{IP: "1.2.3.4"}); len(res.Calls) != 0 {
		t.Fatalf("calls %v within the same second, want none", res.Calls)
	}
	if res := event(t, c, "log", &kongReq{}); len(res.Calls) != 0 {
		t.Fatalf("log calls %v, want none", res.Calls)
	}
}

func TestShadow(t *testing.T) {
	c := newConfig(t, map[string]any{"limit": 1, "shadow": true})
	mustValid(t, c)
	for i := 0; i < 3; i++ {
		if res := event(t, c, "access", &kongReq{IP: "5.5.5.5"}); res.Exit {
			t.Fatalf("shadow denied request %d", i)
		}
	}
}

// A concurrency limit holds a slot from access to log; others' log events cost no PDK call.
func TestConcurrencyReleasedInLog(t *testing.T) {
	c := newConfig(t, map[string]any{"algorithm": "concurrency", "limit": 1})
	mustValid(t, c)
	r1 := &kongReq{IP: "7.7.7.7"}
	if res := event(t, c, "access", r1); res.Exit || res.Calls[len(res.Calls)-2] != "kong.ctx.shared.set" {
		t.Fatalf("first: %+v", res)
	}
	if res := event(t, c, "access", &kongReq{IP: "7.7.7.7"}); !res.Exit {
		t.Fatal("second in flight admitted")
	}
	if res := event(t, c, "log", r1); !reflect.DeepEqual(res.Calls, []string{"kong.ctx.shared.get"}) {
		t.Fatalf("log calls %v", res.Calls)
	}
	if res := event(t, c, "access", &kongReq{IP: "7.7.7.7"}); res.Exit {
		t.Fatal("slot not given back by log")
	}
	plain := newConfig(t, map[string]any{})
	if res := event(t, plain, "log", &kongReq{}); len(res.Calls) != 0 {
		t.Fatalf("log of an instance without leases made calls %v", res.Calls)
	}
}

// A PDK error (Kong gone) lets the request through without a panic.
func TestKongGone(t *testing.T) {
	c := newConfig(t, map[string]any{})
	conn := bridgetest.Mock(t, nil) // answers nothing and closes
	c.Access(pdk.Init(conn))
}

// The exact call sequence, scripted with go-pdk's bridgetest.
func TestBridgetestSequence(t *testing.T) {
	c := newConfig(t, map[string]any{"limit_by": "header", "header_name": "X-Api-Key", "ip_limit": 5})
	mustValid(t, c)
	conn := bridgetest.Mock(t, []bridgetest.MockStep{
		{Method: "kong.request.get_headers", Args: &kpp.Int{V: maxHeaders}, Ret: mustStruct(t, map[string][]string{"x-api-key": {"key-1"}})},
		{Method: "kong.client.get_forwarded_ip", Ret: bridge.WrapString("10.1.1.1")},
		{Method: "kong.response.set_headers"},
	})
	c.Access(pdk.Init(conn))
}

func mustStruct(t *testing.T, h map[string][]string) *structpb.Struct {
	t.Helper()
	st, err := bridge.WrapHeaders(h)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// go-pdk's test environment: a full request through the plugin (client IP 10.10.10.1).
func TestPdkTestEnv(t *testing.T) {
	c := newConfig(t, map[string]any{"limit": 1})
	mustValid(t, c)
	for i, want := range []int{200, 429} {
		env, err := test.New(t, test.Request{Method: "GET", Url: "http://example.com/x"})
		if err != nil {
			t.Fatal(err)
		}
		env.DoHttps(c)
		if env.ClientRes.Status != want {
			t.Fatalf("request %d: status %d, want %d", i, env.ClientRes.Status, want)
		}
		if i == 1 && !strings.Contains(string(env.ClientRes.Body), "API rate limit exceeded") {
			t.Fatalf("body %q", env.ClientRes.Body)
		}
	}
}

// Every spelling of /api/login counts against a limit on /api/login, whatever
// kong.request.get_path hands over (Kong 3 normalises some spellings itself, older Kongs none).
func TestPathSpellings(t *testing.T) {
	n := len(algotest.LoginSpellings)
	c := newConfig(t, map[string]any{"algorithm": "fixed_window", "limit": n, "window": "1h", "limit_by": "path", "path": "/api/login"})
	mustValid(t, c)
	for _, p := range algotest.LoginSpellings {
		if res := event(t, c, "access", &kongReq{IP: "10.0.0.1", Path: p}); res.Exit {
			t.Fatalf("%s: refused before the limit: %d %s", p, res.Status, res.Body)
		}
	}
	if res := event(t, c, "access", &kongReq{IP: "10.0.0.1", Path: "/api/login"}); !res.Exit || res.Status != 429 {
		t.Errorf("after every spelling, /api/login: exit %v status %d, want 429: a spelling was not counted", res.Exit, res.Status)
	}
	r := newConfig(t, map[string]any{"limit": 5, "escaped_slashes": "reject"})
	mustValid(t, r)
	if res := event(t, r, "access", &kongReq{IP: "10.0.0.1", Path: "/api%2Flogin"}); !res.Exit || res.Status != 400 {
		t.Errorf("escaped_slashes reject, /api%%2Flogin: exit %v status %d, want 400", res.Exit, res.Status)
	}
}

// The limits Kong's own schema lets an operator write, as counts per window from a second to
// years, all decode and limit, with every algorithm whose bounds hold them.
func TestBigLimits(t *testing.T) {
	for _, algorithm := range rules.Algorithms() {
		for _, c := range []struct {
			limit  int64
			window string
		}{{100_000, "1d"}, {1_000_000, "1h"}, {5_000, "30d"}, {1_000_000_000, "365d"}, {1_000_000_000_000, "1y"}, {1, "1s"}} {
			k, _ := rules.Algorithm(algorithm)
			if p, _ := k.Param(rules.Amount); c.limit > p.Max {
				continue // sliding_log and concurrency keep an entry per unit: their own bound
			}
			cfg := newConfig(t, map[string]any{"algorithm": algorithm, "limit": c.limit, "window": c.window, "warmup": "1h"})
			if cfg.err != nil {
				t.Errorf("%s, %d per %s: %v", algorithm, c.limit, c.window, cfg.err)
				continue
			}
			if res := event(t, cfg, "access", &kongReq{IP: "10.0.0.1"}); res.Exit {
				t.Errorf("%s, %d per %s: the first request was refused: %d %s", algorithm, c.limit, c.window, res.Status, res.Body)
			}
		}
	}
}

// adaptiveRound takes as many requests as an adaptive instance admits, answered with status,
// ends each latency µs later on the plugin's clock (elapsed), and returns the limit the refusal
// reported and the PDK calls of each log event.
func adaptiveRound(t *testing.T, c *Config, elapsed *atomic.Int64, latency int64, status int) (int, [][]string) {
	t.Helper()
	var held []*kongReq
	limit := 0
	for {
		r := &kongReq{IP: "10.0.0.1", Status: status}
		res := event(t, c, "access", r)
		if res.Exit {
			limit, _ = strconv.Atoi(res.Headers["Ratelimit-Limit"][0])
			break
		}
		held = append(held, r)
	}
	elapsed.Add(latency)
	var calls [][]string
	for _, r := range held {
		calls = append(calls, event(t, c, "log", r).Calls)
	}
	return limit, calls
}

// adaptiveConfig is an adaptive instance on a plugin clock that elapsed advances.
func adaptiveConfig(t *testing.T) (*Config, *atomic.Int64) {
	base := time.Now()
	elapsed := new(atomic.Int64) // µs on the plugin's clock
	clock = func() time.Time { return base.Add(time.Duration(elapsed.Load()) * time.Microsecond) }
	t.Cleanup(func() { clock = time.Now })
	c := newConfig(t, map[string]any{"algorithm": "adaptive", "limit": 1000})
	mustValid(t, c)
	return c, elapsed
}

// An adaptive limit learns from the time between a request's access and log phases: with the
// clock giving every request 1 ms, the limit grows past min_limit 4; with 20 ms, far over the
// baseline, it falls back. (Without latencies the first probe would never end: the limit would
// stay at 4.)
func TestAdaptiveLatencyFromLog(t *testing.T) {
	c, elapsed := adaptiveConfig(t)
	until := func(latency int64, done func(int) bool) int {
		var l int
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			if l, _ = adaptiveRound(t, c, elapsed, latency, 200); done(l) {
				break
			}
		}
		return l
	}
	if l := until(1000, func(l int) bool { return l > 4 }); l <= 4 {
		t.Fatalf("limit %d after 5 s of 1 ms requests, want above min_limit 4", l)
	}
	if l := until(20_000, func(l int) bool { return l == 4 }); l != 4 {
		t.Errorf("limit %d after 5 s of 20 ms requests, want min_limit 4", l)
	}
}

// A request whose response is a 5xx (the upstream failed, or Kong's 502/504) is a drop: its log
// phase reads the status, and the limit falls by the backoff (10%) though the latency is short.
func TestAdaptiveDropFromLog(t *testing.T) {
	c, elapsed := adaptiveConfig(t)
	round := func(status int) int {
		limit, calls := adaptiveRound(t, c, elapsed, 1000, status)
		for _, cs := range calls {
			if !slices.Contains(cs, "kong.response.get_status") {
				t.Fatalf("log calls %v: no status asked", cs)
			}
		}
		return limit
	}
	l := 0
	for end := time.Now().Add(5 * time.Second); l <= 20 && time.Now().Before(end); {
		l = round(200)
	}
	if l <= 20 {
		t.Fatalf("limit %d after 1 ms answers, want above 20", l)
	}
	round(503)
	// The limit word was under l + 1: 90% of it is at most ⌊(l + 1) × 0.9⌋.
	if got := round(200); got > (l+1)*9/10 {
		t.Errorf("limit %d after a round of 503s, want at most 90%% of %d (+1)", got, l)
	}
}

// subwindows reaches every limit of the instance: the main one and the groups'.
func TestSubWindows(t *testing.T) {
	cfg := newConfig(t, map[string]any{"algorithm": "sliding_window", "limit": 10, "window": "1m", "subwindows": 60, "ip_limit": 5})
	mustValid(t, cfg)
	if len(cfg.s.Rules) != 2 {
		t.Fatalf("%d rules", len(cfg.s.Rules))
	}
	for _, r := range cfg.s.Rules {
		if sc := r.Alg.Script(); sc.Name != "sliding_window" || len(sc.Args) != 3 || sc.Args[2] != 60 {
			t.Errorf("rule %s: %+v, want 60 sub-windows", r.Name, sc)
		}
	}
}

// A path with a control character, as kong.request.get_path hands it over decoded (nginx
// refuses %00 itself, not %09, %0A or %7F), is refused with 400 through Kong's exit whenever
// the plugin reads the path (issue 25, item 8).
func TestPathControlCharacters(t *testing.T) {
	for _, cfg := range []map[string]any{
		{"algorithm": "fixed_window", "limit": 5, "window": "1h", "limit_by": "path", "path": "/api/login"},
		{"limit": 5, "escaped_slashes": "reject"},
	} {
		c := newConfig(t, cfg)
		mustValid(t, c)
		for _, p := range []string{"/api/login\t", "/api/login\n", "/api/\x7flogin", "/api/login%09"} {
			res := event(t, c, "access", &kongReq{IP: "10.0.0.1", Path: p})
			if !res.Exit || res.Status != 400 || !strings.Contains(res.Body, rules.BadPathMessage) {
				t.Errorf("%v, %q: exit %v status %d %s, want 400", cfg, p, res.Exit, res.Status, res.Body)
			}
		}
	}
}

// strip_trailing_dots_spaces: /api/login. and /api/login%20 count as /api/login, for upstreams
// that strip them; without it they are paths of their own.
func TestStripTrailingDotsSpaces(t *testing.T) {
	for _, strip := range []bool{false, true} {
		c := newConfig(t, map[string]any{"algorithm": "fixed_window", "limit": 1, "window": "1h",
			"limit_by": "path", "path": "/api/login", "strip_trailing_dots_spaces": strip})
		mustValid(t, c)
		if res := event(t, c, "access", &kongReq{IP: "10.0.0.1", Path: "/api/login"}); res.Exit {
			t.Fatalf("strip %v: first request refused: %d", strip, res.Status)
		}
		for _, p := range []string{"/api/login.", "/api/login%20", "/api/login.%20."} {
			res := event(t, c, "access", &kongReq{IP: "10.0.0.1", Path: p})
			if refused := res.Exit && res.Status == 429; refused != strip {
				t.Errorf("strip %v, %q: refused %v (exit %v, status %d), want %v", strip, p, refused, res.Exit, res.Status, strip)
			}
		}
	}
}
