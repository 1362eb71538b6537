package server

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// routeRequest is a request sent to the proxy in the routing tests.
type routeRequest struct {
	method string // GET when ""
	path   string // sent as written: escapes, double slashes and all
	host   string // the Host header; the proxy's address when ""
	header map[string]string
	from   string // the client's source address; 127.0.0.1 when ""
}

// send sends q to ts's proxy and returns the name of the upstream that served it (the demo
// upstream echoes its name), or the status when no upstream did.
func (q routeRequest) send(t *testing.T, ts *testServer) string {
	t.Helper()
	method := q.method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, ts.proxy+q.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if req.URL.RequestURI() != q.path {
		t.Fatalf("the client would send %q, not %q", req.URL.RequestURI(), q.path)
	}
	if q.host != "" {
		req.Host = q.host
	}
	for k, v := range q.header {
		req.Header.Set(k, v)
	}
	c := client
	if q.from != "" {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(q.from)}}
		tr := &http.Transport{DialContext: d.DialContext, Proxy: nil}
		defer tr.CloseIdleConnections()
		c = &http.Client{Timeout: waitFor, Transport: tr}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var echo struct{ Upstream string }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&echo) != nil {
		return http.StatusText(resp.StatusCode)
	}
	return echo.Upstream
}

// TestUpstreamMatch routes by each field of an upstream's match, through the running server: a
// request that matches goes to the upstream "picked", one that does not falls through to
// "fallback". An upstream's match reads the request as the rules do: its client address through
// trusted_proxies, its consumer, its normal path.
func TestUpstreamMatch(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings string // top-level settings beside the upstreams
		match    string
		yes, no  routeRequest
	}{
		{
			name:  "methods",
			match: `{methods: [POST]}`,
			yes:   routeRequest{method: "POST", path: "/x"},
			no:    routeRequest{method: "GET", path: "/x"},
		},
		{
			name:  "paths",
			match: `{paths: ["/api/*/orders"]}`,
			yes:   routeRequest{path: "/api/7/orders"},
			no:    routeRequest{path: "/api/7/items"},
		},
		{
			// The path is matched in its normal form, as the rules match it.
			name:  "paths, normalised",
			match: `{paths: ["/api/login"]}`,
			yes:   routeRequest{path: "//api/./x/..//log%69n/;jsessionid=1"},
			no:    routeRequest{path: "/api/login2"},
		},
		{
			name:  "paths, normalised query",
			match: `{paths: ["/api/**"], not: [{paths: ["/api/login"]}]}`,
			yes:   routeRequest{path: "/api/x?a=b"},
			no:    routeRequest{path: "/api//login/?a=b"},
		},
		{
			name:  "hosts",
			match: `{hosts: ["*.example.com"]}`,
			yes:   routeRequest{path: "/x", host: "API.example.com:8080"},
			no:    routeRequest{path: "/x", host: "example.com"},
		},
		{
			name:  "headers",
			match: `{headers: {X-Tenant: blue}}`,
			yes:   routeRequest{path: "/x", header: map[string]string{"X-Tenant": "blue"}},
			no:    routeRequest{path: "/x", header: map[string]string{"X-Tenant": "green"}},
		},
		{
			name:  "headers, present",
			match: `{headers: {X-Tenant: "*"}}`,
			yes:   routeRequest{path: "/x", header: map[string]string{"X-Tenant": "green"}},
			no:    routeRequest{path: "/x"},
		},
		{
			// No trusted proxies: the peer is the client, whatever X-Forwarded-For says.
			name:  "clients, the peer",
			match: `{clients: ["127.0.0.1/32"]}`,
			yes:   routeRequest{path: "/x"},
			no:    routeRequest{path: "/x", from: "127.0.0.2", header: map[string]string{"X-Forwarded-For": "127.0.0.1"}},
		},
		{
			name:     "clients, through a trusted proxy",
			settings: `trusted_proxies: ["127.0.0.1"]`,
			match:    `{clients: ["192.0.2.0/24", "2001:db8::/32"]}`,
			yes:      routeRequest{path: "/x", header: map[string]string{"X-Forwarded-For": "192.0.2.7"}},
			no:       routeRequest{path: "/x", header: map[string]string{"X-Forwarded-For": "192.0.2.7, 198.51.100.1"}},
		},
		{
			name:     "consumers",
			settings: "trusted_proxies: [\"127.0.0.1\"]\nconsumer_header: X-Consumer",
			match:    `{consumers: [alice]}`,
			yes:      routeRequest{path: "/x", header: map[string]string{"X-Consumer": "alice"}},
			no:       routeRequest{path: "/x", header: map[string]string{"X-Consumer": "bob"}},
		},
		{
			// The consumer header is believed only from a trusted proxy.
			name:     "consumers, untrusted peer",
			settings: "consumer_header: X-Consumer",
			match:    `{not: [{consumers: [alice]}]}`,
			yes:      routeRequest{path: "/x", header: map[string]string{"X-Consumer": "alice"}},
			// no request is alice's here: no request falls through
		},
		{
			name:     "not",
			settings: `trusted_proxies: ["127.0.0.1"]`,
			match:    `{paths: ["/api/**"], not: [{clients: ["10.0.0.0/8"]}, {methods: [DELETE]}]}`,
			yes:      routeRequest{path: "/api/x", header: map[string]string{"X-Forwarded-For": "192.0.2.7"}},
			no:       routeRequest{path: "/api/x", header: map[string]string{"X-Forwarded-For": "10.1.2.3"}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := startFile(t, header+c.settings+`
upstreams:
  - name: picked
    url: "demo:"
    match: `+c.match+`
  - name: fallback
    url: "demo:"
`)
			if got := c.yes.send(t, ts); got != "picked" {
				t.Errorf("%+v: served by %q, want picked", c.yes, got)
			}
			if c.no.path == "" {
				return
			}
			if got := c.no.send(t, ts); got != "fallback" {
				t.Errorf("%+v: served by %q, want fallback", c.no, got)
			}
		})
	}
}

