package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/server"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// dianad starts a real dianad whose per-IP rule admits 2 requests an hour, with an admin token,
// and returns its admin URL.
func dianad(t *testing.T) string {
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
  - name: per-ip
    by: [ip]
    limit: {algorithm: fixed_window, limit: 2, window: 1h}
`)
}

// runDianad starts a real dianad with the config yaml until the test ends, and returns its
// admin URL.
func runDianad(t *testing.T, yaml string) string {
	t.Helper()
	cfg, err := server.Parse([]byte(yaml), "dianad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(cfg, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dianad: %v", err)
		}
	})
	return "http://" + s.AdminAddr()
}

// forward plays Envoy's part: it sends the request's callout to dianad over HTTP and hands the
// answer back to the filter.
func (e *emu) forward(r result, admin string) result {
	e.t.Helper()
	calls := e.GetCalloutAttributesFromContext(r.id)
	if len(calls) != 1 {
		e.t.Fatalf("%d callouts, want 1", len(calls))
	}
	c := calls[0]
	if c.Upstream != "dianad" {
		e.t.Errorf("callout to cluster %q, want dianad", c.Upstream)
	}
	e.relay(c, admin)
	return e.finish(r)
}

// answer hands the filter a made-up callout answer (failures).
func (e *emu) answer(r result, hdrs [][2]string, body string) result {
	e.t.Helper()
	calls := e.GetCalloutAttributesFromContext(r.id)
	if len(calls) != 1 {
		e.t.Fatalf("%d callouts, want 1", len(calls))
	}
	e.CallOnHttpCallResponse(calls[0].CalloutID, hdrs, nil, []byte(body))
	return e.finish(r)
}

func toMapAll(h [][2]string) map[string]string {
	m := map[string]string{}
	for _, kv := range h {
		m[strings.ToLower(kv[0])] = kv[1]
	}
	return m
}

const clusterCfg = `{"cluster": {"name": "dianad", "token": "s3cret", "timeout": "300ms", "on_failure": "%s",
	"rules": [{"name": "fallback", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}}`

func clusterConfigWith(policy string) string { return strings.Replace(clusterCfg, "%s", policy, 1) }

// Cluster mode against a real dianad: allowed requests resume with dianad's headers, the third
// gets dianad's 429; the callout carries the request as /v1/check expects it.
func TestClusterAllowedDenied(t *testing.T) {
	admin := dianad(t)
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), clusterConfigWith("closed"))
			ip := map[string]string{"go": "198.51.100.1:1", "wasm": "198.51.100.2:1"}[rn.name]
			e.from(ip)
			for i, want := range []string{"1", "0"} {
				r := e.request("/x?q=1", "x-api-key", "k", "cookie", "secret")
				if r.action != types.ActionPause {
					t.Fatalf("request %d not paused for the callout", i+1)
				}
				if i == 0 {
					var body map[string]any
					c := e.GetCalloutAttributesFromContext(r.id)[0]
					if err := json.Unmarshal(c.Body, &body); err != nil {
						t.Fatalf("callout body %q: %v", c.Body, err)
					}
					hdrs, _ := body["headers"].(map[string]any)
					if body["path"] != "/x" || body["method"] != "GET" || body["client_ip"] != strings.TrimSuffix(ip, ":1") ||
						hdrs["x-api-key"] != "k" || hdrs["cookie"] != nil {
						t.Errorf("callout body %s", c.Body)
					}
				}
				r = e.forward(r, admin)
				if r.status != 0 || r.headers["ratelimit-remaining"] != want {
					t.Fatalf("request %d: status %d headers %v, want allowed with remaining %s", i+1, r.status, r.headers, want)
				}
				if e.GetCurrentHttpStreamAction(r.id) != types.ActionContinue {
					t.Errorf("request %d not resumed", i+1)
				}
			}
			r := e.forward(e.request("/x"), admin)
			if r.status != 429 || !strings.Contains(r.body, `"retry_after"`) || r.headers["retry-after"] == "" {
				t.Errorf("3rd request: %d %v %q, want dianad's 429", r.status, r.headers, r.body)
			}
			if a, d, b := e.counter(metricAllowed), e.counter(metricDenied), e.counter(metricBackendError); a != 2 || d != 1 || b != 0 {
				t.Errorf("allowed %d denied %d backend errors %d", a, d, b)
			}
		})
	}
}

// In cluster mode the callout carries the consumer (consumer_header), which dianad's rules match
// and count by: without it, they would count such a request by its address.
func TestCalloutConsumer(t *testing.T) {
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"consumer_header": "x-consumer", "cluster": {"name": "dianad"}}`)
			r := e.from("192.0.2.1:1").request("/x", "x-consumer", "alice")
			calls := e.GetCalloutAttributesFromContext(r.id)
			if len(calls) != 1 {
				t.Fatalf("%d callouts, want 1", len(calls))
			}
			var body map[string]any
			if err := json.Unmarshal(calls[0].Body, &body); err != nil || body["consumer"] != "alice" {
				t.Errorf("callout body %s (%v), want consumer alice", calls[0].Body, err)
			}
		})
	}
}

