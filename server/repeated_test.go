package server

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// The attack of issue 40: with key "victim" exhausted, "X-Api-Key: fresh" beside "X-Api-Key:
// victim" was answered 200 by the proxy (which forwarded both) and /v1/auth. A header the rules
// count by, or the consumer header, given twice is refused with 400 naming it, by the proxy,
// /v1/auth and /v1/check alike, and nothing reaches the upstream.
func TestRepeatedIdentityHeader(t *testing.T) {
	var reached atomic.Int64
	up := okUpstreamCounting(t, &reached)
	ts := startFile(t, header+`trusted_proxies: ["127.0.0.1/32"]
consumer_header: X-Consumer
upstreams:
  - {name: up, url: "`+up+`"}
rules:
  - name: per-key
    by: ["header:X-Api-Key"]
    limit: {algorithm: fixed_window, limit: 1, window: 1h}
  - name: per-consumer
    by: [consumer]
    limit: {algorithm: fixed_window, limit: 100, window: 1h}
`)
	send := func(method, url string, body io.Reader, h [][2]string) reply {
		req, _ := http.NewRequest(method, url, body)
		for _, kv := range h {
			req.Header.Add(kv[0], kv[1])
		}
		r, err := roundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := send("GET", ts.proxy+"/", nil, [][2]string{{"X-Api-Key", "victim"}}); r.status != 200 {
		t.Fatalf("the key's first request: %d %s", r.status, r.body)
	}
	if r := send("GET", ts.proxy+"/", nil, [][2]string{{"X-Api-Key", "victim"}}); r.status != 429 {
		t.Fatalf("the key's second request: %d, want 429", r.status)
	}
	auth := [][2]string{{"X-Original-URI", "/"}}
	for _, tc := range []struct {
		name    string
		headers [][2]string
		want    string
	}{
		{"key twice", [][2]string{{"X-Api-Key", "fresh"}, {"X-Api-Key", "victim"}}, "X-Api-Key"},
		{"key twice, fresh last", [][2]string{{"X-Api-Key", "victim"}, {"X-Api-Key", "fresh"}}, "X-Api-Key"},
		{"consumer twice", [][2]string{{"X-Api-Key", "k2"}, {"X-Consumer", "a"}, {"X-Consumer", "b"}}, "X-Consumer"},
	} {
		if r := send("GET", ts.proxy+"/", nil, tc.headers); r.status != 400 || !strings.Contains(r.body, tc.want) {
			t.Errorf("proxy, %s: %d %s, want 400 naming %s", tc.name, r.status, r.body, tc.want)
		}
		if r := send("GET", ts.admin+"/v1/auth", nil, append(tc.headers, auth...)); r.status != 400 || !strings.Contains(r.body, tc.want) {
			t.Errorf("/v1/auth, %s: %d %s, want 400 naming %s", tc.name, r.status, r.body, tc.want)
		}
		if tc.want == "X-Consumer" { // /v1/check takes the consumer in its own field
			continue
		}
		// A JSON object holds each name once: the gateway names the header in "repeated", or
		// spells it twice in two cases.
		for _, body := range []string{`"headers": {"X-Api-Key": "fresh"}, "repeated": ["x-api-key"]`,
			`"headers": {"X-Api-Key": "fresh", "x-api-key": "victim"}`} {
			r, res := postCheck(t, ts, `{"client_ip": "192.0.2.1", "path": "/", `+body+`}`, "")
			if res == nil || res.Allowed || res.Status != 400 || !strings.Contains(r.body, "X-Api-Key") {
				t.Errorf("/v1/check, %s: %d %s, want not allowed with status 400 naming X-Api-Key", body, r.status, r.body)
			}
		}
	}
	// The forward-auth headers themselves, given twice.
	if r := send("GET", ts.admin+"/v1/auth", nil, [][2]string{{"X-Api-Key", "k3"}, {"X-Forwarded-Uri", "/"}, {"X-Forwarded-Host", "a"}, {"X-Forwarded-Host", "a"}}); r.status != 400 || !strings.Contains(r.body, "X-Forwarded-Host") {
		t.Errorf("/v1/auth, X-Forwarded-Host twice: %d %s, want 400 naming it", r.status, r.body)
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("the upstream saw %d requests, want only the first", n)
	}
}

// okUpstreamCounting starts an upstream answering 200, counting its requests in n.
func okUpstreamCounting(t *testing.T, n *atomic.Int64) string {
	t.Helper()
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) })}
	return serveOn(t, &srv)
}
