package main

import (
	"bytes"
	"testing"
)

// TestSettleClusterStreamUsage: in cluster mode the filter reads a stream as dianad's rule says
// (its stream_usage, sent with the ticket): with "last", of a vLLM stream whose every event
// carries the running total the last total is settled, where "once" would see a duplicate.
func TestSettleClusterStreamUsage(t *testing.T) {
	admin := runDianad(t, `version: 1
admin:
  listen: "127.0.0.1:0"
  token: s3cret
rules:
  - name: tokens
    by: [ip]
    usage: {body: usage.total_tokens, estimate: 100, fallback: 300, stream_usage: last}
    limit: {algorithm: token_bucket, rate: 1000, period: 1h}
`)
	stream := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\ndata: [DONE]\n\n",
	}
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"cluster": {"name": "dianad", "token": "s3cret"}}`)
			e.from(map[string]string{"go": "198.51.100.21:1", "wasm": "198.51.100.22:1"}[rn.name])
			for i, want := range []string{"900", "893"} { // 1000 − 100; 1000 − 7 − 100
				id, before := e.llmAdmit(admin)
				if rem := e.respondStream(id, stream...); rem != want {
					t.Fatalf("request %d: remaining %s, want %s", i+1, rem, want)
				}
				settle := e.llmDone(id, before)
				if !bytes.Contains(settle.Body, []byte(`"cost":7`)) {
					t.Fatalf("request %d: settlement %s, want one of cost 7", i+1, settle.Body)
				}
				if got := e.relay(settle, admin); got != "204" {
					t.Fatalf("request %d: settlement answered %s", i+1, got)
				}
			}
		})
	}
}
