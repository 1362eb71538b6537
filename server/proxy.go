package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/diana-gw/diana/internal/llmfake"
	"github.com/diana-gw/diana/shared/rules"
)

// upstream is a configured upstream with the handler that serves its requests.
type upstream struct {
	Upstream
	handler http.Handler
}

// proxyHandler serves the proxy listener: each request takes one snapshot of the running config
// (live), is read once into a rules.Input, routed by it and limited by it (see live.serve).
func (s *Server) proxyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := s.live.Load()
		in := l.opts.Input(r)
		if !l.accessLog {
			l.serve(w, r, &in)
			return
		}
		start := time.Now()
		aw := &accessWriter{ResponseWriter: w}
		l.serve(aw, r, &in)
		if aw.status == 0 {
			aw.status = http.StatusOK
		}
		s.log.Info("access", "method", r.Method, "host", r.Host, "path", r.URL.Path, "status", aw.status,
			"bytes", aw.bytes, "client", addrName(in.Addr), "duration_ms", float64(time.Since(start).Microseconds())/1000)
	})
}

// addrName names a client address in the access log.
func addrName(a netip.Addr) string {
	if !a.IsValid() {
		return "(no address)"
	}
	return a.String()
}

// accessWriter records a response's status and size for the access log. Unwrap lets
// http.ResponseController (which the reverse proxy flushes and hijacks with) reach w.
type accessWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (a *accessWriter) WriteHeader(code int) {
	if a.status == 0 && code >= 200 { // 1xx responses are interim
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *accessWriter) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	n, err := a.ResponseWriter.Write(b)
	a.bytes += int64(n)
	return n, err
}

func (a *accessWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// serve routes the request read as in to its upstream, limiting it on the way: the upstream's
// name is its route. A request no upstream matches gets 404, unless the rules refuse it first.
func (l *live) serve(w http.ResponseWriter, r *http.Request, in *rules.Input) {
	next := noUpstream
	if u := l.route(in); u != nil {
		in.Route = u.Name
		next = u.handler
	}
	l.opts.Limit(w, r, l.engine, in, next)
}

// route returns the first upstream whose match matches in, or nil. Upstreams match the request
// exactly as rules do: the same Input, its path brought to the normal form the rules match
// (which Check then finds already normal). A path the rules refuse (escaped_slashes: reject)
// goes nowhere: Check answers it with 400.
func (l *live) route(in *rules.Input) *upstream {
	if !l.engine.Normalize(in) {
		return nil
	}
	for _, u := range l.upstreams {
		if u.Match.Matches(in) {
			return u
		}
	}
	return nil
}

// noUpstream answers a request no upstream matches.
var noUpstream http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusNotFound, errorBody{"no upstream matches this request"})
})

// NewTransport returns the transport dianad proxies with: enough idle connections per upstream
// for load (the default 2 would open and close a connection per request), no proxy from the
// environment (upstreams are named exactly), and bounded dials and handshakes.
func NewTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Rewrite returns the rewrite of a request to target: its URL, and X-Forwarded-For with this
// hop appended (Rewrite starts without it), X-Forwarded-Host and -Proto; a body of known length
// ends at it (sizedBody).
func Rewrite(target *url.URL) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		if prior, ok := pr.In.Header["X-Forwarded-For"]; ok {
			pr.Out.Header["X-Forwarded-For"] = prior
		}
		pr.SetXForwarded()
		if pr.Out.Body != nil && pr.Out.ContentLength > 0 {
			pr.Out.Body = &sizedBody{ReadCloser: pr.Out.Body, left: pr.Out.ContentLength}
		}
	}
}

// sizedBody is a request body that ends once it has given its Content-Length, without reading
// the body below again. Having sent that many bytes, the transport reads once more to check the
// body is not longer; when the upstream answers at once, net/http may have closed the client's
// body by then (it does as the response's header is written), and the error of that read makes
// the transport close the upstream connection, cutting the response on its way (a stream). The
// server's body never holds more than its Content-Length anyway.
type sizedBody struct {
	io.ReadCloser
	left int64
}

func (b *sizedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// newUpstream builds the handler of u: the demo handler for scheme "demo" (demo:llm: the fake
// LLM of internal/llmfake, OpenAI-shaped answers with token usage), else a reverse proxy
// to u.URL on the server's shared transport (its idle connections outlive reloads).
func (s *Server) newUpstream(u Upstream) *upstream {
	if u.URL.Scheme == "demo" && u.URL.Opaque == "llm" {
		return &upstream{Upstream: u, handler: llmfake.Handler()}
	}
	if u.URL.Scheme == "demo" {
		return &upstream{Upstream: u, handler: demoHandler(u.Name)}
	}
	rp := &httputil.ReverseProxy{
		Rewrite:    Rewrite(u.URL),
		Transport:  s.transport,
		BufferPool: buffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.limited.LogAttrs(r.Context(), slog.LevelWarn, "upstream failed", slog.String("upstream", u.Name), slog.Any("err", err))
			writeJSON(w, http.StatusBadGateway, errorBody{"bad gateway: upstream " + u.Name + " did not answer"})
		},
	}
	return &upstream{Upstream: u, handler: rp}
}

// buffers lends every reverse proxy its copy buffers: without a pool, each response body
// copied allocates 32 KiB.
var buffers = &bufferPool{}

// BufferPool returns the pool of copy buffers dianad's reverse proxies share (32 KiB each), for
// benchmarks that compare a plain httputil.ReverseProxy given the same pool.
func BufferPool() httputil.BufferPool { return buffers }

// bufferSize is the size of the pooled buffers, io.Copy's default.
const bufferSize = 32 << 10

// bufferPool pools arrays, not slices: a slice put in a sync.Pool is boxed in a new allocation
// each time, while a pointer to the array its Put is given converts without one.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if a, ok := b.p.Get().(*[bufferSize]byte); ok {
		return a[:]
	}
	return make([]byte, bufferSize)
}

// Put keeps v if it is a whole buffer of the pool's size (as Get returned it).
func (b *bufferPool) Put(v []byte) {
	if len(v) == bufferSize {
		b.p.Put((*[bufferSize]byte)(v))
	}
}

// demoHandler is the built-in demo upstream: it answers every request with a small JSON echo.
func demoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, struct {
			Upstream string `json:"upstream"`
			Method   string `json:"method"`
			Path     string `json:"path"`
			Time     string `json:"time"`
		}{name, r.Method, r.URL.Path, time.Now().UTC().Format(time.RFC3339Nano)})
	})
}

// errorBody is the JSON body of an error reply.
type errorBody struct {
	Error string `json:"error"`
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only plain structs and maps of strings are written
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
