package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// openAIUsageStream is an OpenAI stream the filter asked the usage of: 9 prompt and 12 completion
// tokens; the client should receive bareStream.
const (
	chunkWithNull  = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":null}` + "\n\n"
	chunkBare      = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}` + "\n\n"
	usageChunk     = `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}` + "\n\n"
	openAIDoneData = "data: [DONE]\n\n"
)

// post sends a request to path whose body comes in chunks after its headers; it returns what the
// filter answered the headers and the last chunk, and the request's id.
func (e *emu) post(path string, hdrs [][2]string, chunks ...string) (id uint32, first, last types.Action) {
	e.t.Helper()
	id = e.InitializeHttpContext()
	h := append([][2]string{{":method", "POST"}, {":path", path}, {":authority", "llm"}}, hdrs...)
	first = e.CallOnRequestHeaders(id, h, len(chunks) == 0)
	for i, c := range chunks {
		last = e.CallOnRequestBody(id, []byte(c), i == len(chunks)-1)
		if i == 0 && len(chunks) > 1 && last != types.ActionPause {
			e.t.Fatalf("the first chunk of %d: %v, want the request held for the rest", len(chunks), last)
		}
	}
	return id, first, last
}

// TestRequestBody: a local rule that reads the request (format) decides it once its body has come:
// the request's max_tokens and size are reserved; a max_tokens given twice, or past the bytes the
// filter reads, reserves the worst case (the limit); a streamed OpenAI request that does not ask
// for its usage is made to, and the client's stream has the usage taken out; the response's
// usage is charged.
func TestRequestBody(t *testing.T) {
	body := `{"model":"gpt-4o","max_tokens":300,"stream":true,"messages":[{"role":"user","content":"hi"}]}` // 94 bytes: 24 input tokens
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"rules": [{"name": "tokens", "usage": {"format": "auto"}, "limit": {"algorithm": "fixed_window", "limit": 10000, "window": "1h"}}]}`)
			id, first, last := e.post("/v1/chat/completions", [][2]string{{"content-length", strconv.Itoa(len(body))}}, body[:40], body[40:])
			if first != types.ActionPause || last != types.ActionContinue {
				t.Fatalf("headers %v, body %v: want the headers held until the body came", first, last)
			}
			var sent map[string]any
			if err := json.Unmarshal(e.GetCurrentRequestBody(id), &sent); err != nil || sent["stream_options"].(map[string]any)["include_usage"] != true {
				t.Fatalf("the upstream's body %s (%v): want stream_options.include_usage", e.GetCurrentRequestBody(id), err)
			}
			if _, ok := toMap(e.GetCurrentRequestHeaders(id))["content-length"]; ok {
				t.Fatal("the edited body kept its content-length")
			}
			if rem := e.respondStream(id, chunkWithNull, chunkWithNull+usageChunk+openAIDoneData); rem != strconv.Itoa(10000-24-300) {
				t.Fatalf("remaining %s, want the input (24) and max_tokens (300) reserved", rem)
			}
			if got := string(e.GetCurrentResponseBody(id)); got != chunkBare+openAIDoneData {
				t.Fatalf("the client's last piece %q, want %q", got, chunkBare+openAIDoneData)
			}
			e.CompleteHttpContext(id)
			// Charged 21; the next request's max_tokens given twice reserves the worst case, the
			// whole window, which 9979 cannot hold.
			id, _, _ = e.post("/v1/chat/completions", nil, `{"max_tokens":1,"max_tokens":900}`)
			if lr := e.GetSentLocalResponse(id); lr == nil || lr.StatusCode != 429 {
				t.Fatalf("a max_tokens given twice: %+v, want a 429", lr)
			}
			e.CompleteHttpContext(id)
		})
	}
}

// respondStream sends request id an event stream in pieces, ending it; it returns the request's
// RateLimit-Remaining.
func (e *emu) respondStream(id uint32, pieces ...string) string {
	e.t.Helper()
	e.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, len(pieces) == 0)
	remaining := toMap(e.GetCurrentResponseHeaders(id))["ratelimit-remaining"]
	for i, p := range pieces {
		e.CallOnResponseBody(id, []byte(p), i == len(pieces)-1)
	}
	return remaining
}

