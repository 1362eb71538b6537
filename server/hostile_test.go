package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/rules"
)

// hostileConfig is dianad in front of its demo upstream, counting by every dimension a client
// controls, each allowing one request: in Redis (cluster mode, under prefix) and in process
// memory (per-key).
func hostileConfig(redisAddr, prefix string) string {
	return header + `trusted_proxies: ["127.0.0.1/32", "10.0.0.0/8"]
consumer_header: X-Consumer
upstreams:
  - name: demo
    url: "demo:"
redis:
  addrs: ["` + redisAddr + `"]
  prefix: "` + prefix + `"
  timeout: ` + exactTimeout + `
rules:
  - name: per-ip
    by: [ip]
    mode: cluster
    on_error: closed
    limit: {algorithm: fixed_window, limit: 1, window: ` + forever + `}
  - name: per-device
    by: [device, host]
    mode: cluster
    on_error: closed
    limit: {algorithm: sliding_log, limit: 1, window: 1h}
  - name: per-consumer
    by: [consumer, path]
    mode: cluster
    on_error: closed
    limit: {algorithm: token_bucket, rate: 1, period: 1h}
  - name: per-key
    by: ["header:X-Api-Key", path]
    limit: {algorithm: sliding_window, limit: 1, window: 1h}
`
}

// rawHTTP sends req as written on a new connection to the host:port of url and returns the
// response's status and body; the request is written while the response is read, so that a
// server that answers before reading it all (431) is heard.
func rawHTTP(t *testing.T, url, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitFor))
	go io.WriteString(c, req) // its error shows as the response's
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp.StatusCode, string(b)
}

// TestHostileRequests sends hostile requests to dianad's proxy and decision API over real
// listeners, deciding in a real redis-server: each gets a clear status (200 or 429 from the
// limits, 400 or 431 from net/http or the API, never a 5xx), and every key dianad writes to
// Redis stays small, whatever the size of the values it counts by. net/http answers 431 itself
// to a header block over http.DefaultMaxHeaderBytes (1 MiB), and 400 to NUL or control bytes in
// header values or the request line.
func TestHostileRequests(t *testing.T) {
	rs := redistest.Start(t)
	req := func(target string, headers ...string) string {
		return "GET " + target + " HTTP/1.1\r\nHost: example.com\r\n" + strings.Join(headers, "") + "Connection: close\r\n\r\n"
	}
	hops := make([]string, 3000)
	for i := range hops {
		hops[i] = "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250+1)
	}
	kb100 := strings.Repeat("v", 100<<10)
	mb2 := strings.Repeat("x", 2<<20)
	for i, tc := range []struct {
		name     string
		req      string
		statuses []int // of the same request sent again
	}{
		{"header block over MaxHeaderBytes", req("/", "X-Filler: "+mb2+"\r\n"), []int{431}},
		{"request line over MaxHeaderBytes", req("/" + mb2), []int{431}},
		{"100 KB device and host", req("/", "X-Device-Id: "+kb100+"\r\n", "X-Forwarded-For: 203.0.113.1\r\n"), []int{200, 429}},
		{"100 KB api key and path", req("/"+kb100, "X-Api-Key: "+kb100+"\r\n"), []int{200, 429}},
		{"100 KB consumer", req("/", "X-Consumer: "+kb100+"\r\n"), []int{200, 429}},
		{"braces, bars and percents in values", req("/}{|%25", "X-Device-Id: }}{{|%\r\n", "X-Consumer: {x}\r\n"), []int{200, 429}},
		{"invalid UTF-8 in header values", req("/", "X-Device-Id: \xff\xfe\r\n", "X-Consumer: \xc3\x28\r\n"), []int{200, 429}},
		{"invalid UTF-8 in the path", req("/\xff\xfe", "X-Api-Key: k\r\n"), []int{200, 429}},
		{"NUL in a header value", req("/", "X-Device-Id: a\x00b\r\n"), []int{400}},
		{"control byte in a header value", req("/", "X-Consumer: a\x01b\r\n"), []int{400}},
		{"NUL in the path", req("/a\x00b"), []int{400}},
		{"3000 X-Forwarded-For hops", req("/", "X-Forwarded-For: 203.0.113.9, "+strings.Join(hops, ", ")+"\r\n"), []int{200, 429}},
		{"malformed X-Forwarded-For entries", req("/", "X-Forwarded-For: 203.0.113.7, 999.1.1.1, unknown, 1.2.3\r\n"), []int{200, 429}},
		{"X-Forwarded-For comma storm", req("/", "X-Forwarded-For: "+strings.Repeat(",", 500_000)+"\r\n"), []int{200, 429}},
		{"IPv6 zone in X-Forwarded-For", req("/", "X-Forwarded-For: [fe80::1%eth0]:443\r\n"), []int{200, 429}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A server and a key prefix of its own: each case starts with fresh counts.
			ts := startFile(t, hostileConfig(rs.Addr, "h"+strconv.Itoa(i)+":"))
			for j, want := range tc.statuses {
				if status, body := rawHTTP(t, ts.proxy, tc.req); status != want {
					t.Fatalf("request %d: status %d (%.200q), want %d", j+1, status, body, want)
				}
			}
		})
	}

	t.Run("decision API", func(t *testing.T) {
		ts := startFile(t, hostileConfig(rs.Addr, "api:"))
		post := func(body string) string {
			return "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
				strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
		}
		big := strings.Repeat("d", 60<<10)
		for _, c := range []struct {
			body string
			want int
		}{
			{`{"client_ip": "fe80::1%eth0", "headers": {"X-Device-Id": "` + big + `"}}`, 200},
			{`{"client_ip": "203.0.113.5", "path": "/\u0000\ud800", "headers": {"x-api-key": "\u0000"}}`, 200},
			{"{\"consumer\": \"\xff\xfe\", \"path\": \"/\"}", 200},
			{`{"client_ip": "999.1.1.1"}`, 400},
			{`{"client_ip": "[::1]:80"}`, 400},
			{`{"headers": {"X-Device-Id": 1}}`, 400},
			{`{"client_ip": "192.0.2.1", "path": "` + strings.Repeat("p", 70<<10) + `"}`, 400},
			{`[` + strings.Repeat(`[`, 10000) + strings.Repeat(`]`, 10000) + `]`, 400},
		} {
			if status, body := rawHTTP(t, ts.admin, post(c.body)); status != c.want {
				t.Errorf("POST %.100q: status %d (%.200q), want %d", c.body, status, body, c.want)
			}
		}
	})

	// Every key in Redis is its prefix, the identity in a hash tag, and at most the identity
	// again (when it holds a '}'): an identity is a rule name and up to two parts of at most
	// 1 + 3 × 128 bytes each, so no key exceeds 4 + 2 × (64 + 2 × 385) bytes.
	const maxKey = 4 + 2*(64+2*(1+3*128))
	ctx := context.Background()
	n := 0
	iter := rs.Client().Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
		if k := iter.Val(); len(k) > maxKey {
			t.Errorf("Redis key of %d bytes, over %d: %.200q", len(k), maxKey, k)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("no keys in Redis: the cluster rules decided nothing")
	}
}

