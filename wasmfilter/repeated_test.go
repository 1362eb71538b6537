package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// A header the local rules count by, or the consumer header, given twice is refused with 400
// naming it: Envoy's host call for one header gives its first value, and the upstream may read
// the other one. In cluster mode the callout names the header in "repeated", for dianad's rules.
func TestRepeatedIdentityHeader(t *testing.T) {
	const local = `{"consumer_header": "x-consumer", "rules": [
		{"name": "key", "by": ["header:X-Api-Key"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "consumer", "by": ["consumer"], "limit": {"algorithm": "fixed_window", "limit": 100, "window": "1h"}}]}`
	for _, rn := range runners {
		t.Run(rn.name+"/local", func(t *testing.T) {
			e := start(t, rn.vm(t), local)
			if r := e.request("/", "x-api-key", "victim"); r.status != 0 {
				t.Fatalf("the key's first request: %d", r.status)
			}
			if r := e.request("/", "x-api-key", "victim"); r.status != 429 {
				t.Fatalf("the key's second request: %d, want 429", r.status)
			}
			for _, tc := range []struct {
				name string
				kv   []string
				want string
			}{
				{"key twice", []string{"x-api-key", "fresh", "x-api-key", "victim"}, "X-Api-Key"},
				{"consumer twice", []string{"x-api-key", "other", "x-consumer", "a", "x-consumer", "b"}, "x-consumer"},
			} {
				if r := e.request("/", tc.kv...); r.status != 400 || !strings.Contains(r.body, tc.want) {
					t.Errorf("%s: %d %s, want 400 naming %s", tc.name, r.status, r.body, tc.want)
				}
			}
		})
		// The emulator is a singleton: the next one starts once the last test's cleanup ran.
		t.Run(rn.name+"/cluster", func(t *testing.T) {
			c := start(t, rn.vm(t), `{"cluster": {"name": "dianad"}}`)
			r := c.request("/", "x-api-key", "fresh", "x-api-key", "victim", "accept", "*/*")
			calls := c.GetCalloutAttributesFromContext(r.id)
			if r.action != types.ActionPause || len(calls) != 1 {
				t.Fatalf("cluster mode: action %v, %d callouts; want paused for one", r.action, len(calls))
			}
			var body struct {
				Headers  map[string]string `json:"headers"`
				Repeated []string          `json:"repeated"`
			}
			if err := json.Unmarshal(calls[0].Body, &body); err != nil || body.Headers["x-api-key"] != "fresh" ||
				len(body.Repeated) != 1 || body.Repeated[0] != "x-api-key" {
				t.Errorf("callout body %s (%v): want x-api-key's first value and repeated [x-api-key]", calls[0].Body, err)
			}
		})
	}
}
