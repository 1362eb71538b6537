package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/diana-gw/diana/internal/gatewaytest"
	"github.com/diana-gw/diana/shared/rules"
)

// The shipped gateway examples, run in the real gateways (nginx, Caddy) in front of dianad's
// /v1/auth and a test upstream: what a client of the gateway sees.

// gatewayRules is dianad's config for the gateway tests. The gateways connect from 127.0.0.1,
// the only trusted proxy; the test's clients connect from 127.0.0.2 and 127.0.0.3.
const gatewayRules = `trusted_proxies: ["127.0.0.1"]
escaped_slashes: reject
consumer_header: X-Consumer-Id
rules:
  - name: per-consumer
    match: {paths: ["/c"]}
    by: [consumer]
    limit: {algorithm: token_bucket, rate: 2, period: 1h}
  - name: login
    match: {paths: ["/api/login"]}
    by: [ip]
    limit: {algorithm: token_bucket, rate: 3, period: 1h}
  - name: writes
    match: {methods: [POST], paths: ["/api/items"]}
    by: [ip]
    limit: {algorithm: token_bucket, rate: 1, period: 1h}
  - name: tenant
    match: {hosts: ["api.example.com"], paths: ["/tenant"]}
    limit: {algorithm: token_bucket, rate: 1, period: 1h}
  - name: per-key
    match: {headers: {X-Api-Key: "*"}}
    by: ["header:X-Api-Key"]
    limit: {algorithm: token_bucket, rate: 1, period: 1h}
    reply: {status: 503, message: "slow down"}
`

// example reads a shipped example and makes the replacements (old, new, ...), each of which
// must apply: a changed example fails the test rather than escaping it.
func example(t *testing.T, name string, oldnew ...string) string {
	t.Helper()
	b, err := os.ReadFile("../examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i < len(oldnew); i += 2 {
		if !strings.Contains(s, oldnew[i]) {
			t.Fatalf("examples/%s no longer holds %q", name, oldnew[i])
		}
		s = strings.ReplaceAll(s, oldnew[i], oldnew[i+1])
	}
	return s
}