// An unlimited rule in rules exempts the requests it matches from every rule, dianad's included:
// no callout is made, and diana.unlimited counts them. The others go to dianad.
func TestUnlimitedSkipsCallout(t *testing.T) {
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			cfg := `{"rules": [{"name": "internal", "unlimited": true, "match": {"clients": ["10.0.0.0/8"]}}], "cluster": {"name": "dianad"}}`
			e := start(t, rn.vm(t), cfg)
			for i := 0; i < 3; i++ {
				r := e.from("10.1.2.3:1").request("/x")
				if r.action != types.ActionContinue || r.status != 0 || len(e.GetCalloutAttributesFromContext(r.id)) != 0 {
					t.Fatalf("exempt request %d: action %v status %d, want let through without a callout", i+1, r.action, r.status)
				}
			}
			if r := e.from("192.0.2.1:1").request("/x"); r.action != types.ActionPause || len(e.GetCalloutAttributesFromContext(r.id)) != 1 {
				t.Errorf("a request the rule does not match: action %v, want paused for its callout", r.action)
			}
			if u, a := e.counter(metricUnlimited), e.counter(metricAllowed); u != 3 || a != 3 {
				t.Errorf("unlimited %d allowed %d, want 3 and 3", u, a)
			}
		})
	}
}

// A failed callout (reset, timeout, non-2xx, unreadable body, refused token) follows
// on_failure: open lets the request through, closed replies failure_status, local decides the
// fallback rules in shared data.
func TestClusterFailure(t *testing.T) {
	fails := []struct {
		name string
		hdrs [][2]string
		body string
	}{
		{"reset", nil, ""},
		{"timeout", [][2]string{{":status", "504"}}, "upstream request timeout"},
		{"500", [][2]string{{":status", "500"}}, `{"error": "x"}`},
		{"garbage", [][2]string{{":status", "200"}}, `{"allowed": tru`},
	}
	for _, rn := range runners {
		for _, f := range fails {
			for _, policy := range []string{"open", "closed", "local"} {
				t.Run(rn.name+"/"+f.name+"/"+policy, func(t *testing.T) {
					e := start(t, rn.vm(t), clusterConfigWith(policy))
					var got []uint32
					for i := 0; i < 2; i++ {
						got = append(got, e.answer(e.request("/"), f.hdrs, f.body).status)
					}
					want := map[string][2]uint32{"open": {0, 0}, "closed": {503, 503}, "local": {0, 429}}[policy]
					if got[0] != want[0] || got[1] != want[1] {
						t.Errorf("on_failure %s: statuses %v, want %v", policy, got, want)
					}
					if n := e.counter(metricBackendError); n != 2 {
						t.Errorf("on_failure %s: backend errors %d, want 2", policy, n)
					}
				})
			}
		}
	}
	t.Run("wrong token", func(t *testing.T) {
		admin := dianad(t)
		e := start(t, &vmContext{}, strings.Replace(clusterConfigWith("closed"), "s3cret", "nope", 1))
		if r := e.forward(e.request("/"), admin); r.status != 503 || !strings.Contains(r.body, "unavailable") {
			t.Errorf("401 from dianad: %d %q, want the fail-closed 503", r.status, r.body)
		}
	})
}

// warnings returns the warnings logged since the last call. The emulator keeps log lines as
// strings pointing into the module's memory, which the compiled module reuses: they are read
// from what the emulator prints as each is logged instead.
func warnings(t *testing.T) func() []string {
	var buf bytes.Buffer
	log.SetOutput(&buf)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	return func() []string {
		var w []string
		for _, line := range strings.Split(buf.String(), "\n") {
			if _, msg, ok := strings.Cut(line, "proxy_warn_log: "); ok {
				w = append(w, msg)
			}
		}
		return w
	}
}

// A flood of failed callouts, or of shadow denials, logs the first at once and the rest as one
// summary line per tick, naming the client and the reason; in Go and compiled.
func TestLogSummaries(t *testing.T) {
	for _, rn := range runners {
		t.Run(rn.name+"/callouts", func(t *testing.T) {
			e := start(t, rn.vm(t), clusterConfigWith("open"))
			warns := warnings(t)
			for i := 0; i < 100; i++ {
				e.answer(e.request("/"), [][2]string{{":status", "500"}}, "")
			}
			if warns := warns(); len(warns) != 1 || !strings.Contains(warns[0], "dianad answered with status \"500\"; on_failure open, client 192.0.2.1") {
				t.Fatalf("after 100 failed callouts, warnings %q; want one naming the reason, the policy and the client", warns)
			}
			e.Tick()
			if warns := warns(); len(warns) != 2 || !strings.Contains(warns[1], "99 more in the last 10 s; the last: dianad answered") {
				t.Fatalf("after a tick, warnings %q; want a summary of the 99 others", warns)
			}
			e.Tick()
			if n := len(warns()); n != 2 {
				t.Errorf("a quiet tick logged: %d warnings", n)
			}
			if n := e.counter(metricBackendError); n != 100 {
				t.Errorf("%s = %d, want 100", metricBackendError, n)
			}
		})
		t.Run(rn.name+"/shadow", func(t *testing.T) {
			e := start(t, rn.vm(t), `{"rules": [{"name": "s", "action": "shadow", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`)
			warns := warnings(t)
			for i := 0; i < 50; i++ {
				e.request("/")
			}
			e.Tick()
			if warns := warns(); len(warns) != 2 || !strings.Contains(warns[0], `shadow rule would have denied: rule "s", client 192.0.2.1`) ||
				!strings.Contains(warns[1], "48 more") {
				t.Errorf("warnings %q; want the first of 49 shadow denials, then a summary of 48", warns)
			}
		})
	}
}
