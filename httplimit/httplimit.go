// Package httplimit is Diana's net/http middleware: it decides each request against the rules
// of a rules.Engine, answers denials with the rule's status, headers and a JSON body, holds
// delayed requests, and adds the rate-limit headers to the responses it lets through.
package httplimit

import (
	"context"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/diana-gw/diana/shared/rules"
)

// Options say how the middleware reads a request.
type Options struct {
	// TrustedProxies are the peers whose X-Forwarded-For / X-Real-IP / Forwarded are believed.
	TrustedProxies []netip.Prefix
	// ClientIPHeader names the header the trusted proxies write the client address in (see
	// ClientIPHeader); AutoIPHeader by default.
	ClientIPHeader ClientIPHeader
	// AddressHeader, if set, is called when a trusted peer's address headers are not as
	// ClientIPHeader expects (problem: the unexpected header's name, or "missing NAME"): for a
	// rate-limited log line and a metric. The request is decided all the same, with the address
	// the configured header gives (the peer's, when it is missing).
	AddressHeader func(r *http.Request, problem string)
	// IPv6Prefix counts IPv6 clients by their first IPv6Prefix bits (default 64: one customer
	// usually holds a whole /64, so counting single addresses would let them evade the limit);
	// 128 counts single addresses.
	IPv6Prefix int
	// ConsumerHeader, if set, names the header that carries the authenticated account (set by
	// an auth layer in front); it is believed only from trusted proxies.
	ConsumerHeader string
	// Route, if set, names the route or service of a request (the "route" dimension).
	Route func(*http.Request) string
	// Denied, if set, is called with every request the rules refuse, before the refusal is
	// written: for a log line. in and res must not be kept.
	Denied func(r *http.Request, in *rules.Input, res *rules.Result)
}

// Limiter is the middleware. Its rules can be replaced at any time (a config reload) without
// disturbing requests in flight: each request uses the engine it started with.
type Limiter struct {
	state atomic.Pointer[state]
}

type state struct {
	engine *rules.Engine
	opts   Options
}

// New returns a Limiter deciding with e (nil: let everything through until Set is called).
func New(e *rules.Engine, o Options) *Limiter {
	l := &Limiter{}
	l.Set(e, o)
	return l
}

// Set replaces the engine and the options.
func (l *Limiter) Set(e *rules.Engine, o Options) {
	if o.IPv6Prefix <= 0 || o.IPv6Prefix > 128 {
		o.IPv6Prefix = 64
	}
	l.state.Store(&state{engine: e, opts: o})
}

// Input builds what the rules see of r. The path is the one the client sent (the request line's
// target), escapes and all: the rules normalise it, and r.URL.Path has already decoded %2F.
func (o *Options) Input(r *http.Request) rules.Input {
	path := r.RequestURI // "" on a request built by hand rather than read by a server
	if path == "" {
		path = r.URL.EscapedPath()
	}
	in := rules.Input{Method: r.Method, Host: r.Host, Path: path, Headers: r.Header}
	in.SetClient(o.ClientIP(r), o.IPv6Prefix)
	if o.ConsumerHeader != "" && isTrusted(parseAddr(r.RemoteAddr), o.TrustedProxies) {
		in.Consumer = r.Header.Get(o.ConsumerHeader)
	}
	if o.Route != nil {
		in.Route = o.Route(r)
	}
	return in
}

// ClientIP returns the client address of r as the rules see it: the peer's, or from a trusted
// peer the one its ClientIPHeader gives (see ClientIPHeader), reporting a mismatch to
// AddressHeader.
func (o *Options) ClientIP(r *http.Request) netip.Addr {
	a, problem := clientIP(r, o.TrustedProxies, o.ClientIPHeader)
	if problem != "" && o.AddressHeader != nil {
		o.AddressHeader(r, problem)
	}
	return a
}

// Handler limits the requests to next.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := l.state.Load()
		if st.engine == nil {
			next.ServeHTTP(w, r)
			return
		}
		in := st.opts.Input(r)
		res := st.engine.Check(r.Context(), &in)
		var start time.Time  // when the upstream call began; zero if it never did
		var sw *statusWriter // the response's status, for the adaptive rules
		if res.HasLeases() {
			// Leases are given back whatever happens next, even if the client has gone, with
			// the upstream call's latency and failure for the adaptive rules.
			defer func() {
				latency := int64(0)
				if !start.IsZero() {
					latency = max(time.Since(start).Microseconds(), 1)
				}
				st.engine.Finish(context.WithoutCancel(r.Context()), &res, latency, sw.dropped(r))
			}()
		}
		if !res.Allowed {
			if st.opts.Denied != nil {
				st.opts.Denied(r, &in, &res)
			}
			Deny(w, &res)
			return
		}
		if res.Delay > 0 && !Wait(r.Context(), time.Duration(res.Delay)*time.Microsecond) {
			return // the client went away while held; its reserved units stay spent
		}
		SetHeaders(w.Header(), &res)
		if res.HasLeases() { // only lease holders report a latency: no clock read otherwise
			start = time.Now()
		}
		if res.Learns() { // only adaptive rules read the status: no wrapper otherwise
			sw = &statusWriter{ResponseWriter: w}
			w = sw
		}
		next.ServeHTTP(w, r)
	})
}

// Wait holds for d, or until ctx ends; it reports whether d passed.
func Wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