// TestRouteDimension: the route a rule counts by is the upstream the request was routed to,
// including when the upstream was chosen by the request's client address.
func TestRouteDimension(t *testing.T) {
	ts := startFile(t, header+`trusted_proxies: ["127.0.0.1"]
upstreams:
  - name: inside
    url: "demo:"
    match: {clients: ["10.0.0.0/8"]}
  - name: outside
    url: "demo:"
rules:
  - name: inside-only
    by: [global]
    match: {clients: ["10.0.0.0/8"]}
    limit: {algorithm: fixed_window, limit: 1, window: 1h}
  - name: per-route
    by: [route]
    limit: {algorithm: fixed_window, limit: 2, window: 1h}
`)
	in := routeRequest{path: "/x", header: map[string]string{"X-Forwarded-For": "10.0.0.1"}}
	out := routeRequest{path: "/x", header: map[string]string{"X-Forwarded-For": "192.0.2.1"}}
	for i, want := range []string{"inside", http.StatusText(http.StatusTooManyRequests)} {
		if got := in.send(t, ts); got != want {
			t.Errorf("request %d from 10.0.0.1: %q, want %q", i+1, got, want)
		}
	}
	// The inside route took one request (the second was refused by inside-only, and took
	// nothing from per-route); the outside route has its own two.
	for i, want := range []string{"outside", "outside", http.StatusText(http.StatusTooManyRequests)} {
		if got := out.send(t, ts); got != want {
			t.Errorf("request %d from 192.0.2.1: %q, want %q", i+1, got, want)
		}
	}
}

// TestReloadKeepsSnapshot: a request held by a delay rule when a reload replaces the upstreams
// and the rules finishes as it started: forwarded to the upstream it was routed to, with its
// rule's headers, while requests that start after the reload see the new config.
func TestReloadKeepsSnapshot(t *testing.T) {
	conf := func(upstream string, limit int) string {
		n := strconv.Itoa(limit)
		return header + `trusted_proxies: ["127.0.0.1"]
upstreams:
  - name: ` + upstream + `
    url: "demo:"
rules:
  - name: held
    by: [ip]
    action: delay
    max_delay: 10s
    limit: {algorithm: token_bucket, rate: ` + n + `, period: ` + n + `s, burst: ` + n + `}
`
	}
	ts := startFile(t, conf("old", 1))
	const client = "192.0.2.1"
	start := time.Now() // the second request's token comes a second after the first request
	if r := get(t, ts.proxy+"/x", client); r.status != 200 {
		t.Fatalf("first request: %d %s", r.status, r.body)
	}
	type result struct {
		r   reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := do(http.MethodGet, ts.proxy+"/x", client, nil, "")
		done <- result{r, err}
	}()
	// The second request is held for about a second (a token a second). Meanwhile the config
	// changes: another upstream, a rule that allows 5 requests every 5 seconds.
	time.Sleep(200 * time.Millisecond)
	writeFile(t, ts.file, conf("new", 5))
	ts.Reload()
	eventually(t, "the new config applies", func() bool {
		return strings.Contains(get(t, ts.proxy+"/x", "192.0.2.99").body, `"upstream":"new"`)
	})
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if time.Since(start) < 900*time.Millisecond {
		t.Errorf("the request was held %v, want about 1s", time.Since(start))
	}
	if res.r.status != 200 || !strings.Contains(res.r.body, `"upstream":"old"`) {
		t.Errorf("held request: %d %s, want 200 from upstream old", res.r.status, res.r.body)
	}
	if got := res.r.header.Get("RateLimit-Limit"); got != "1" {
		t.Errorf("held request: RateLimit-Limit %q, want the old rule's 1", got)
	}
}
