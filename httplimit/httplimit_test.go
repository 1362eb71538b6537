package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// engine builds an engine in local mode from a JSON list of rules.
func engine(t *testing.T, rulesJSON string, observe func(*rules.Rule, *rules.Input, rules.Outcome, error)) *rules.Engine {
	t.Helper()
	doc, err := conf.ParseJSON([]byte(`{"rules":` + rulesJSON + `}`))
	if err != nil {
		t.Fatal(err)
	}
	errs := &conf.Errors{Source: "test"}
	o := conf.Read(doc, errs)
	rs := rules.Decode(o)
	o.Done()
	if err := errs.Err(); err != nil {
		t.Fatal(err)
	}
	e, err := rules.New(rs, rules.Options{Local: rules.Each(memstore.New(memstore.Options{}).Decide), Observe: observe})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// serve starts a real server: the limiter in front of next (a 200 "ok" when nil), trusting
// loopback peers, so that tests pick the client address with X-Forwarded-For.
func serve(t *testing.T, l *httplimit.Limiter, next http.Handler) *httptest.Server {
	t.Helper()
	if next == nil {
		next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	}
	srv := httptest.NewServer(l.Handler(next))
	t.Cleanup(srv.Close)
	return srv
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func get(t *testing.T, srv *httptest.Server, path, client string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	if client != "" {
		req.Header.Set("X-Forwarded-For", client)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

func TestPerIPLimit(t *testing.T) {
	e := engine(t, `[{"name":"per-ip","by":["ip"],"limit":{"algorithm":"fixed_window","limit":3,"window":"1h"}}]`, nil)
	srv := serve(t, httplimit.New(e, httplimit.Options{TrustedProxies: loopback}), nil)
	for i, want := range []string{"2", "1", "0"} {
		res, body := get(t, srv, "/", "192.0.2.1")
		if res.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i+1, res.StatusCode, body)
		}
		if got := res.Header.Get("RateLimit-Remaining"); got != want {
			t.Errorf("request %d: RateLimit-Remaining %s, want %s", i+1, got, want)
		}
		if res.Header.Get("RateLimit-Limit") != "3" || res.Header.Get("RateLimit-Reset") == "" {
			t.Errorf("request %d: headers %v", i+1, res.Header)
		}
		if res.Header.Get("Retry-After") != "" || res.Header.Get("X-RateLimit-Limit") != "" {
			t.Errorf("request %d: unexpected headers %v", i+1, res.Header)
		}
	}
	res, body := get(t, srv, "/", "192.0.2.1")
	if res.StatusCode != 429 {
		t.Fatalf("4th request: %d, want 429", res.StatusCode)
	}
	var reply struct {
		Message    string `json:"message"`
		RetryAfter int64  `json:"retry_after"`
	}
	if err := json.Unmarshal([]byte(body), &reply); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if reply.Message != rules.DefaultMessage || reply.RetryAfter < 1 || reply.RetryAfter > 3600 {
		t.Errorf("body %+v", reply)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if ra := res.Header.Get("Retry-After"); ra == "" || res.Header.Get("RateLimit-Remaining") != "0" {
		t.Errorf("denial headers %v", res.Header)
	}
	if res, _ := get(t, srv, "/", "192.0.2.2"); res.StatusCode != 200 {
		t.Errorf("another client: %d, want 200", res.StatusCode)
	}
}

func TestUntrustedForwardedForIgnored(t *testing.T) {
	e := engine(t, `[{"name":"per-ip","by":["ip"],"limit":{"algorithm":"fixed_window","limit":2,"window":"1h"}}]`, nil)
	srv := serve(t, httplimit.New(e, httplimit.Options{}), nil) // no trusted proxies
	codes := []int{}
	for i := 0; i < 4; i++ {
		res, _ := get(t, srv, "/", "192.0.2."+string(rune('1'+i))) // a new "client" each time
		codes = append(codes, res.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 || codes[3] != 429 {
		t.Errorf("codes %v: forged X-Forwarded-For must not give new identities", codes)
	}
}

func TestReplyOptions(t *testing.T) {
	e := engine(t, `[{"name":"r","limit":{"algorithm":"sliding_log","limit":1,"window":"1h"},
		"reply":{"status":503,"message":"slow down","legacy_headers":true}},
		{"name":"quiet","match":{"paths":["/quiet"]},"limit":{"algorithm":"fixed_window","limit":1,"window":"1h"},"reply":{"headers":false}}]`, nil)
	srv := serve(t, httplimit.New(e, httplimit.Options{}), nil)
	res, _ := get(t, srv, "/", "")
	if res.Header.Get("X-RateLimit-Limit") != "1" || res.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("legacy headers %v", res.Header)
	}
	res, body := get(t, srv, "/", "")
	if res.StatusCode != 503 || body != `{"message":"slow down","retry_after":3600}`+"\n" {
		t.Errorf("denial %d %q", res.StatusCode, body)
	}
	// /quiet matches both rules; "r" is exhausted, so the request is denied by "r" with headers.
	// A fresh server checks that "quiet" alone sends none.
	e2 := engine(t, `[{"name":"quiet","limit":{"algorithm":"fixed_window","limit":1,"window":"1h"},"reply":{"headers":false}}]`, nil)
	srv2 := serve(t, httplimit.New(e2, httplimit.Options{}), nil)
	for i := 0; i < 2; i++ {
		res, _ := get(t, srv2, "/", "")
		for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"} {
			if res.Header.Get(h) != "" {
				t.Errorf("request %d: %s sent with headers off", i+1, h)
			}
		}
	}
}

func TestShadowLogsAndLetsThrough(t *testing.T) {
	var shadowed atomic.Int64
	e := engine(t, `[{"name":"s","action":"shadow","limit":{"algorithm":"fixed_window","limit":2,"window":"1h"}}]`,
		func(r *rules.Rule, _ *rules.Input, o rules.Outcome, err error) {
			if o == rules.ShadowDenied {
				shadowed.Add(1)
			}
		})
	srv := serve(t, httplimit.New(e, httplimit.Options{}), nil)
	for i := 0; i < 5; i++ {
		if res, _ := get(t, srv, "/", ""); res.StatusCode != 200 {
			t.Fatalf("request %d: %d, shadow rules never deny", i+1, res.StatusCode)
		}
	}
	if shadowed.Load() != 3 {
		t.Errorf("shadow denials observed: %d, want 3", shadowed.Load())
	}
}

func TestDelay(t *testing.T) {
	// 10 per second, burst 1: the second request at once must wait 100 ms.
	e := engine(t, `[{"name":"d","action":"delay","max_delay":"10s","limit":{"algorithm":"token_bucket","rate":10,"period":"1s","burst":1}}]`, nil)
	var upstream atomic.Int64
	srv := serve(t, httplimit.New(e, httplimit.Options{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream.Add(1)
	}))
	// Timed from before the first request, which takes the token: the second cannot pass
	// before it refills, however slowly the machine ran the first.
	start := time.Now()
	get(t, srv, "/", "")
	if res, _ := get(t, srv, "/", ""); res.StatusCode != 200 {
		t.Fatalf("delayed request: %d", res.StatusCode)
	}
	if waited := time.Since(start); waited < 90*time.Millisecond {
		t.Errorf("two requests took %v, the second should have been held until 100ms after the first", waited)
	}

	// A client that gives up while held never reaches the upstream: the request it sent is
	// marked, and the upstream must not see it, even once the time it was held for has passed
	// (a count, not a bound on how long anything takes).
	slow := engine(t, `[{"name":"d","action":"delay","max_delay":"10s","limit":{"algorithm":"token_bucket","rate":1,"period":"1s","burst":1}}]`, nil)
	var marked atomic.Int64
	srv = serve(t, httplimit.New(slow, httplimit.Options{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Gave-Up") != "" {
			marked.Add(1)
		}
	}))
	get(t, srv, "/", "") // takes the token: the next request is held for a second
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	req.Header.Set("X-Gave-Up", "1")
	if _, err := srv.Client().Do(req); err == nil {
		t.Fatal("a request held for a second answered within 50ms")
	}
	// Once the hold it was given has passed, a request that was still held would have gone on.
	for {
		p, _ := slow.Peek(context.Background(), &rules.Input{Path: "/"})
		if len(p) == 1 && p[0].Decision.Allowed {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // and the handler that would forward it has run
	if n := marked.Load(); n != 0 {
		t.Errorf("the request whose client gave up while held reached the upstream (%d)", n)
	}
}

func TestConcurrencyLeaseReleased(t *testing.T) {
	e := engine(t, `[{"name":"c","limit":{"algorithm":"concurrency","max":1,"lease":"1h"}}]`, nil)
	hold, held := make(chan struct{}), make(chan struct{})
	srv := serve(t, httplimit.New(e, httplimit.Options{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-hold
		}
	}))
	for i := 0; i < 5; i++ { // one at a time: each lease is given back
		if res, _ := get(t, srv, "/", ""); res.StatusCode != 200 {
			t.Fatalf("sequential request %d: %d", i+1, res.StatusCode)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); get(t, srv, "/hold", "") }()
	<-held
	if res, _ := get(t, srv, "/", ""); res.StatusCode != 429 {
		t.Errorf("second request in flight: %d, want 429", res.StatusCode)
	}
	close(hold)
	wg.Wait()
	if res, _ := get(t, srv, "/", ""); res.StatusCode != 200 {
		t.Errorf("after the release: %d, want 200", res.StatusCode)
	}
}

func TestSetWhileInFlight(t *testing.T) {
	strict := engine(t, `[{"name":"x","limit":{"algorithm":"fixed_window","limit":1,"window":"1h"}}]`, nil)
	l := httplimit.New(nil, httplimit.Options{})
	hold, held := make(chan struct{}), make(chan struct{})
	srv := serve(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-hold
		}
	}))
	done := make(chan int)
	go func() { res, _ := get(t, srv, "/hold", ""); done <- res.StatusCode }()
	<-held
	l.Set(strict, httplimit.Options{}) // a reload while a request is in flight
	close(hold)
	if code := <-done; code != 200 {
		t.Errorf("in-flight request: %d", code)
	}
	codes := [2]int{}
	for i := range codes {
		res, _ := get(t, srv, "/", "")
		codes[i] = res.StatusCode
	}
	if codes != [2]int{200, 429} {
		t.Errorf("after Set: %v, want the new rule (200, 429)", codes)
	}
}

