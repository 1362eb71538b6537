package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diana-gw/diana/examples"
	"github.com/diana-gw/diana/internal/logbuf"
)

// waitFor is the generous bound on anything a test waits for.
const waitFor = 20 * time.Second

// testServer is a Server running on loopback ports, stopped when the test ends.
type testServer struct {
	*Server
	file   string // the config file ("" when started from a Config)
	proxy  string // http://host:port of the proxy
	admin  string // http://host:port of the admin listener
	cancel context.CancelFunc
	done   chan error
	probes atomic.Int64 // gives each probe of the limits a client IP of its own
}

// startFile writes yaml to a config file and runs a server on it. The yaml should listen on
// 127.0.0.1:0 (see the header helper).
func startFile(t testing.TB, yaml string) *testServer {
	t.Helper()
	file := filepath.Join(t.TempDir(), "diana.yaml")
	writeFile(t, file, yaml)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(data, file)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	ts := startConfig(t, cfg, file)
	return ts
}

// startConfig runs a server on cfg; file is the config file to watch, or "".
func startConfig(t testing.TB, cfg *Config, file string) *testServer {
	t.Helper()
	s, err := New(cfg, Options{File: file, Logger: testLogger(t), ShutdownTimeout: waitFor})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{Server: s, file: file, cancel: cancel, done: make(chan error, 1)}
	if a := s.ProxyAddr(); a != "" {
		ts.proxy = "http://" + a
	}
	if a := s.AdminAddr(); a != "" {
		ts.admin = "http://" + a
	}
	go func() { ts.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		if err := ts.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ts
}

// stop ends Run and returns its error; later calls return nil.
func (ts *testServer) stop() error {
	ts.cancel()
	select {
	case err, ok := <-ts.done:
		if ok {
			close(ts.done)
		}
		return err
	case <-time.After(2 * waitFor):
		return errors.New("Run did not return")
	}
}

// header is the start of a test config: loopback listeners on free ports.
const header = `version: 1
listen: "127.0.0.1:0"
admin:
  listen: "127.0.0.1:0"
`

func writeFile(t testing.TB, name, data string) {
	t.Helper()
	// Write then rename, so that the server never reads half a file.
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// testLogger logs to the test's log (shown on failure or with -v).
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// reply is a response, read whole.
type reply struct {
	status int
	header http.Header
	body   string
}

var client = &http.Client{
	Timeout:   waitFor,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, Proxy: nil},
}

// get sends GET url, with X-Forwarded-For xff if not "".
func get(t testing.TB, url, xff string) reply {
	t.Helper()
	r, err := do(http.MethodGet, url, xff, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func do(method, url, xff string, body io.Reader, token string) (reply, error) {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return reply{}, err
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return roundTrip(req)
}

// roundTrip sends req and reads its response whole.
func roundTrip(req *http.Request) (reply, error) {
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{resp.StatusCode, resp.Header, string(b)}, nil
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not after %v: %s", waitFor, what)
		}
	}
}

const perIP = header + `trusted_proxies: ["127.0.0.1/32"]
upstreams:
  - name: demo
    url: "demo:"
rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: token_bucket, rate: 3, period: 1h, burst: 3}
`

func TestPerIPLimit(t *testing.T) {
	ts := startFile(t, perIP)
	for i := 1; i <= 3; i++ {
		r := get(t, ts.proxy+"/hello", "192.0.2.1")
		if r.status != 200 {
			t.Fatalf("request %d: status %d, body %s", i, r.status, r.body)
		}
		if got, want := r.header.Get("RateLimit-Limit"), "3"; got != want {
			t.Errorf("request %d: RateLimit-Limit %q, want %q", i, got, want)
		}
		if got, want := r.header.Get("RateLimit-Remaining"), strconv.Itoa(3-i); got != want {
			t.Errorf("request %d: RateLimit-Remaining %q, want %q", i, got, want)
		}
		if r.header.Get("RateLimit-Reset") == "" || r.header.Get("Retry-After") != "" {
			t.Errorf("request %d: RateLimit-Reset %q, Retry-After %q", i, r.header.Get("RateLimit-Reset"), r.header.Get("Retry-After"))
		}
		var demo struct{ Upstream, Method, Path, Time string }
		if err := json.Unmarshal([]byte(r.body), &demo); err != nil || demo.Upstream != "demo" || demo.Method != "GET" || demo.Path != "/hello" || demo.Time == "" {
			t.Errorf("request %d: demo body %s (%v)", i, r.body, err)
		}
	}

	r := get(t, ts.proxy+"/hello", "192.0.2.1")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("request 4: status %d, want 429", r.status)
	}
	if r.header.Get("RateLimit-Limit") != "3" || r.header.Get("RateLimit-Remaining") != "0" {
		t.Errorf("429 headers: %v", r.header)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 1200 { // one token comes back every 20 minutes
		t.Errorf("Retry-After %q, want 1..1200 seconds", r.header.Get("Retry-After"))
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
	var body struct {
		Message    string
		RetryAfter *int `json:"retry_after"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || body.Message != "API rate limit exceeded" || body.RetryAfter == nil || *body.RetryAfter != ra {
		t.Errorf("429 body %s (%v), want the message and retry_after %d", r.body, err, ra)
	}

	// Another client has its own count.
	r = get(t, ts.proxy+"/hello", "192.0.2.2")
	if r.status != 200 || r.header.Get("RateLimit-Remaining") != "2" {
		t.Errorf("other client: status %d, remaining %q; want 200, 2", r.status, r.header.Get("RateLimit-Remaining"))
	}
}

func TestUntrustedForwardedForIgnored(t *testing.T) {
	ts := startFile(t, strings.Replace(perIP, `trusted_proxies: ["127.0.0.1/32"]`, `trusted_proxies: []`, 1))
	// Every request comes from 127.0.0.1, whatever X-Forwarded-For claims.
	for i := 1; i <= 4; i++ {
		r := get(t, ts.proxy+"/", "198.51.100."+strconv.Itoa(i))
		want := 200
		if i == 4 {
			want = 429
		}
		if r.status != want {
			t.Fatalf("request %d (X-Forwarded-For 198.51.100.%d): status %d, want %d", i, i, r.status, want)
		}
	}
}

func TestUpstreams(t *testing.T) {
	var mu sync.Mutex
	var seen http.Header
	var seenHost string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen, seenHost = r.Header.Clone(), r.Host
		mu.Unlock()
		io.WriteString(w, "from upstream "+r.URL.Path)
	}))
	defer up.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close() // nothing listens there now

	ts := startFile(t, header+`trusted_proxies: ["127.0.0.1"]
upstreams:
  - name: real
    url: "`+up.URL+`/base"
    match: {paths: ["/real/**"]}
  - name: down
    url: "`+deadURL+`"
    match: {paths: ["/down/**"]}
  - name: demo
    url: "demo:"
    match: {paths: ["/demo/**"]}
rules:
  - name: per-route
    by: [route]
    limit: {algorithm: token_bucket, rate: 2, period: 1h}
`)

	r := get(t, ts.proxy+"/real/x", "192.0.2.7")
	if r.status != 200 || r.body != "from upstream /base/real/x" {
		t.Fatalf("real upstream: %d %q", r.status, r.body)
	}
	mu.Lock()
	if got, want := seen.Get("X-Forwarded-For"), "192.0.2.7, 127.0.0.1"; got != want {
		t.Errorf("upstream saw X-Forwarded-For %q, want %q", got, want)
	}
	if seenHost != strings.TrimPrefix(up.URL, "http://") || seen.Get("X-Forwarded-Host") == "" {
		t.Errorf("upstream saw Host %q, X-Forwarded-Host %q", seenHost, seen.Get("X-Forwarded-Host"))
	}
	mu.Unlock()

	r = get(t, ts.proxy+"/down/x", "")
	if r.status != http.StatusBadGateway || !strings.Contains(r.body, `"error"`) {
		t.Errorf("dead upstream: %d %q, want 502 with a JSON error", r.status, r.body)
	}
	r = get(t, ts.proxy+"/nowhere", "")
	if r.status != http.StatusNotFound || !strings.Contains(r.body, `"error"`) {
		t.Errorf("no upstream: %d %q, want 404 with a JSON error", r.status, r.body)
	}

	// The route is the upstream's name: each upstream has its own count.
	if r := get(t, ts.proxy+"/real/y", ""); r.status != 200 || r.header.Get("RateLimit-Remaining") != "0" {
		t.Errorf("route real, 2nd request: %d, remaining %q", r.status, r.header.Get("RateLimit-Remaining"))
	}
	if r := get(t, ts.proxy+"/real/z", ""); r.status != 429 {
		t.Errorf("route real, 3rd request: %d, want 429", r.status)
	}
	if r := get(t, ts.proxy+"/demo/", ""); r.status != 200 || r.header.Get("RateLimit-Remaining") != "1" {
		t.Errorf("route demo: %d, remaining %q", r.status, r.header.Get("RateLimit-Remaining"))
	}
}

func TestMetricsAndHealth(t *testing.T) {
	ts := startFile(t, perIP+`  - name: shadow
    by: [ip]
    action: shadow
    limit: {algorithm: token_bucket, rate: 1, period: 1h}
`)
	for i := 0; i < 5; i++ {
		get(t, ts.proxy+"/", "192.0.2.1")
	}
	r := get(t, ts.admin+"/metrics", "")
	if r.status != 200 {
		t.Fatalf("/metrics: %d", r.status)
	}
	for _, want := range []string{
		`diana_decisions_total{result="allowed",rule="per-ip"} 3`,
		`diana_decisions_total{result="denied",rule="per-ip"} 2`,
		`diana_decisions_total{result="allowed",rule="shadow"} 1`,
		`diana_decisions_total{result="shadow_denied",rule="shadow"} 4`,
		`diana_config_info{source="file"} 1`,
		`diana_config_reloads_total{result="ok",source="file"} 1`,
		`diana_redis_breaker_open 0`,
		`diana_redis_request_duration_seconds_bucket{le="0.0001"} 0`,
		`diana_redis_request_duration_seconds_bucket{le="1"} 0`,
	} {
		if !strings.Contains(r.body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if r := get(t, ts.admin+"/healthz", ""); r.status != 200 || r.body != "ok\n" {
		t.Errorf("/healthz: %d %q", r.status, r.body)
	}
}

func TestGracefulShutdown(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "slow done")
	}))
	defer up.Close()
	ts := startFile(t, header+`upstreams:
  - name: slow
    url: "`+up.URL+`"
rules:
  - name: all
    limit: {algorithm: fixed_window, limit: 1000, window: 1h}
`)

	type result struct {
		r   reply
		err error
	}
	res := make(chan result, 1)
	go func() {
		r, err := do(http.MethodGet, ts.proxy+"/slow", "", nil, "")
		res <- result{r, err}
	}()
	select {
	case <-arrived:
	case <-time.After(waitFor):
		t.Fatal("the request did not reach the upstream")
	}

	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()
	// Shutdown has begun once /healthz says so; the proxy stops accepting connections.
	eventually(t, "/healthz answers 503", func() bool {
		r, err := do(http.MethodGet, ts.admin+"/healthz", "", nil, "")
		return err == nil && r.status == http.StatusServiceUnavailable
	})
	eventually(t, "the proxy refuses new connections", func() bool {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(ts.proxy, "http://"), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case <-stopped:
		t.Fatal("Run returned before the request in flight finished")
	default:
	}

	close(release)
	got := <-res
	if got.err != nil || got.r.status != 200 || got.r.body != "slow done" {
		t.Fatalf("in-flight request: %+v, %v; want 200 slow done", got.r, got.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestExampleConfig runs `make run`'s config, as dianad embeds it.
func TestExampleConfig(t *testing.T) {
	disk, err := os.ReadFile(filepath.Join("..", "examples", "diana.yaml"))
	if err != nil || string(disk) != examples.DianaYAML {
		t.Fatalf("examples.DianaYAML differs from examples/diana.yaml (%v)", err)
	}
	cfg, err := Parse([]byte(examples.DianaYAML), "diana.yaml")
	if err != nil {
		t.Fatalf("examples/diana.yaml: %v", err)
	}
	if cfg.Listen != ":8080" || cfg.Admin.Listen != "127.0.0.1:9090" || len(cfg.Rules) != 5 || cfg.Redis != nil {
		t.Errorf("examples/diana.yaml: listen %q, admin %q, %d rules, redis %v", cfg.Listen, cfg.Admin.Listen, len(cfg.Rules), cfg.Redis)
	}
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0" // the demo's ports may be taken
	ts := startConfig(t, cfg, "")

	// The loop `make run` prints: 5 × 200, then 429 (the bucket starts full with 5 tokens, and
	// gets one back every 2s: a very slow machine may see a few more 200s).
	for i := 1; ; i++ {
		r := get(t, ts.proxy+"/", "")
		if i == 1 && r.header.Get("RateLimit-Limit") != "5" {
			t.Errorf("RateLimit-Limit %q, want 5", r.header.Get("RateLimit-Limit"))
		}
		if i <= 5 && r.status != 200 || i > 5 && r.status != 200 && r.status != 429 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
		if r.status == 429 {
			break
		}
		if i == 100 {
			t.Fatal("no 429 after 100 requests")
		}
	}
	if r := get(t, ts.admin+"/metrics", ""); !strings.Contains(r.body, `diana_decisions_total{result="denied",rule="per-ip"} 1`+"\n") ||
		!strings.Contains(r.body, `diana_config_info{source="embedded"} 1`+"\n") {
		t.Errorf("metrics lack the denial or the embedded source:\n%s", r.body)
	}
}

// Denials and shadow denials are logged with the rule and the client, at most one line a second
// each, with the count held back; the proxy and /v1/check alike.
func TestDenialLogs(t *testing.T) {
	cfg, err := Parse([]byte(header+`rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: fixed_window, limit: 1, window: 1h}
  - name: watch
    action: shadow
    limit: {algorithm: fixed_window, limit: 1, window: 1h}
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), ShutdownTimeout: waitFor})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for i := 0; i < 50; i++ {
		get(t, "http://"+s.ProxyAddr()+"/x", "")
	}
	r, err := do("POST", "http://"+s.AdminAddr()+"/v1/check", "", strings.NewReader(`{"path": "/x", "client_ip": "198.51.100.9"}`), "")
	if err != nil || r.status != 200 {
		t.Fatalf("check: %v %d", err, r.status)
	}
	out := logs.String()
	if n := strings.Count(out, `msg="request denied"`); n != 1 {
		t.Errorf("%d denial lines for 49 denials within a second, want 1:\n%s", n, out)
	}
	for _, want := range []string{`msg="request denied" rule=per-ip client=127.0.0.1 method=GET path=/x limit=1 retry_after=`,
		`msg="shadow rule would deny the request" rule=watch client=127.0.0.1`} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
	time.Sleep(time.Second)
	get(t, "http://"+s.ProxyAddr()+"/x", "")
	if out := logs.String(); !strings.Contains(out, "suppressed=48") || strings.Count(out, `msg="request denied"`) != 2 {
		t.Errorf("a second later, the next denial is logged with the count held back:\n%s", out)
	}
}

