package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// bodyUsage reads the cost from the response's usage.total_tokens (estimate 100, fallback 300).
const bodyUsage = `{body: usage.total_tokens, estimate: 100, fallback: 300}`

// usageDianad starts a real dianad with a token budget per client IP, 1000 tokens an hour, the
// cost read from the response as usage says (bodyUsage...).
func usageDianad(t *testing.T, usage string) string {
	t.Helper()
	return runDianad(t, `version: 1
listen: "127.0.0.1:0"
admin:
  listen: "127.0.0.1:0"
  token: s3cret
upstreams:
  - name: demo
    url: "demo:"
rules:
  - name: tokens
    by: [ip]
    usage: `+usage+`
    limit: {algorithm: token_bucket, rate: 1000, period: 1h}
`)
}

// relay plays Envoy's part for one callout: it sends it to dianad and hands the answer back,
// returning the status.
func (e *emu) relay(c proxytest.HttpCalloutAttribute, admin string) string {
	e.t.Helper()
	h := toMapAll(c.Headers)
	req, err := http.NewRequest(h[":method"], admin+h[":path"], bytes.NewReader(c.Body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range h {
		if !strings.HasPrefix(k, ":") {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", resp.Status[:3]}}, nil, body)
	return resp.Status[:3]
}

// llmExchange sends a request through the filter in cluster mode, relays its check to dianad,
// answers it with a JSON body in chunks, and returns its RateLimit-Remaining and the
// settlement the filter sends when the stream is done.
func (e *emu) llmExchange(admin string, chunks ...string) (string, proxytest.HttpCalloutAttribute) {
	e.t.Helper()
	id, before := e.llmAdmit(admin)
	remaining := e.respond(id, [][2]string{{"content-type", "application/json"}}, nil, chunks...)
	return remaining, e.llmDone(id, before)
}

// llmAdmit sends a request through the filter in cluster mode and relays its check to dianad,
// which admits it; before is the count of settlements sent so far, for llmDone.
func (e *emu) llmAdmit(admin string) (id uint32, before int) {
	e.t.Helper()
	return e.llmAdmitTo(admin, "/v1/chat/completions")
}

// llmAdmitTo is llmAdmit of a request to path.
func (e *emu) llmAdmitTo(admin, path string) (id uint32, before int) {
	e.t.Helper()
	before = len(e.GetCalloutAttributesFromContext(proxytest.PluginContextID))
	id = e.InitializeHttpContext()
	if a := e.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", path}, {":authority", "llm"}}, true); a != types.ActionPause {
		e.t.Fatalf("request not paused for the callout: %v", a)
	}
	calls := e.GetCalloutAttributesFromContext(id)
	if len(calls) != 1 || !bytes.Contains(calls[0].Body, []byte(`"settle":true`)) {
		e.t.Fatalf("check callouts %+v, want one with \"settle\":true", calls)
	}
	if st := e.relay(calls[0], admin); st != "200" {
		e.t.Fatalf("check: %s", st)
	}
	return id, before
}

// llmDone ends the stream of request id and returns the one settlement it sent.
func (e *emu) llmDone(id uint32, before int) proxytest.HttpCalloutAttribute {
	e.t.Helper()
	e.CompleteHttpContext(id)
	settles := e.GetCalloutAttributesFromContext(proxytest.PluginContextID)
	if len(settles) != before+1 {
		e.t.Fatalf("%d settlements sent from the plugin context, want 1", len(settles)-before)
	}
	return settles[before]
}

// TestSettleCluster: in cluster mode the filter reads the usage of dianad's token budget from
// the response as it passes and settles it with POST /v1/settle when the stream is done: the
// next request's budget shows the actual cost (a response without usage: the fallback); a
// settlement dianad refuses is counted, and nothing panics.
func TestSettleCluster(t *testing.T) {
	admin := usageDianad(t, bodyUsage)
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"cluster": {"name": "dianad", "token": "s3cret"}}`)
			e.from(map[string]string{"go": "198.51.100.11:1", "wasm": "198.51.100.12:1"}[rn.name])
			steps := []struct {
				chunks []string
				want   string // RateLimit-Remaining of the request
				body   string // in the settlement
			}{
				{[]string{`{"usage":{"total_tokens"`, `:42}}`}, "900", `"cost":42`},
				{[]string{`{"error":"upstream"}`}, "858", `"unread":"usage missing`}, // 1000 − 42 − 100
				{nil, "558", `"cost":`}, // 1000 − 42 − 300 (the fallback) − 100
			}
			for i, st := range steps {
				rem, settle := e.llmExchange(admin, st.chunks...)
				if rem != st.want {
					t.Fatalf("request %d: remaining %s, want %s", i+1, rem, st.want)
				}
				if h := toMapAll(settle.Headers); h[":path"] != "/v1/settle" || h["authorization"] != "Bearer s3cret" ||
					!bytes.Contains(settle.Body, []byte(st.body)) && i < 2 {
					t.Fatalf("request %d: settlement %v %s", i+1, h, settle.Body)
				}
				if i == len(steps)-1 {
					// dianad refuses it: counted, the estimate stays charged.
					e.CallOnHttpCallResponse(settle.CalloutID, [][2]string{{":status", "400"}}, nil, []byte(`{"error":"x"}`))
					break
				}
				if got := e.relay(settle, admin); got != "204" {
					t.Fatalf("request %d: settlement answered %s", i+1, got)
				}
			}
			if n := e.counter(metricSettleFailed); n != 1 {
				t.Fatalf("settle_failed %d, want 1", n)
			}
			if rem, _ := e.llmExchange(admin); rem != "458" { // the last request kept its estimate of 100
				t.Fatalf("after a refused settlement: remaining %s, want 458", rem)
			}
		})
	}
}