// Each header style reaches the client over real HTTP as the rule asks.
func TestHeaderStylesOverHTTP(t *testing.T) {
	e := engine(t, `[
		{"name":"k","match":{"paths":["/kong"]},"reply":{"headers":"kong"},"limit":{"algorithm":"token_bucket","rate":5,"period":"1m"}},
		{"name":"s","match":{"paths":["/structured"]},"reply":{"headers":"structured"},"limit":{"algorithm":"sliding_window","limit":5,"window":"1h"}}]`, nil)
	srv := serve(t, httplimit.New(e, httplimit.Options{}), nil)
	res, _ := get(t, srv, "/kong", "")
	if res.Header.Get("X-RateLimit-Limit-Minute") != "5" || res.Header.Get("X-RateLimit-Remaining-Minute") != "4" || res.Header.Get("RateLimit-Limit") != "5" {
		t.Errorf("kong style: %v", res.Header)
	}
	res, _ = get(t, srv, "/structured", "")
	var reset int
	// The estimate counts the unit until the end of the next aligned hour: 1 to 2 hours away.
	if n, _ := fmt.Sscanf(res.Header.Get("RateLimit"), `"s";r=4;t=%d`, &reset); n != 1 || reset <= 3600 || reset > 7200 ||
		res.Header.Get("RateLimit-Policy") != `"s";q=5;w=3600` || res.Header.Get("RateLimit-Limit") != "" {
		t.Errorf("structured style: %v", res.Header)
	}
}

