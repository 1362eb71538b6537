package main

import (
	"bytes"
	"strings"
	"testing"
)

// anthropicStream is an Anthropic Messages stream: 25 input tokens, 10 written to the cache, 300
// read from it, and 15 output tokens after two message_delta events of running totals: 350 in all.
var anthropicStream = []string{
	"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]," +
		"\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":10,\"cache_read_input_tokens\":300,\"output_tokens\":1}}}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"pause_turn\"},\"usage\":{\"output_tokens\":7}}\n\n",
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n",
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
}

// TestFormatLocal: a local rule reads a provider's format as the chunks pass, by path (auto) or
// as given, and settles its tokens, weighted; a stream cut before its end is charged the fallback.
func TestFormatLocal(t *testing.T) {
	sse := [][2]string{{"content-type", "text/event-stream"}}
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"rules": [{"name": "tokens", "usage": {"format": "auto", "estimate": 100, "fallback": 300,
				"weights": {"cached_input": 0.1}}, "limit": {"algorithm": "token_bucket", "rate": 10000, "period": "1h"}}]}`)
			if r := e.exchangePath("/v1/messages", sse, anthropicStream...); r != "9900" {
				t.Fatalf("first request: remaining %s, want 9900", r)
			}
			// The first cost 25 + 10 + 300 × 0.1 + 15 = 80 tokens' worth; this one is cut before
			// its message_stop.
			if r := e.exchangePath("/v1/messages", sse, anthropicStream[:4]...); r != "9820" {
				t.Fatalf("after 80: remaining %s, want 9820", r)
			}
			// The cut stream was charged the fallback, 300, more than the 80 it counted; this
			// answer has no body at all.
			if r := e.exchangePath("/v1/messages", sse); r != "9520" {
				t.Fatalf("after a cut stream: remaining %s, want 9520 (10000 − 80 − 300 − 100)", r)
			}
			if n := e.counter(metricUsageUnread); n != 2 {
				t.Fatalf("usage_unread %d, want 2", n)
			}
		})
	}
}

// exchangePath is exchange of a request to path.
func (e *emu) exchangePath(path string, hdrs [][2]string, chunks ...string) string {
	e.t.Helper()
	id := e.InitializeHttpContext()
	e.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", path}, {":authority", "llm"}}, true)
	if lr := e.GetSentLocalResponse(id); lr != nil {
		e.CompleteHttpContext(id)
		return "denied"
	}
	remaining := e.respond(id, hdrs, nil, chunks...)
	e.CompleteHttpContext(id)
	return remaining
}

// TestFormatCluster: a dianad rule of format auto tells the filter, by the request's path, which
// format to read; the filter sends the tokens by class and the model the response named, and
// dianad prices them (here by the model's prices: 25 × 3 + 10 × 3.75 + 300 × 0.3 + 15 × 15 =
// 427.5, charged 428).
func TestFormatCluster(t *testing.T) {
	admin := runDianad(t, `version: 1
admin:
  listen: "127.0.0.1:0"
  token: s3cret
rules:
  - name: spend
    by: [ip]
    usage:
      format: auto
      estimate: 1000
      prices:
        claude-sonnet-4-5*: {input: 3, cache_write: 3.75, cached_input: 0.3, output: 15}
        default: {input: 100, output: 100}
    limit: {algorithm: token_bucket, rate: 100000, period: 1h}
`)
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"cluster": {"name": "dianad", "token": "s3cret"}}`)
			e.from(map[string]string{"go": "198.51.100.31:1", "wasm": "198.51.100.32:1"}[rn.name])
			for i, want := range []string{"99000", "98572"} { // 100000 − 1000; 100000 − 428 − 1000
				id, before := e.llmAdmitTo(admin, "/v1/messages")
				if rem := e.respondStream(id, anthropicStream...); rem != want {
					t.Fatalf("request %d: remaining %s, want %s", i+1, rem, want)
				}
				settle := e.llmDone(id, before)
				if !bytes.Contains(settle.Body, []byte(`"tokens":{"input":25,"cached_input":300,"cache_write":10,"cache_write_1h":0,"output":15,"reasoning":0}`)) ||
					!strings.Contains(string(settle.Body), `"model":"claude-sonnet-4-5"`) {
					t.Fatalf("request %d: settlement %s, want the stream's tokens and model", i+1, settle.Body)
				}
				if got := e.relay(settle, admin); got != "204" {
					t.Fatalf("request %d: settlement answered %s", i+1, got)
				}
			}
		})
	}
}
