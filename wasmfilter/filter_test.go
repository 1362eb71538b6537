package main

import (
	"strings"
	"testing"
)

const perIP = `{"rules": [{"name": "per-ip", "by": ["ip"],
	"limit": {"algorithm": "fixed_window", "limit": 3, "window": "1h"}}]}`

// Per-IP limiting, the headers and the 429 reply, in Go and compiled.
func TestPerIP(t *testing.T) {
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), perIP)
			for i, want := range []string{"2", "1", "0"} {
				r := e.request("/a?x=1")
				if r.status != 0 {
					t.Fatalf("request %d: denied with %d %s", i+1, r.status, r.body)
				}
				if r.headers["ratelimit-limit"] != "3" || r.headers["ratelimit-remaining"] != want || r.headers["ratelimit-reset"] == "" {
					t.Fatalf("request %d: response headers %v, want limit 3, remaining %s", i+1, r.headers, want)
				}
			}
			r := e.request("/a")
			if r.status != 429 {
				t.Fatalf("4th request: status %d, want 429", r.status)
			}
			if !strings.HasPrefix(r.body, `{"message":"API rate limit exceeded","retry_after":`) {
				t.Errorf("body %q", r.body)
			}
			if r.headers["retry-after"] == "" || r.headers["ratelimit-remaining"] != "0" ||
				r.headers["content-type"] != "application/json; charset=utf-8" {
				t.Errorf("reply headers %v", r.headers)
			}
			if r := e.from("192.0.2.2:5555").request("/a"); r.status != 0 {
				t.Errorf("another client: status %d, want allowed", r.status)
			}
			if a, d := e.counter(metricAllowed), e.counter(metricDenied); a != 4 || d != 1 {
				t.Errorf("counters allowed %d denied %d, want 4 and 1", a, d)
			}
		})
	}
}