// gatewaySetup starts dianad and the test upstream (which counts the requests it serves) and
// returns dianad and the upstream's address (host:port).
func gatewaySetup(t *testing.T) (ts *testServer, upstream string, served *atomic.Int64) {
	ts = startFile(t, header+gatewayRules)
	served = &atomic.Int64{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		io.WriteString(w, "upstream "+r.Method+" "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	return ts, strings.TrimPrefix(up.URL, "http://"), served
}

func TestNginxExample(t *testing.T) {
	ts, upstream, served := gatewaySetup(t)
	port := gatewaytest.Nginx(t, func(port int) string {
		return example(t, "nginx.conf", "127.0.0.1:9090", strings.TrimPrefix(ts.admin, "http://"),
			"127.0.0.1:8000", upstream, "listen 8080;", "listen 127.0.0.1:"+strconv.Itoa(port)+";")
	})
	gatewaySteps(t, "http://127.0.0.1:"+strconv.Itoa(port), served)
	failsClosed(t, ts, "http://127.0.0.1:"+strconv.Itoa(port), served, http.StatusInternalServerError)
}

func TestCaddyExample(t *testing.T) {
	ts, upstream, served := gatewaySetup(t)
	port := gatewaytest.Caddy(t, func(port int) string {
		return example(t, "Caddyfile", "127.0.0.1:9090", strings.TrimPrefix(ts.admin, "http://"),
			"127.0.0.1:8000", upstream, ":8080 {", "http://:"+strconv.Itoa(port)+" {\n\tbind 127.0.0.1")
	})
	gatewaySteps(t, "http://127.0.0.1:"+strconv.Itoa(port), served)
	failsClosed(t, ts, "http://127.0.0.1:"+strconv.Itoa(port), served, http.StatusBadGateway)
}

// failsClosed stops dianad and checks that the gateway then refuses requests with status, and
// sends none to the upstream.
func failsClosed(t *testing.T, ts *testServer, base string, served *atomic.Int64, status int) {
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	before := served.Load()
	r := send(t, clientFrom("127.0.0.4"), "GET", base+"/public", nil)
	if r.status != status || served.Load() != before {
		t.Errorf("dianad stopped: status %d, upstream served %d more; want %d and none", r.status, served.Load()-before, status)
	}
}

// gatewaySteps sends requests through the gateway at base and checks what its clients see, and
// that the upstream served exactly the allowed ones.
func gatewaySteps(t *testing.T, base string, served *atomic.Int64) {
	a, b := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	denied := func(retry int) string {
		return `{"message":"API rate limit exceeded","retry_after":` + strconv.Itoa(retry) + `}`
	}
	type hdr = [][2]string
	steps := []struct {
		name   string
		c      *http.Client
		method string
		path   string
		h      hdr // "Host" sets the request's host
		status int
		want   map[string]string // headers; "~N": a number at most a minute below N; "": absent
		body   string            // an allowed request's is the upstream's
	}{
		{"allowed, // normalised", a, "GET", "/api//login", nil, 200,
			map[string]string{"Ratelimit-Limit": "3", "Ratelimit-Remaining": "2", "Ratelimit-Reset": "~1200", "Retry-After": ""}, ""},
		{"allowed, with a query", a, "GET", "/api/login?next=/home", nil, 200, map[string]string{"Ratelimit-Remaining": "1"}, ""},
		{"allowed, /./ normalised", a, "GET", "/api/./login", nil, 200, map[string]string{"Ratelimit-Remaining": "0"}, ""},
		{"the fourth is denied", a, "GET", "/api/login", nil, 429,
			map[string]string{"Ratelimit-Limit": "3", "Ratelimit-Remaining": "0", "Retry-After": "~1200", "X-Diana-Status": "", "X-Diana-Body": ""}, denied(1200)},
		{"a forged X-Forwarded-For gives no fresh count", a, "GET", "/api/login", hdr{{"X-Forwarded-For", "203.0.113.50"}}, 429,
			map[string]string{"Retry-After": "~1200"}, ""},
		{"nor does a forged X-Real-IP", a, "GET", "/api/login", hdr{{"X-Real-IP", "203.0.113.51"}}, 429, nil, ""},
		{"nor forged original-URI headers", a, "GET", "/api/login", hdr{{"X-Forwarded-Uri", "/elsewhere"},
			{"X-Original-URI", "/elsewhere"}, {"X-Original-Method", "PUT"}, {"X-Forwarded-Method", "PUT"}}, 429, nil, ""},
		{"another client has its own count", b, "GET", "/api/login", nil, 200, map[string]string{"Ratelimit-Remaining": "2"}, ""},
		{"no rule applies: no headers", b, "GET", "/public", nil, 200, map[string]string{"Ratelimit-Limit": ""}, ""},
		{"the original method: POST counts", b, "POST", "/api/items", nil, 200, map[string]string{"Ratelimit-Remaining": "0"}, ""},
		{"the original method: the second POST is denied", b, "POST", "/api/items", nil, 429, nil, denied(3600)},
		{"the original method: GET does not count", b, "GET", "/api/items", nil, 200, map[string]string{"Ratelimit-Limit": ""}, ""},
		{"the original host counts", b, "GET", "/tenant", hdr{{"Host", "api.example.com"}}, 200, map[string]string{"Ratelimit-Limit": "1"}, ""},
		{"the original host: denied", b, "GET", "/tenant", hdr{{"Host", "api.example.com"}}, 429, nil, ""},
		{"another host does not count", b, "GET", "/tenant", hdr{{"Host", "www.example.com"}}, 200, map[string]string{"Ratelimit-Limit": ""}, ""},
		{"the client's headers reach dianad", b, "GET", "/k", hdr{{"X-Api-Key", "k1"}}, 200, map[string]string{"Ratelimit-Limit": "1"}, ""},
		{"an encoded slash refused (escaped_slashes: reject)", b, "GET", "/api%2Flogin", nil, 400,
			map[string]string{"Retry-After": ""}, `{"message":"` + rules.BadPathMessage + `","retry_after":null}`},
		{"the rule's status and message", b, "GET", "/k", hdr{{"X-Api-Key", "k1"}}, 503,
			map[string]string{"Retry-After": "~3600"}, `{"message":"slow down","retry_after":3600}`},
		// The gateway owns the consumer header (issue 25, item 3): a client's own is cleared, so
		// the requests count by the client's address, and a fresh value gives no fresh count.
		{"a client's consumer header: counted", a, "GET", "/c", hdr{{"X-Consumer-Id", "c1"}}, 200, map[string]string{"Ratelimit-Remaining": "1"}, ""},
		{"another value: the same count", a, "GET", "/c", hdr{{"X-Consumer-Id", "c2"}}, 200, map[string]string{"Ratelimit-Remaining": "0"}, ""},
		{"a third value: denied", a, "GET", "/c", hdr{{"X-Consumer-Id", "c3"}}, 429, nil, ""},
		{"nor a forged Forwarded", a, "GET", "/c", hdr{{"X-Consumer-Id", "c4"}, {"Forwarded", "for=203.0.113.9"}}, 429, nil, ""},
	}
	allowed := 0
	for _, s := range steps {
		req, err := http.NewRequest(s.method, base+s.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range s.h {
			if kv[0] == "Host" {
				req.Host = kv[1]
			} else {
				req.Header.Add(kv[0], kv[1])
			}
		}
		resp, err := s.c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if resp.StatusCode != s.status {
			t.Errorf("%s: status %d, want %d (%s)", s.name, resp.StatusCode, s.status, body)
			continue
		}
		for k, want := range s.want {
			got := resp.Header.Get(k)
			if w, ok := strings.CutPrefix(want, "~"); ok {
				n, _ := strconv.Atoi(w)
				if !near(got, n) {
					t.Errorf("%s: %s = %q, want about %s", s.name, k, got, w)
				}
			} else if got != want {
				t.Errorf("%s: %s = %q, want %q", s.name, k, got, want)
			}
		}
		want := s.body
		if s.status == 200 {
			allowed++
			want = "upstream " + s.method + " " + strings.SplitN(s.path, "?", 2)[0]
		}
		if got := strings.TrimSuffix(string(body), "\n"); want != "" && !sameBody(got, want) {
			t.Errorf("%s: body %q, want %q", s.name, got, want)
		}
	}
	if got := served.Load(); got != int64(allowed) {
		t.Errorf("the upstream served %d requests, want the %d allowed", got, allowed)
	}
}

// TestTraefikExample checks examples/traefik.yml against dianad, field by field: Traefik is not
// in Debian's packages, so no test runs it in Traefik. Its fields are decoded strictly (a
// misspelt one fails), the router runs the cleaning middleware before forwardAuth, and
// forwardAuth asks /v1/auth, sets the forwarded headers itself and copies the headers dianad
// answers an allowed request with.
func TestTraefikExample(t *testing.T) {
	type middleware struct {
		Headers *struct {
			CustomRequestHeaders map[string]string `yaml:"customRequestHeaders"`
		} `yaml:"headers"`
		ForwardAuth *struct {
			Address             string   `yaml:"address"`
			TrustForwardHeader  bool     `yaml:"trustForwardHeader"`
			AuthResponseHeaders []string `yaml:"authResponseHeaders"`
		} `yaml:"forwardAuth"`
	}
	var doc struct {
		HTTP struct {
			Routers map[string]struct {
				EntryPoints []string `yaml:"entryPoints"`
				Rule        string   `yaml:"rule"`
				Middlewares []string `yaml:"middlewares"`
				Service     string   `yaml:"service"`
			} `yaml:"routers"`
			Middlewares map[string]middleware `yaml:"middlewares"`
			Services    map[string]struct {
				LoadBalancer struct {
					Servers []struct {
						URL string `yaml:"url"`
					} `yaml:"servers"`
				} `yaml:"loadBalancer"`
			} `yaml:"services"`
		} `yaml:"http"`
	}
	dec := yaml.NewDecoder(strings.NewReader(example(t, "traefik.yml")))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("examples/traefik.yml: %v", err)
	}
	app := doc.HTTP.Routers["app"]
	if want := []string{"diana-clean", "diana"}; !reflect.DeepEqual(app.Middlewares, want) {
		t.Errorf("router app: middlewares %v, want %v", app.Middlewares, want)
	}
	if _, ok := doc.HTTP.Services[app.Service]; !ok {
		t.Errorf("router app: no service %q", app.Service)
	}
	clean := doc.HTTP.Middlewares["diana-clean"].Headers
	removed := []string{"X-Original-URI", "X-Original-Method", "Forwarded", "X-Consumer-Id"}
	if clean == nil || len(clean.CustomRequestHeaders) != len(removed) ||
		slices.ContainsFunc(removed, func(h string) bool { v, ok := clean.CustomRequestHeaders[h]; return !ok || v != "" }) {
		t.Errorf("diana-clean must remove %q (empty values), got %+v", removed, clean)
	}
	fa := doc.HTTP.Middlewares["diana"].ForwardAuth
	if fa == nil {
		t.Fatal("no forwardAuth middleware named diana")
	}
	if fa.Address != "http://127.0.0.1:9090/v1/auth" || fa.TrustForwardHeader {
		t.Errorf("forwardAuth: address %q, trustForwardHeader %v; want dianad's /v1/auth, false", fa.Address, fa.TrustForwardHeader)
	}
	// The headers of an allowed request under a rule in the default style, as dianad sends them.
	ts := startFile(t, header+`trusted_proxies: ["127.0.0.1"]
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 5, period: 1h}
`)
	r := send(t, client, "GET", ts.admin+"/v1/auth", [][2]string{{"X-Forwarded-Uri", "/"}})
	var sent []string
	for k := range r.header {
		if strings.HasPrefix(k, "Ratelimit") {
			sent = append(sent, k)
		}
	}
	sort.Strings(sent)
	if !reflect.DeepEqual(fa.AuthResponseHeaders, sent) {
		t.Errorf("authResponseHeaders %v, want the headers dianad sends: %v", fa.AuthResponseHeaders, sent)
	}
}