// TestAdaptiveLatency: the middleware measures the upstream call and reports it, so an adaptive
// rule's limit (sent as RateLimit-Limit) grows while the upstream answers under the SLO and
// falls when it slows past it. The SLO is far above a loopback request's time, however busy
// the machine (at 5 ms, a loaded CI machine's "fast" answers were over it).
func TestAdaptiveLatency(t *testing.T) {
	e := engine(t, `[{"name":"a","limit":{"algorithm":"adaptive","percentile":90,"slo":"100ms","min_limit":1,"max_limit":8,
		"interval":"1ms","smoothing":100,"probe_every":"1h"}}]`, nil)
	var slow atomic.Bool
	srv := serve(t, httplimit.New(e, httplimit.Options{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			time.Sleep(200 * time.Millisecond)
		}
	}))
	limit := func() string {
		res, _ := get(t, srv, "/", "")
		if res.StatusCode != 200 {
			t.Fatalf("sequential request: %d", res.StatusCode)
		}
		return res.Header.Get("RateLimit-Limit")
	}
	// One request at a time is at least half of limits 1 and 2: the limit grows to 4, no further.
	// An interval closes once it has lasted 1 ms and holds 10 samples: at least 60 requests over
	// at least 20 ms close several, however fast the machine answers (60 fast answers alone
	// could fit in two intervals).
	var got string
	for n, until := 0, time.Now().Add(20*time.Millisecond); n < 60 || time.Now().Before(until); n++ {
		got = limit()
	}
	if got != "4" {
		t.Fatalf("RateLimit-Limit %s after fast answers, want 4", got)
	}
	slow.Store(true)
	for range 25 {
		got = limit()
	}
	if got != "1" {
		t.Errorf("RateLimit-Limit %s after 200 ms answers over an SLO of 100 ms, want 1", got)
	}
}