// TestSettleClusterTrailers: in cluster mode a usage header of dianad's rule is read from the
// response's trailers too, and settled only when the stream is done (after the trailers, not at
// the body's end); given in both the headers and the trailers, or in neither, it is sent unread
// and dianad charges the fallback.
func TestSettleClusterTrailers(t *testing.T) {
	const name = "x-usage-total-tokens"
	admin := usageDianad(t, `{header: `+name+`, estimate: 100, fallback: 300}`)
	json := [][2]string{{"content-type", "application/json"}}
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"cluster": {"name": "dianad", "token": "s3cret"}}`)
			e.from(map[string]string{"go": "198.51.100.21:1", "wasm": "198.51.100.22:1"}[rn.name])
			steps := []struct {
				what              string
				headers, trailers [][2]string
				want              string // RateLimit-Remaining of the request
				body              string // in the settlement
			}{
				{"in the trailers only", json, [][2]string{{"grpc-status", "0"}, {name, "42"}}, "900", `"cost":42`},
				{"in both", append(json, [2]string{name, "10"}), [][2]string{{name, "10"}}, "858", // 1000 − 42 − 100
					`"unread":"usage given twice: header ` + name + `: in the response's headers and in its trailers"`},
				{"in neither", json, [][2]string{{"grpc-status", "0"}}, "558", `"unread":"usage missing`}, // − 300 (the fallback)
				{"in the headers, trailers without it", append(json, [2]string{name, "7"}), [][2]string{{"grpc-status", "0"}}, "258", `"cost":7`},
			}
			for _, st := range steps {
				id, before := e.llmAdmit(admin)
				if rem := e.respond(id, st.headers, st.trailers, `{"choices":[]}`); rem != st.want {
					t.Fatalf("%s: remaining %s, want %s", st.what, rem, st.want)
				}
				if n := len(e.GetCalloutAttributesFromContext(proxytest.PluginContextID)); n != before {
					t.Fatalf("%s: settled before the stream was done", st.what)
				}
				settle := e.llmDone(id, before)
				if !bytes.Contains(settle.Body, []byte(st.body)) {
					t.Fatalf("%s: settlement %s, want %s in it", st.what, settle.Body, st.body)
				}
				if got := e.relay(settle, admin); got != "204" {
					t.Fatalf("%s: settlement answered %s", st.what, got)
				}
			}
			if rem, _ := e.llmExchange(admin); rem != "251" { // 1000 − 42 − 300 − 300 − 7 − 100
				t.Fatalf("after the settlements: remaining %s, want 251", rem)
			}
		})
	}
}
