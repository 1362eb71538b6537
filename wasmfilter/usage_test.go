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
	return e.exchangeTrailers(hdrs, nil, chunks...)
}

// exchangeTrailers is exchange with a response that ends with trailers (none if nil).
func (e *emu) exchangeTrailers(hdrs, trailers [][2]string, chunks ...string) string {
	e.t.Helper()
	id := e.InitializeHttpContext()
	e.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "llm"}}, true)
	if lr := e.GetSentLocalResponse(id); lr != nil {
		e.CompleteHttpContext(id)
		return "denied"
	}
	remaining := e.respond(id, hdrs, trailers, chunks...)
	e.CompleteHttpContext(id)
	return remaining
}

// respond sends an admitted request id its response: headers hdrs, the body in chunks, then the
// trailers (when not nil: the body's last chunk does not end the stream, the trailers do). It
// returns the request's RateLimit-Remaining.
func (e *emu) respond(id uint32, hdrs, trailers [][2]string, chunks ...string) string {
	e.t.Helper()
	e.CallOnResponseHeaders(id, append([][2]string{{":status", "200"}}, hdrs...), len(chunks) == 0 && trailers == nil)
	remaining := toMap(e.GetCurrentResponseHeaders(id))["ratelimit-remaining"]
	for i, c := range chunks {
		if a := e.CallOnResponseBody(id, []byte(c), i == len(chunks)-1 && trailers == nil); a != types.ActionContinue {
			e.t.Fatalf("body chunk %d held back: %v", i, a)
		}
	}
	if trailers != nil {
		if a := e.CallOnResponseTrailers(id, trailers); a != types.ActionContinue {
			e.t.Fatalf("trailers held back: %v", a)
		}
	}
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

// TestUsageTrailers: a usage.header is read from the response's trailers when the headers do not
// have it (a gRPC or HTTP/2 upstream's stream); given in both, or in neither, the fallback is
// charged and counted. In Go and compiled.
func TestUsageTrailers(t *testing.T) {
	const name = "x-usage-total-tokens"
	json := [][2]string{{"content-type", "application/json"}}
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), strings.Replace(tokenRule, `"%s": "%s"`, `"header": "`+name+`"`, 1))
			steps := []struct {
				what              string
				headers, trailers [][2]string
				want              string // RateLimit-Remaining of the request
				unread            uint64 // diana.usage_unread after it
			}{
				{"in the trailers only", json, [][2]string{{"grpc-status", "0"}, {name, "42"}}, "900", 0},
				{"in the headers, trailers without it", append(json, [2]string{name, "58"}), [][2]string{{"grpc-status", "0"}}, "858", 0}, // 1000 − 42 − 100
				{"in both: given twice", append(json, [2]string{name, "10"}), [][2]string{{name, "10"}}, "800", 1},                        // 1000 − 42 − 58 − 100
				{"in neither", json, [][2]string{{"grpc-status", "0"}}, "500", 2},                                                         // − 300 (the fallback)
				{"a bad trailer", json, [][2]string{{name, "-1"}}, "200", 3},                                                              // − 300
				{"a probe, no trailers", nil, nil, "denied", 3},                                                                           // 1000 − 42 − 58 − 3 × 300 = 0 left
			}
			for _, st := range steps {
				if got := e.exchangeTrailers(st.headers, st.trailers, `{"choices":[]}`); got != st.want {
					t.Fatalf("%s: remaining %s, want %s", st.what, got, st.want)
				}
				if n := e.counter(metricUsageUnread); n != st.unread {
					t.Fatalf("%s: usage_unread %d, want %d", st.what, n, st.unread)
				}
			}
		})
	}
}
