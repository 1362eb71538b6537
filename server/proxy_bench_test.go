package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkProxyHandler measures dianad's work per request without the network: the proxy's
// handler (reading the request, routing it among two upstreams, three rules in the local store,
// the metrics and the headers) in front of a handler answering 200 in place of the upstream's
// reverse proxy. Its allocs/op are dianad's own per request.
func BenchmarkProxyHandler(b *testing.B) {
	h, reqs := benchProxy(b, `rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: token_bucket, rate: 100000, period: 1s, burst: 100000}
  - name: per-path
    match: {paths: ["/api/**"]}
    by: [ip, path]
    limit: {algorithm: sliding_window, limit: 10000000, window: 1m}
  - name: global
    by: [global]
    limit: {algorithm: fixed_window, limit: 1000000000, window: 1s}
`, slog.New(slog.DiscardHandler))
	serveEach(b, h, reqs, http.StatusOK)
}

// BenchmarkProxyDenied is BenchmarkProxyHandler's request refused: a per-IP limit that each
// client has spent, so that every request is denied and logged (a line a second, written as
// text; the rest held back). Its allocs/op are dianad's own per denial, the log's included.
func BenchmarkProxyDenied(b *testing.B) {
	h, reqs := benchProxy(b, `rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: fixed_window, limit: 1, window: 1h}
`, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, r := range reqs {
		h.ServeHTTP(httptest.NewRecorder(), r) // spends the client's one request
	}
	serveEach(b, h, reqs, http.StatusTooManyRequests)
}

// benchProxy returns the proxy's handler for a config of two upstreams and the rules yml,
// the upstreams answering 200 in place, and requests of 1000 clients (by X-Forwarded-For from
// a trusted peer) under /api/.
func benchProxy(b *testing.B, yml string, log *slog.Logger) (http.Handler, []*http.Request) {
	cfg, err := Parse([]byte(`version: 1
listen: "127.0.0.1:0"
trusted_proxies: ["127.0.0.1/32"]
upstreams:
  - name: api
    url: "http://127.0.0.1:1"
    match: {paths: ["/api/**"]}
  - name: other
    url: "http://127.0.0.1:1"
`+yml), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(cfg, Options{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.close)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`+"\n") })
	for _, u := range s.live.Load().upstreams {
		u.handler = ok
	}
	const clients = 1000
	reqs := make([]*http.Request, clients)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/api/items/"+strconv.Itoa(i%8), nil)
		reqs[i].RemoteAddr = "127.0.0.1:40000"
		reqs[i].Header.Set("X-Forwarded-For", "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256))
	}
	return s.proxyHandler(), reqs
}

// serveEach serves the requests in turn, each answered with status.
func serveEach(b *testing.B, h http.Handler, reqs []*http.Request, status int) {
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, reqs[i%len(reqs)])
		if w.Code != status {
			b.Fatalf("status %d, want %d", w.Code, status)
		}
		i++
	}
}
