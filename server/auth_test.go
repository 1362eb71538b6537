package server

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clientFrom is an HTTP client whose connections come from the loopback address ip
// (127.0.0.0/8 is all local), so that a test can be a trusted peer or an untrusted one.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitFor}
	return &http.Client{Timeout: waitFor, Transport: &http.Transport{DialContext: d.DialContext, Proxy: nil}}
}

// send sends method url with the headers h (several lines of one name allowed) and reads the reply.
func send(t *testing.T, c *http.Client, method, url string, h [][2]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range h {
		req.Header.Add(kv[0], kv[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// near reports whether the integer header value got is within a minute below want: seconds
// pass between the calls on a slow machine.
func near(got string, want int) bool {
	n, err := strconv.Atoi(got)
	return err == nil && n <= want && n >= want-60
}

func TestAuth(t *testing.T) {
	ts := startFile(t, header+`trusted_proxies: ["127.0.0.1"]
rules:
  - name: login
    match: {paths: ["/api/login"]}
    by: [ip]
    limit: {algorithm: token_bucket, rate: 2, period: 1h}
  - name: per-key
    match: {headers: {X-Api-Key: "*"}}
    by: ["header:X-Api-Key"]
    limit: {algorithm: token_bucket, rate: 1, period: 1h}
    reply: {status: 503, message: "slow down"}
  - name: per-route
    match: {paths: ["/routed"]}
    by: [route]
    limit: {algorithm: token_bucket, rate: 1, period: 1h}
`)
	gw, stranger := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	auth := ts.admin + "/v1/auth"
	const client = "198.51.100.1"
	denied := `{"message":"API rate limit exceeded","retry_after":1800}`
	type hdr = [][2]string
	steps := []struct {
		name   string
		c      *http.Client
		method string
		url    string
		h      hdr
		status int
		want   map[string]string // headers; "~N" is a number at most a minute below N; "" absent
		body   string            // "" for any
	}{
		{"nginx: allowed, // normalised", gw, "POST", auth, hdr{{"X-Original-URI", "/api//login"}, {"X-Original-Method", "POST"}, {"X-Forwarded-For", client}},
			200, map[string]string{"Ratelimit-Limit": "2", "Ratelimit-Remaining": "1", "Ratelimit-Reset": "~1800", "Retry-After": ""}, ""},
		{"Traefik: allowed, with a query", gw, "GET", auth, hdr{{"X-Forwarded-Uri", "/api/login?next=/"}, {"X-Forwarded-Method", "POST"}, {"X-Forwarded-For", client}},
			200, map[string]string{"Ratelimit-Limit": "2", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "~3600"}, ""},
		{"Caddy: the third is denied with the rule's status", gw, "GET", auth, hdr{{"X-Forwarded-Uri", "/x/../api/login"}, {"X-Forwarded-For", client}},
			429, map[string]string{"Ratelimit-Limit": "2", "Ratelimit-Remaining": "0", "Retry-After": "~1800", "X-Diana-Status": ""}, denied},
		{"nginx: denied as 403, the rule's status and body in headers", gw, "GET", auth + "?deny_status=403", hdr{{"X-Original-URI", "/api/login"}, {"X-Forwarded-For", client}},
			403, map[string]string{"Retry-After": "~1800", "X-Diana-Status": "429", "X-Diana-Body": strings.TrimSuffix(denied, "\n")}, denied},
		{"a forged X-Forwarded-For on the left gives no fresh count", gw, "GET", auth, hdr{{"X-Original-URI", "/api/login"}, {"X-Forwarded-For", "6.6.6.6, " + client}},
			429, map[string]string{"Retry-After": "~1800"}, ""},
		{"another client has its own count", gw, "GET", auth, hdr{{"X-Original-URI", "/api/login"}, {"X-Forwarded-For", "198.51.100.2"}},
			200, map[string]string{"Ratelimit-Remaining": "1"}, ""},
		{"untrusted peer: its forwarded URI and address are not believed", stranger, "GET", auth, hdr{{"X-Original-URI", "/api/login"}, {"X-Forwarded-For", "198.51.100.3"}},
			200, map[string]string{"Ratelimit-Limit": ""}, ""},
		{"header rule, huge key", gw, "GET", auth, hdr{{"X-Forwarded-Uri", "/"}, {"X-Api-Key", strings.Repeat("k", 100_000)}},
			200, map[string]string{"Ratelimit-Limit": "1", "Ratelimit-Remaining": "0"}, ""},
		{"header rule denies with 503", gw, "GET", auth, hdr{{"X-Forwarded-Uri", "/"}, {"X-Api-Key", strings.Repeat("k", 100_000)}},
			503, map[string]string{"Retry-After": "~3600"}, `{"message":"slow down","retry_after":3600}`},
		{"nginx: 503 told in X-Diana-Status", gw, "GET", auth + "?deny_status=401", hdr{{"X-Original-URI", "/"}, {"X-Api-Key", strings.Repeat("k", 100_000)}},
			401, map[string]string{"X-Diana-Status": "503", "X-Diana-Body": `{"message":"slow down","retry_after":3600}`}, ""},

		{"route named in the query", gw, "GET", auth + "?route=shop", hdr{{"X-Forwarded-Uri", "/routed"}}, 200,
			map[string]string{"Ratelimit-Limit": "1", "Ratelimit-Remaining": "0"}, ""},
		{"route: the second is denied", gw, "GET", auth + "?route=shop", hdr{{"X-Forwarded-Uri", "/routed"}}, 429, nil, ""},
		{"another route has its own count", gw, "GET", auth + "?route=blog", hdr{{"X-Forwarded-Uri", "/routed"}}, 200,
			map[string]string{"Ratelimit-Remaining": "0"}, ""},
		{"an untrusted peer's route is not believed", stranger, "GET", auth + "?route=fresh", nil, 200,
			map[string]string{"Ratelimit-Limit": ""}, ""},

		// Refused: 400 naming the problem.
		{"no original URI", gw, "GET", auth, hdr{{"X-Forwarded-For", client}}, 400, nil, `{"error":"neither X-Original-URI nor X-Forwarded-Uri tells the original URI: the gateway must send one"}`},
		{"a client's X-Original-URI beside Traefik's X-Forwarded-Uri", gw, "GET", auth, hdr{{"X-Original-URI", "/fresh"}, {"X-Forwarded-Uri", "/api/login"}},
			400, nil, `{"error":"X-Original-URI and X-Forwarded-Uri disagree (\"/fresh\", \"/api/login\"): a client's forged header beside the gateway's?"}`},
		{"a URI over 16 KiB", gw, "GET", auth, hdr{{"X-Original-URI", "/" + strings.Repeat("a", 16<<10)}}, 400, nil,
			`{"error":"the original URI is 16385 bytes long, above the bound of 16384"}`},
		{"unknown query parameter", gw, "GET", auth + "?deny=403", hdr{{"X-Original-URI", "/"}}, 400, nil,
			`{"error":"\"deny\": unknown query parameter; the parameters are token, deny_status and route"}`},
		{"deny_status nginx would not pass on", gw, "GET", auth + "?deny_status=429", hdr{{"X-Original-URI", "/"}}, 400, nil,
			`{"error":"deny_status: must be 401 or 403 (the statuses nginx's auth_request passes on), got \"429\""}`},
		{"deny_status twice", gw, "GET", auth + "?deny_status=403&deny_status=401", hdr{{"X-Original-URI", "/"}}, 400, nil,
			`{"error":"deny_status: given 2 times"}`},
	}
	for _, s := range steps {
		r := send(t, s.c, s.method, s.url, s.h)
		if r.status != s.status {
			t.Errorf("%s: status %d, want %d (%s)", s.name, r.status, s.status, r.body)
			continue
		}
		for k, want := range s.want {
			got := r.header.Get(k)
			if k == "X-Diana-Body" {
				if !sameBody(got, want) {
					t.Errorf("%s: %s = %q, want %q", s.name, k, got, want)
				}
			} else if w, ok := strings.CutPrefix(want, "~"); ok {
				n, _ := strconv.Atoi(w)
				if !near(got, n) {
					t.Errorf("%s: %s = %q, want about %s", s.name, k, got, w)
				}
			} else if got != want {
				t.Errorf("%s: %s = %q, want %q", s.name, k, got, want)
			}
		}
		if s.body != "" && !sameBody(strings.TrimSuffix(r.body, "\n"), s.body) {
			t.Errorf("%s: body %s, want %s", s.name, r.body, s.body)
		}
	}
	for problem, want := range map[string]float64{"untrusted_peer": 2, "bad_request": 6, "unauthorized": 0} {
		if got := metric(t, ts, `diana_forward_auth_problems_total{problem="`+problem+`"}`); got != want {
			t.Errorf("diana_forward_auth_problems_total{problem=%q} = %v, want %v", problem, got, want)
		}
	}
	for series, want := range map[string]float64{
		`diana_decisions_total{result="allowed",rule="login"}`:  3,
		`diana_decisions_total{result="denied",rule="login"}`:   3,
		`diana_decisions_total{result="denied",rule="per-key"}`: 2,
	} {
		if got := metric(t, ts, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// sameBody reports whether the denial body got is want, its retry_after at most a minute below
// want's.
func sameBody(got, want string) bool {
	gp, gv, _ := strings.Cut(got, `"retry_after":`)
	wp, wv, _ := strings.Cut(want, `"retry_after":`)
	if gp != wp || got == want {
		return got == want
	}
	n, err := strconv.Atoi(strings.TrimSuffix(wv, "}"))
	return err == nil && strings.HasSuffix(gv, "}") && near(strings.TrimSuffix(gv, "}"), n)
}

func TestAuthToken(t *testing.T) {
	ts := startFile(t, `version: 1
listen: ""
admin: {listen: "127.0.0.1:0", token: s3cret}
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 5, period: 1h}
`)
	for _, tt := range []struct {
		query  string
		status int
	}{{"", 401}, {"?token=nope", 401}, {"?token=s3cret", 200}, {"?token=s3cret&deny_status=403", 200}} {
		// The client's own Authorization header is forwarded by the gateway: it is no token.
		r := send(t, client, "GET", ts.admin+"/v1/auth"+tt.query, [][2]string{{"Authorization", "Bearer s3cret"}})
		if r.status != tt.status {
			t.Errorf("%q: status %d, want %d (%s)", tt.query, r.status, tt.status, r.body)
		}
	}
	if got := metric(t, ts, `diana_forward_auth_problems_total{problem="unauthorized"}`); got != 2 {
		t.Errorf("unauthorized problems = %v, want 2", got)
	}
}

// TestAuthDelay: a rule with action delay holds the answer, so that the gateway holds the request.
func TestAuthDelay(t *testing.T) {
	ts := startFile(t, header+`rules:
  - name: paced
    action: delay
    max_delay: 2s
    limit: {algorithm: token_bucket, rate: 4, period: 1s, burst: 1}
`)
	first := time.Now()
	if r := send(t, client, "GET", ts.admin+"/v1/auth", nil); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	start := time.Now()
	r := send(t, client, "GET", ts.admin+"/v1/auth", nil)
	if r.status != 200 {
		t.Fatalf("second: %d %s", r.status, r.body)
	}
	// The second of a bucket of 1 refilled every 250 ms waits out what is left of the 250 ms.
	if held, least := time.Since(start), 250*time.Millisecond-start.Sub(first); held < least {
		t.Errorf("the second answer came after %v, want at least %v", held, least)
	}
}

// client_ip_header: X-Real-IP, for a proxy that sets only X-Real-IP (nginx's proxy_set_header
// X-Real-IP $remote_addr with no X-Forwarded-For line): the client's own X-Forwarded-For, which
// such a proxy passes on, picks no address, in the proxy and in /v1/auth, and is counted. With
// the default (auto) the same requests pick their address, as before, and the disagreement is
// counted (issue 25, item 4).
func TestClientIPHeader(t *testing.T) {
	config := func(extra string) string {
		return header + `trusted_proxies: ["127.0.0.1/32"]
` + extra + `upstreams:
  - name: demo
    url: "demo:"
rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: fixed_window, limit: 2, window: 1h}
`
	}
	headers := func(i int) [][2]string { // the proxy's X-Real-IP, and the client's own X-Forwarded-For
		return [][2]string{{"X-Real-IP", "192.0.2.1"}, {"X-Forwarded-For", "6.0.0." + strconv.Itoa(i)}, {"X-Original-URI", "/x"}}
	}
	unexpected := func(ts *testServer, n int) {
		t.Helper()
		m := send(t, clientFrom("127.0.0.1"), "GET", ts.admin+"/metrics", nil)
		if want := `diana_client_address_header_problems_total{problem="unexpected"} ` + strconv.Itoa(n); !strings.Contains(m.body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	ts := startFile(t, config("client_ip_header: X-Real-IP\n"))
	for i, want := range []int{200, 200, 429} {
		if r := send(t, clientFrom("127.0.0.1"), "GET", ts.proxy+"/x", headers(i)); r.status != want {
			t.Errorf("proxy, X-Forwarded-For 6.0.0.%d: status %d, want %d", i, r.status, want)
		}
	}
	// 192.0.2.1 has spent its two, whatever X-Forwarded-For says.
	for i := range 3 {
		if r := send(t, clientFrom("127.0.0.1"), "GET", ts.admin+"/v1/auth", headers(10+i)); r.status != 429 {
			t.Errorf("/v1/auth, X-Forwarded-For 6.0.0.%d: status %d, want 429", 10+i, r.status)
		}
	}
	unexpected(ts, 6)

	ts = startFile(t, config(""))
	for i := range 3 {
		if r := send(t, clientFrom("127.0.0.1"), "GET", ts.proxy+"/x", headers(i)); r.status != 200 {
			t.Errorf("auto, X-Forwarded-For 6.0.0.%d: status %d, want 200", i, r.status)
		}
	}
	unexpected(ts, 3)
}

// The method as an upstream that upper-cases it sees it (issue 25, items 1 and 2): through the
// proxy, /v1/check and /v1/auth's X-Forwarded-Method, "post" spends a rule on POST and HEAD a
// rule on GET.
func TestMethodCase(t *testing.T) {
	ts := startFile(t, header+`trusted_proxies: ["127.0.0.1"]
upstreams:
  - name: demo
    url: "demo:"
rules:
  - name: writes
    match: {methods: [POST], paths: ["/w"]}
    limit: {algorithm: fixed_window, limit: 2, window: 1h}
  - name: reads
    match: {methods: [GET], paths: ["/r"]}
    limit: {algorithm: fixed_window, limit: 2, window: 1h}
`)
	check := func(method, path string) int {
		body := `{"client_ip": "192.0.2.1", "method": "` + method + `", "path": "` + path + `"}`
		r, err := do("POST", ts.admin+"/v1/check", "", strings.NewReader(body), "")
		if err != nil {
			t.Fatal(err)
		}
		var resp CheckResponse
		if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
			t.Fatalf("/v1/check: %v: %s", err, r.body)
		}
		if resp.Allowed {
			return 200
		}
		return resp.Status
	}
	auth := func(method, path string) int {
		return send(t, clientFrom("127.0.0.1"), "GET", ts.admin+"/v1/auth",
			[][2]string{{"X-Forwarded-Uri", path}, {"X-Forwarded-Method", method}}).status
	}
	proxy := func(method, path string) int {
		return send(t, clientFrom("127.0.0.1"), method, ts.proxy+path, nil).status
	}
	for _, s := range []struct {
		name   string
		ask    func(method, path string) int
		method string
		path   string
		want   int
	}{
		{"proxy", proxy, "HEAD", "/r", 200}, {"proxy", proxy, "GET", "/r", 200}, {"proxy", proxy, "HEAD", "/r", 429},
		{"check", check, "POST", "/w", 200}, {"check", check, "post", "/w", 200}, {"check", check, "Post", "/w", 429},
		{"check", check, "head", "/r", 429},
		{"auth", auth, "post", "/w", 429}, {"auth", auth, "head", "/r", 429},
	} {
		if got := s.ask(s.method, s.path); got != s.want {
			t.Errorf("%s %s %s: %d, want %d", s.name, s.method, s.path, got, s.want)
		}
	}
}
