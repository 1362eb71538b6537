package httplimit

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/diana-gw/diana/shared/rules"
)

// Forward auth: nginx's auth_request, Traefik's ForwardAuth and Caddy's forward_auth ask
// whether a request may pass by sending a request of their own that carries the original's
// headers and tells its method and URI in headers: X-Original-Method and X-Original-URI (the
// nginx convention, set by its config) or X-Forwarded-Method and X-Forwarded-Uri (Traefik,
// Caddy), with X-Forwarded-Host and X-Forwarded-For.

// MaxForwardedURI bounds the original URI a gateway may tell (nginx's own default bound on a
// request line is 8 KiB).
const MaxForwardedURI = 16 << 10

// ForwardedInput builds what the rules see of the request a gateway asks about with the
// forward-auth request r.
//
// From a trusted peer (TrustedProxies), the original request is believed: its URI from
// X-Original-URI or X-Forwarded-Uri (one is required), its method from X-Original-Method or
// X-Forwarded-Method (else r's own: nginx's subrequest keeps the original method), its host
// from X-Forwarded-Host (else r's Host), its client address as ClientIP reads it.
//
// From any other peer none of these headers is believed: r is decided as the request it is
// (its own method, Host and path) from its peer address, as the proxy would decide it had it
// been sent there. A forged header then can neither pick the rules nor open a fresh count;
// ignored reports that such a peer told an original URI or method all the same (a gateway
// missing from trusted_proxies, or a forging caller).
//
// The other headers are the original request's, as the gateway forwards them: rules match and
// count by them (API keys, the consumer header from a trusted peer).
//
// err says why the request cannot be decided (answer 400): a trusted peer told no URI, one
// longer than MaxForwardedURI, a method that is not an HTTP token, one of these headers more
// than once, or two different values between X-Original-* and X-Forwarded-* (a client's forged
// header beside the gateway's own: Traefik and Caddy pass the client's headers on, so a forged
// X-Original-URI would otherwise win over their X-Forwarded-Uri). X-Forwarded-For is a list
// (each proxy appends to it): its lines are read as one, as ClientIP reads them.
func (o *Options) ForwardedInput(r *http.Request) (in rules.Input, ignored bool, err error) {
	in = o.Input(r)
	if !o.TrustedPeer(r) {
		for _, name := range [...]string{"X-Original-URI", "X-Forwarded-Uri", "X-Original-Method", "X-Forwarded-Method"} {
			if len(r.Header.Values(name)) > 0 {
				ignored = true
			}
		}
		return in, ignored, nil
	}
	uri, err := single(r.Header, "X-Original-URI", "X-Forwarded-Uri")
	switch {
	case err != nil:
		return in, false, err
	case uri == "":
		return in, false, fmt.Errorf("neither X-Original-URI nor X-Forwarded-Uri tells the original URI: the gateway must send one")
	case len(uri) > MaxForwardedURI:
		return in, false, fmt.Errorf("the original URI is %d bytes long, above the bound of %d", len(uri), MaxForwardedURI)
	}
	in.Path = uri // the rules normalise it and cut off the query
	method, err := single(r.Header, "X-Original-Method", "X-Forwarded-Method")
	switch {
	case err != nil:
		return in, false, err
	case method != "" && !isToken(method):
		return in, false, fmt.Errorf("the original method %.40q is not an HTTP method", method)
	case method != "":
		in.Method = method
	}
	host, err := single(r.Header, "X-Forwarded-Host")
	if err != nil {
		return in, false, err
	}
	if host != "" {
		in.Host = host
	}
	return in, false, nil
}

// TrustedPeer reports whether r comes from one of the trusted proxies.
func (o *Options) TrustedPeer(r *http.Request) bool {
	return isTrusted(parseAddr(r.RemoteAddr), o.TrustedProxies)
}

// single returns the one value the headers names give between them ("" when none does); a
// header given more than once, or two different values, is an error naming the headers.
func single(h http.Header, names ...string) (string, error) {
	v, from := "", ""
	for _, name := range names {
		xs := h.Values(name)
		if len(xs) > 1 {
			return "", fmt.Errorf("the header %s is given %d times: it tells the original request, so it must be given once (a client's forged header beside the gateway's?)", name, len(xs))
		}
		for _, x := range xs {
			switch {
			case x == "" || x == v:
			case v == "":
				v, from = x, name
			default:
				return "", fmt.Errorf("%s and %s disagree (%.40q, %.40q): a client's forged header beside the gateway's?", from, name, v, x)
			}
		}
	}
	return v, nil
}

// isToken reports whether s is an HTTP token (RFC 9110 5.6.2), as a method must be; at most
// 64 bytes, longer than any method in use.
func isToken(s string) bool {
	if len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}