// TestPathSpellings: every spelling of /api/login, sent through the proxy on request lines
// written by hand, and to POST /v1/check, counts against one rule on /api/login.
func TestPathSpellings(t *testing.T) {
	n := len(algotest.LoginSpellings)
	ts := startFile(t, header+`escaped_slashes: decode
upstreams:
  - name: demo
    url: "demo:"
rules:
  - name: login
    match: {paths: [/api/login]}
    by: [ip, path]
    limit: {algorithm: fixed_window, limit: `+strconv.Itoa(n)+`, window: `+forever+`}
`)
	for _, p := range algotest.LoginSpellings {
		if status, body := rawHTTP(t, ts.proxy, "GET "+p+" HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"); status == 429 || status >= 500 {
			t.Fatalf("proxy, %s: status %d (%s)", p, status, body)
		}
	}
	if status, _ := rawHTTP(t, ts.proxy, "GET /api/login HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"); status != 429 {
		t.Errorf("proxy: after every spelling of /api/login, status %d, want 429: a spelling was not counted", status)
	}
	check := func(p string) (allowed bool) {
		body, _ := json.Marshal(map[string]string{"client_ip": "192.0.2.9", "method": "GET", "path": p})
		r, err := do("POST", ts.admin+"/v1/check", "", bytes.NewReader(body), "")
		if err != nil || r.status != 200 {
			t.Fatalf("/v1/check %s: %v, status %d", p, err, r.status)
		}
		var resp CheckResponse
		if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Allowed
	}
	for _, p := range algotest.LoginSpellings {
		if !check(p) {
			t.Fatalf("/v1/check, %s: refused before the limit", p)
		}
	}
	if check("/api/login") {
		t.Errorf("/v1/check: after every spelling of /api/login, admitted: a spelling was not counted")
	}
}

// A control character in the path, raw or escaped, is refused with 400 by the proxy, /v1/check
// and /v1/auth; strip_trailing_dots_spaces makes /api/login. and /api/login%20 count as
// /api/login (issue 25, item 8).
func TestPathControlAndTrailingDots(t *testing.T) {
	ts := startFile(t, header+`trusted_proxies: ["127.0.0.1"]
strip_trailing_dots_spaces: true
upstreams:
  - name: demo
    url: "demo:"
rules:
  - name: login
    match: {paths: [/api/login]}
    by: [ip]
    limit: {algorithm: fixed_window, limit: 1, window: `+forever+`}
`)
	for _, p := range []string{"/api/login%00", "/api/login%09", "/api/%0d%0a/login", "/api/login%7F", "/api/login;x=%00"} {
		if status, body := rawHTTP(t, ts.proxy, "GET "+p+" HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"); status != 400 ||
			!strings.Contains(body, rules.BadPathMessage) {
			t.Errorf("proxy, %s: status %d (%s), want 400", p, status, body)
		}
		r := send(t, clientFrom("127.0.0.1"), "GET", ts.admin+"/v1/auth", [][2]string{{"X-Original-URI", p}})
		if r.status != 400 || !strings.Contains(r.body, rules.BadPathMessage) {
			t.Errorf("/v1/auth, %s: status %d (%s), want 400", p, r.status, r.body)
		}
	}
	for _, p := range []string{"/api/login\x00", "/api/login\t", "/api/login%00"} {
		body, _ := json.Marshal(map[string]string{"client_ip": "192.0.2.9", "method": "GET", "path": p})
		r, err := do("POST", ts.admin+"/v1/check", "", bytes.NewReader(body), "")
		var resp CheckResponse
		if err == nil {
			err = json.Unmarshal([]byte(r.body), &resp)
		}
		if err != nil || resp.Allowed || resp.Status != 400 {
			t.Errorf("/v1/check %q: %v, %s; want status 400 in the answer", p, err, r.body)
		}
	}
	for i, p := range []string{"/api/login", "/api/login.", "/api/login%2e", "/api/login%20", "/api/login./"} {
		want := 429
		if i == 0 {
			want = 200
		}
		if status, body := rawHTTP(t, ts.proxy, "GET "+p+" HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"); status != want {
			t.Errorf("proxy, %s: status %d (%s), want %d", p, status, body, want)
		}
	}
}
