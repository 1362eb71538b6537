package main

import (
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// tokenRule is a local token budget: 1000 tokens an hour, the cost read from the response.
const tokenRule = `{"rules": [{"name": "tokens", "usage": {"%s": "%s", "estimate": 100, "fallback": 300},
	"limit": {"algorithm": "token_bucket", "rate": 1000, "period": "1h"}}]}`

// exchange sends a request and, when the filter lets it through, a response with headers hdrs
// and a body in chunks; it returns the request's RateLimit-Remaining.
func (e *emu) exchange(hdrs [][2]string, chunks ...string) string {
	e.t.Helper()
	id := e.InitializeHttpContext()
	e.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "llm"}}, false)
	if lr := e.GetSentLocalResponse(id); lr != nil {
		e.CompleteHttpContext(id)
		return "denied"
	}
	e.CallOnResponseHeaders(id, append([][2]string{{":status", "200"}}, hdrs...), len(chunks) == 0)
	remaining := toMap(e.GetCurrentResponseHeaders(id))["ratelimit-remaining"]
	for i, c := range chunks {
		if a := e.CallOnResponseBody(id, []byte(c), i == len(chunks)-1); a != types.ActionContinue {
			e.t.Fatalf("body chunk %d held back: %v", i, a)
		}
	}
	e.CompleteHttpContext(id)
	return remaining
}

// TestUsage: the filter reserves a usage rule's estimate, reads the response's usage from a
// header, a JSON body or a stream's usage event as the chunks pass, and settles it in shared
// data when the stream is done; a response without usage is charged the fallback and counted.
func TestUsage(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"total_tokens\":42}}\n\ndata: [DONE]\n\n"
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), strings.Replace(tokenRule, `"%s": "%s"`, `"body": "usage.total_tokens"`, 1))
			if r := e.exchange([][2]string{{"content-type", "text/event-stream"}}, stream[:30], stream[30:77], stream[77:]); r != "900" {
				t.Fatalf("first request: remaining %s, want 900", r)
			}
			if r := e.exchange([][2]string{{"content-type", "application/json"}}, `{"usage":{"total_tokens"`, `:58}}`); r != "858" { // 1000 − 42 − 100
				t.Fatalf("after 42 tokens: remaining %s, want 858", r)
			}
			if r := e.exchange([][2]string{{"content-type", "application/json"}}, `{"error":"upstream"}`); r != "800" { // 1000 − 42 − 58 − 100
				t.Fatalf("after 58 more: remaining %s, want 800", r)
			}
			if r := e.exchange(nil); r != "500" { // 1000 − 42 − 58 − 300 (the fallback) − 100
				t.Fatalf("after a fallback of 300: remaining %s, want 500", r)
			}
			if n := e.counter(metricUsageUnread); n != 2 {
				t.Fatalf("usage_unread %d, want 2", n)
			}
		})
	}
}

func TestUsageHeaderInFilter(t *testing.T) {
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), strings.Replace(tokenRule, `"%s": "%s"`, `"header": "x-usage-total-tokens"`, 1))
			e.exchange([][2]string{{"x-usage-total-tokens", "950"}})
			if r := e.exchange(nil); r != "denied" { // 950 of 1000 spent: no room for 100
				t.Fatalf("after 950 tokens: %s, want a denial", r)
			}
		})
	}
}

func TestUsageEstimateBodyRefused(t *testing.T) {
	_, st := tryStart(t, &vmContext{}, `{"rules": [{"name": "t", "usage": {"body": "usage.total_tokens", "estimate_body": "max_tokens"},
		"limit": {"algorithm": "token_bucket", "rate": 1000, "period": "1h"}}]}`)
	if st == types.OnPluginStartStatusOK {
		t.Fatal("a rule with usage.estimate_body started")
	}
}

func TestBodyDimensionRefused(t *testing.T) {
	_, st := tryStart(t, &vmContext{}, `{"rules": [{"name": "m", "by": ["body:model"], "limit": {"algorithm": "token_bucket", "rate": 10}}]}`)
	if st == types.OnPluginStartStatusOK {
		t.Fatal("a rule counting by body:model started")
	}
}