// TestAdaptiveDrop: a 5xx from the upstream is a drop, which cuts an adaptive rule's limit by
// its backoff (10%) per interval however fast it came; the status is read through a wrapper
// that http.ResponseController still sees through.
func TestAdaptiveDrop(t *testing.T) {
	e := engine(t, `[{"name":"a","limit":{"algorithm":"adaptive","percentile":90,"slo":"1s","min_limit":1,"max_limit":8,
		"interval":"1ms","smoothing":100,"probe_every":"1h"}}]`, nil)
	var status atomic.Int64
	status.Store(200)
	srv := serve(t, httplimit.New(e, httplimit.Options{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush through the status wrapper: %v", err)
		}
		if _, ok := w.(http.Flusher); !ok {
			t.Error("the status wrapper is no http.Flusher")
		}
	}))
	limit := func(want int) string {
		res, _ := get(t, srv, "/", "")
		if res.StatusCode != want {
			t.Fatalf("sequential request: %d, want %d", res.StatusCode, want)
		}
		time.Sleep(time.Millisecond) // an interval: one cut per interval at most
		return res.Header.Get("RateLimit-Limit")
	}
	var got string
	for range 60 {
		got = limit(200)
	}
	if got != "4" {
		t.Fatalf("RateLimit-Limit %s after fast answers, want 4", got)
	}
	for _, s := range []int{503, 502} { // 502: dianad's answer to a transport error or timeout
		status.Store(int64(s))
		for range 20 {
			got = limit(s)
		}
		if got != "1" {
			t.Errorf("RateLimit-Limit %s after fast %d answers, want min_limit 1", got, s)
		}
		status.Store(200)
		for range 60 {
			got = limit(200)
		}
	}
}

// TestLimitRoutedByCaller: a front end that reads the request itself (Input), routes it by that
// reading and calls Limit with it has its route counted, and the rules see the Input it passed.
func TestLimitRoutedByCaller(t *testing.T) {
	e := engine(t, `[{"name":"per-route","by":["route"],"limit":{"algorithm":"fixed_window","limit":1,"window":"1h"}}]`, nil)
	var denied []string
	o := httplimit.Options{TrustedProxies: loopback, ConsumerHeader: "X-Consumer",
		Denied: func(_ *http.Request, in *rules.Input, _ *rules.Result) {
			denied = append(denied, in.Route+" "+in.Consumer)
		}}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := o.Input(r)
		in.Route = in.Consumer + "-route" // routed by what the rules see of the request
		o.Limit(w, r, e, &in, next)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	send := func(consumer string) int {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Header.Set("X-Consumer", consumer)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for i, c := range []struct {
		consumer string
		want     int
	}{{"alice", 200}, {"bob", 200}, {"alice", 429}, {"bob", 429}} {
		if got := send(c.consumer); got != c.want {
			t.Errorf("request %d (%s): %d, want %d", i+1, c.consumer, got, c.want)
		}
	}
	if fmt.Sprint(denied) != "[alice-route alice bob-route bob]" {
		t.Errorf("Denied saw %q, want the routes and consumers of the two refusals", denied)
	}
}

// The middleware refuses a request that gives an identity header twice (one the rules count
// by, or the consumer header) with 400 naming it, and does not hand it on: an exhausted key
// cannot be spent again behind a fresh one.
func TestRepeatedIdentityHeader(t *testing.T) {
	e := engine(t, `[{"name": "key", "by": ["header:X-Api-Key"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "consumer", "by": ["consumer"], "limit": {"algorithm": "fixed_window", "limit": 100, "window": "1h"}}]`, nil)
	reached := 0
	srv := serve(t, httplimit.New(e, httplimit.Options{TrustedProxies: loopback, ConsumerHeader: "X-Consumer"}),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }))
	send := func(h [][2]string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		for _, kv := range h {
			req.Header.Add(kv[0], kv[1])
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if status, _ := send([][2]string{{"X-Api-Key", "victim"}}); status != 200 {
		t.Fatalf("the key's first request: %d", status)
	}
	for _, tc := range []struct {
		name    string
		headers [][2]string
		want    string
	}{
		{"key twice", [][2]string{{"X-Api-Key", "fresh"}, {"X-Api-Key", "victim"}}, "X-Api-Key"},
		{"consumer twice", [][2]string{{"X-Api-Key", "other"}, {"X-Consumer", "a"}, {"X-Consumer", "b"}}, "X-Consumer"},
	} {
		if status, body := send(tc.headers); status != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.name, status, body, tc.want)
		}
	}
	if reached != 1 {
		t.Errorf("the handler saw %d requests, want only the first", reached)
	}
}
