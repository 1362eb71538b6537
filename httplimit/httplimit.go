// Package httplimit is Diana's net/http middleware: it decides each request against the rules
// of a rules.Engine, answers denials with the rule's status, headers and a JSON body, holds
// delayed requests, and adds the rate-limit headers to the responses it lets through.
//
// A request is read once: Options.Input builds the rules.Input (the client address through
// the trusted proxies, the consumer, the method, host, path and headers), and Options.Limit
// decides and answers with it. Limiter.Handler does both, with an engine and options that Set
// swaps atomically (a request keeps the pair it started with):
//
//	limiter := httplimit.New(engine, httplimit.Options{TrustedProxies: proxies})
//	http.ListenAndServe(":8080", limiter.Handler(mux))
//
// A front end that does more with the request before limiting it calls the two itself: dianad
// routes by the same Input (setting its Route) and then calls Limit, with the engine, options
// and upstreams of one snapshot of its running config.
package httplimit

import (
	"context"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
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
	// Usage bounds the reading of a response's usage for the rules whose cost comes from it
	// (rules.Usage): the JSON nesting, and the body's bytes (default: none; the memory is
	// bounded by the nesting whatever the body's size).
	Usage usage.Limits
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
	o.IPv6Prefix = o.ipv6Prefix()
	l.state.Store(&state{engine: e, opts: o})
}

// ipv6Prefix is IPv6Prefix, or its default when unset or out of range.
func (o *Options) ipv6Prefix() int {
	if o.IPv6Prefix <= 0 || o.IPv6Prefix > 128 {
		return 64
	}
	return o.IPv6Prefix
}

// Input builds what the rules see of r. The path is the one the client sent (the request line's
// target), escapes and all: the rules normalise it, and r.URL.Path has already decoded %2F.
func (o *Options) Input(r *http.Request) rules.Input {
	path := r.RequestURI // "" on a request built by hand rather than read by a server
	if path == "" {
		path = r.URL.EscapedPath()
	}
	in := rules.Input{Method: r.Method, Host: r.Host, Path: path, Headers: r.Header}
	in.SetClient(o.ClientIP(r), o.ipv6Prefix())
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
		st.opts.Limit(w, r, st.engine, &in, next)
	})
}

// Limit decides r, which the rules see as in, against e, and answers it: a denial with the
// rule's status, headers and JSON body (after calling Denied); a delayed request is held; an
// admitted one goes to next with the rate-limit headers, and the leases it holds are given back
// once next returns. in is Input's (or ForwardedInput's) reading of r, which a caller that
// routes the request first completes: dianad sets in.Route to the upstream it chose, by the same
// in, so that routing and rules read the request once and alike. Limit is Handler's work with
// the engine and the options chosen by the caller, who keeps them for the whole request (dianad
// takes both from one snapshot of its running config).
func (o *Options) Limit(w http.ResponseWriter, r *http.Request, e *rules.Engine, in *rules.Input, next http.Handler) {
	if in.BodyState == rules.BodyUnread && e.Reads().Body {
		ReadBody(r, in)
	}
	res := e.Check(r.Context(), in)
	var start time.Time  // when the upstream call began; zero if it never did
	var sw *statusWriter // the response's status, for the adaptive rules
	if res.HasLeases() {
		// Leases are given back whatever happens next, even if the client has gone, with the
		// upstream call's latency and failure for the adaptive rules.
		defer func() {
			latency := int64(0)
			if !start.IsZero() {
				latency = max(time.Since(start).Microseconds(), 1)
			}
			e.Finish(context.WithoutCancel(r.Context()), &res, latency, sw.dropped(r))
		}()
	}
	if !res.Allowed {
		if o.Denied != nil {
			o.Denied(r, in, &res)
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
	if m := res.Meter(o.Usage); m != nil {
		// The usage rules are charged when the response has ended, whatever happened to it.
		defer e.Settle(context.WithoutCancel(r.Context()), &res, m.Cost)
		if m.ReadsBody() {
			// A compressed body hides its usage: ask for it plain (Go's transport then asks
			// the upstream for gzip itself, and hands the body on decompressed).
			r.Header.Del("Accept-Encoding")
		}
		mw := &meterWriter{ResponseWriter: w, m: m}
		if askUsage(r, &res) {
			mw.strip = &usage.UsageChunks{}
		}
		next.ServeHTTP(mw, r)
		mw.end()
		mw.trailers()
		return
	}
	next.ServeHTTP(w, r)
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
