package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/diana-gw/diana/shared/rules"
)

// upstream is a configured upstream with the handler that serves its requests.
type upstream struct {
	Upstream
	handler http.Handler
}

// upstreamKey keys the chosen upstream in a request's context.
type upstreamKey struct{}

// routeName is the limiter's Route: the name of the upstream chosen for r.
func routeName(r *http.Request) string {
	if u, _ := r.Context().Value(upstreamKey{}).(*upstream); u != nil {
		return u.Name
	}
	return ""
}

// proxyHandler chooses each request's upstream, limits the request (the upstream's name is its
// route), and forwards it: to the upstream's ReverseProxy, or to the built-in demo upstream;
// a request no upstream matches gets 404.
func (s *Server) proxyHandler() http.Handler {
	forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := r.Context().Value(upstreamKey{}).(*upstream)
		if u == nil {
			writeJSON(w, http.StatusNotFound, errorBody{"no upstream matches this request"})
			return
		}
		u.handler.ServeHTTP(w, r)
	})
	limited := s.limiter.Handler(forward)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := s.live.Load()
		if u := l.pick(r); u != nil {
			r = r.WithContext(context.WithValue(r.Context(), upstreamKey{}, u))
		}
		if !l.accessLog {
			limited.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		aw := &accessWriter{ResponseWriter: w}
		limited.ServeHTTP(aw, r)
		if aw.status == 0 {
			aw.status = http.StatusOK
		}
		client := "(no address)"
		o := l.opts
		o.AddressHeader = nil // reported once, when the request was decided
		if ip := o.ClientIP(r); ip.IsValid() {
			client = ip.String()
		}
		s.log.Info("access", "method", r.Method, "host", r.Host, "path", r.URL.Path, "status", aw.status,
			"bytes", aw.bytes, "client", client, "duration_ms", float64(time.Since(start).Microseconds())/1000)
	})
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

// pick returns the first upstream whose match matches r, or nil.
func (l *live) pick(r *http.Request) *upstream {
	in := rules.Input{Method: r.Method, Host: r.Host, Path: r.URL.Path, Headers: r.Header}
	for _, u := range l.upstreams {
		if u.Match.Matches(&in) {
			return u
		}
	}
	return nil
}

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
// hop appended (Rewrite starts without it), X-Forwarded-Host and -Proto.
func Rewrite(target *url.URL) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		if prior, ok := pr.In.Header["X-Forwarded-For"]; ok {
			pr.Out.Header["X-Forwarded-For"] = prior
		}
		pr.SetXForwarded()
	}
}

// newUpstream builds the handler of u: the demo handler for scheme "demo", else a reverse proxy
// to u.URL on the server's shared transport (its idle connections outlive reloads).
func (s *Server) newUpstream(u Upstream) *upstream {
	if u.URL.Scheme == "demo" {
		return &upstream{Upstream: u, handler: demoHandler(u.Name)}
	}
	rp := &httputil.ReverseProxy{
		Rewrite:    Rewrite(u.URL),
		Transport:  s.transport,
		BufferPool: buffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if ok, skipped := s.proxyLog.Allow(); ok {
				s.log.Warn("upstream failed", "upstream", u.Name, "err", err, "suppressed", skipped)
			}
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
