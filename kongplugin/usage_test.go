package main

import (
	"reflect"
	"strings"
	"testing"
)

// TestUsageHeader: with usage_header, a request reserves usage_estimate when admitted, and the
// log phase charges what the upstream's header says (one PDK call), or usage_fallback with a
// line in Kong's log when the header is missing or unreadable; a budget spent below zero makes
// the next request wait.
func TestUsageHeader(t *testing.T) {
	c := newConfig(t, map[string]any{"algorithm": "token_bucket", "limit": 1000, "window": "1m",
		"limit_by": "header", "header_name": "X-Api-Key", "usage_header": "x-usage-total-tokens", "usage_estimate": 100, "usage_fallback": 500})
	mustValid(t, c)
	req := func() *kongReq { return &kongReq{IP: "1.1.1.1", Headers: map[string]string{"x-api-key": "k1"}} }
	remaining := func(res kongResult) string {
		for k, v := range res.Headers {
			if strings.EqualFold(k, "RateLimit-Remaining") {
				return v[0]
			}
		}
		return ""
	}
	r1 := req()
	if res := event(t, c, "access", r1); res.Exit || remaining(res) != "900" {
		t.Fatalf("first: %+v", res)
	}
	r1.Upstream = map[string][]string{"X-Usage-Total-Tokens": {"40"}}
	if res := event(t, c, "log", r1); !reflect.DeepEqual(res.Calls, []string{"kong.ctx.shared.get", "kong.service.response.get_headers"}) {
		t.Fatalf("log calls %v", res.Calls)
	}
	r2 := req()
	if res := event(t, c, "access", r2); remaining(res) != "860" { // 1000 − 40 − 100
		t.Fatalf("after 40 tokens: %+v", res)
	}
	r2.Upstream = map[string][]string{"Content-Type": {"application/json"}} // no usage header
	if res := event(t, c, "log", r2); len(res.Logs) != 1 || !strings.Contains(res.Logs[0], "usage_fallback") {
		t.Fatalf("log of a response without usage: %+v", res)
	}
	r3 := req()
	if res := event(t, c, "access", r3); remaining(res) != "360" { // 1000 − 40 − 500 − 100
		t.Fatalf("after the fallback: %+v", res)
	}
	r3.Upstream = map[string][]string{"X-Usage-Total-Tokens": {"2000"}} // far beyond the budget
	event(t, c, "log", r3)
	if res := event(t, c, "access", req()); !res.Exit || res.Status != 429 {
		t.Fatalf("a budget below zero admitted a request: %+v", res)
	}
}

// TestUsageHeaderAdapted: a config Kong's schema accepts is one the plugin limits with: an
// algorithm that cannot settle a late cost ignores usage_header, with a warning.
func TestUsageHeaderAdapted(t *testing.T) {
	for _, cfg := range []map[string]any{
		{"algorithm": "sliding_log", "limit": 10, "usage_header": "x-t"},
		{"algorithm": "sliding_window", "subwindows": 4, "usage_header": "x-t"},
	} {
		c := newConfig(t, cfg)
		mustValid(t, c)
		if c.s.needs.Settles || len(c.s.Warnings) != 1 || !strings.Contains(c.s.Warnings[0], "usage_header: is ignored") {
			t.Errorf("%v: settles %v, warnings %v", cfg, c.s.needs.Settles, c.s.Warnings)
		}
	}
}

func TestUsageHeaderInvalid(t *testing.T) {
	for _, c := range []struct {
		cfg   map[string]any
		field string
	}{
		{map[string]any{"algorithm": "token_bucket", "usage_header": "x t"}, "usage_header"},
		{map[string]any{"algorithm": "token_bucket", "usage_header": "x-t", "usage_estimate": -1}, "usage_estimate"},
	} {
		cfg := newConfig(t, c.cfg)
		if cfg.err == nil || !strings.Contains(cfg.err.Error(), c.field) {
			t.Errorf("%v: error %v, want one on %s", c.cfg, cfg.err, c.field)
		}
	}
}