// access_log: true logs every request the proxy answers, allowed, refused or unrouted, with
// its status, size and client; without it there is no such line.
func TestAccessLog(t *testing.T) {
	for _, on := range []bool{true, false} {
		cfg, err := Parse([]byte(header+fmt.Sprintf("access_log: %v\n", on)+`upstreams:
  - {name: demo, url: "demo:", match: {paths: ["/d/**"]}}
rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: fixed_window, limit: 1, window: 1h}
`), "c.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var logs logbuf.Buffer
		s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), ShutdownTimeout: waitFor})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		base := "http://" + s.ProxyAddr()
		get(t, base+"/d/x?secret=1", "") // 200 from the demo upstream
		get(t, base+"/d/x", "")          // 429
		cancel()
		<-done
		out := logs.String()
		if !on {
			if strings.Contains(out, "msg=access") {
				t.Errorf("access_log: false, yet:\n%s", out)
			}
			continue
		}
		for _, want := range []string{
			`msg=access method=GET host=` + s.ProxyAddr() + ` path=/d/x status=200 bytes=`,
			`msg=access method=GET host=` + s.ProxyAddr() + ` path=/d/x status=429 bytes=`,
			`client=127.0.0.1 duration_ms=`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("logs lack %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "secret=1") {
			t.Errorf("the access log shows the query:\n%s", out)
		}
	}
}