// TestRequestBodyPastPeek: a body longer than the filter reads has its max_tokens read for sure
// by no one: the worst case is reserved, and the request goes on, its body whole.
func TestRequestBodyPastPeek(t *testing.T) {
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", peekLimit) + `"}],"max_tokens":5}`
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"rules": [{"name": "tokens", "usage": {"format": "openai", "fallback": 5000}, "limit": {"algorithm": "fixed_window", "limit": 10000, "window": "1h"}}]}`)
			id, first, last := e.post("/v1/chat/completions", nil, big[:peekLimit/2], big[peekLimit/2:peekLimit+10], big[peekLimit+10:])
			if first != types.ActionPause || last != types.ActionContinue {
				t.Fatalf("headers %v, body %v", first, last)
			}
			e.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
			if rem := toMap(e.GetCurrentResponseHeaders(id))["ratelimit-remaining"]; rem != "5000" {
				t.Fatalf("remaining %s, want 5000: the fallback reserved", rem)
			}
		})
	}
}

// TestRequestBodyCluster: in cluster mode an OpenAI request waits for its body; dianad decides
// it; the filter makes its stream ask for its usage and takes the usage back out for the client;
// dianad settles the tokens the filter read.
func TestRequestBodyCluster(t *testing.T) {
	admin := runDianad(t, `version: 1
admin:
  listen: "127.0.0.1:0"
  token: s3cret
rules:
  - name: tokens
    by: [ip]
    usage: {format: auto, estimate: 100}
    limit: {algorithm: token_bucket, rate: 100000, period: 1h}
`)
	body := `{"model":"gpt-4o","stream":true,"max_tokens":300,"messages":[{"role":"user","content":"hi"}]}`
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"cluster": {"name": "dianad", "token": "s3cret"}}`)
			e.from(map[string]string{"go": "198.51.100.41:1", "wasm": "198.51.100.42:1"}[rn.name])
			before := len(e.GetCalloutAttributesFromContext(proxytest.PluginContextID))
			id, first, last := e.post("/v1/chat/completions", [][2]string{{"content-length", strconv.Itoa(len(body))}}, body)
			if first != types.ActionPause || last != types.ActionPause {
				t.Fatalf("headers %v, body %v: want the request held for its body, then for dianad", first, last)
			}
			calls := e.GetCalloutAttributesFromContext(id)
			if len(calls) != 1 || e.relay(calls[0], admin) != "200" {
				t.Fatalf("check callouts %+v", calls)
			}
			if !bytes.Contains(e.GetCurrentRequestBody(id), []byte(`"include_usage":true`)) {
				t.Fatalf("the upstream's body %s", e.GetCurrentRequestBody(id))
			}
			e.respondStream(id, chunkWithNull+usageChunk, openAIDoneData)
			if got := string(e.GetCurrentResponseBody(id)); got != openAIDoneData {
				t.Fatalf("the client's last piece %q, want %q", got, openAIDoneData)
			}
			e.CompleteHttpContext(id)
			settles := e.GetCalloutAttributesFromContext(proxytest.PluginContextID)
			if len(settles) != before+1 || !bytes.Contains(settles[before].Body, []byte(`"tokens":{"input":9,`)) {
				t.Fatalf("settlements %+v, want the stream's tokens", settles[before:])
			}
			if got := e.relay(settles[before], admin); got != "204" {
				t.Fatalf("settlement answered %s", got)
			}
		})
	}
}

// TestBodyDimension: a rule by body:model counts each model of the request body apart, read from
// the body's first bytes.
func TestBodyDimension(t *testing.T) {
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"rules": [{"name": "per-model", "by": ["body:model"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`)
			for i, c := range []struct {
				body   string
				denied bool
			}{{`{"model":"a"}`, false}, {`{"model":"a"}`, true}, {`{"model":"b"}`, false}} {
				id, _, _ := e.post("/v1/chat/completions", nil, c.body)
				if denied := e.GetSentLocalResponse(id) != nil; denied != c.denied {
					t.Fatalf("request %d (%s): denied %v", i+1, c.body, denied)
				}
				e.CompleteHttpContext(id)
			}
		})
	}
}
