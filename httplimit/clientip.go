package httplimit

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIPHeader names the one header a trusted proxy writes the client's address in, as
// nginx's real_ip_header does.
//
// The trap it closes: a proxy that sets only X-Real-IP (nginx's proxy_set_header X-Real-IP
// $remote_addr, with no X-Forwarded-For line) passes the client's own X-Forwarded-For on
// untouched, and AutoIPHeader, which prefers X-Forwarded-For, then reads the client's choice. Name
// the header the proxy sets, and the others are not read; a trusted peer that sends one of them
// anyway (or omits the named one) is reported (Options.AddressHeader) so the operator sees the
// mismatch.
type ClientIPHeader uint8

const (
	// AutoIPHeader reads X-Forwarded-For, else X-Real-IP: the default, as before this setting
	// existed. Safe only behind proxies that append to X-Forwarded-For (nginx's
	// $proxy_add_x_forwarded_for, Caddy, Traefik, Envoy). A trusted peer whose X-Real-IP names
	// another client than X-Forwarded-For is reported: that is the trap's signature.
	AutoIPHeader ClientIPHeader = iota
	// XForwardedFor reads X-Forwarded-For from the right, skipping trusted proxies.
	XForwardedFor
	// XRealIP reads X-Real-IP, one address set by the proxy (which must overwrite the client's).
	XRealIP
	// Forwarded reads the for= parameters of RFC 7239's Forwarded from the right, skipping
	// trusted proxies.
	Forwarded
)

// ClientIPHeaderNames are the config names of the ClientIPHeader values (client_ip_header), by
// value.
var ClientIPHeaderNames = [...]string{AutoIPHeader: "auto", XForwardedFor: "X-Forwarded-For", XRealIP: "X-Real-IP", Forwarded: "Forwarded"}

// addressHeaders are the headers ClientIP may read, by the ClientIPHeader that reads each alone.
var addressHeaders = [...]ClientIPHeader{XForwardedFor, XRealIP, Forwarded}

// headerKeys are ClientIPHeaderNames in canonical form, to index http.Header without the
// allocation of canonicalising "X-Real-IP" on each request.
var headerKeys = func() (k [len(ClientIPHeaderNames)]string) {
	for i, n := range ClientIPHeaderNames {
		k[i] = http.CanonicalHeaderKey(n)
	}
	return k
}()

// Disagree is the problem AutoIPHeader reports (Options.AddressHeader): a trusted peer's
// X-Real-IP names another client (not a trusted proxy) than its X-Forwarded-For, which is
// believed.
const Disagree = "X-Real-IP disagrees with X-Forwarded-For"

// ClientIP returns the address of the client that sent r, with AutoIPHeader: the peer
// (r.RemoteAddr) is the client unless it is one of the trusted proxies; then X-Forwarded-For is
// read from the right, skipping the trusted proxies, and the first address that is not one of
// them is the client (an entry that is not an address ends the walk: the hop that added it is
// taken instead). Without X-Forwarded-For, a trusted peer's X-Real-IP is used. A client can write
// anything to the left of what the proxies append, so nothing left of the first untrusted hop is
// ever read.
func ClientIP(r *http.Request, trusted []netip.Prefix) netip.Addr {
	a, _ := clientIP(r, trusted, AutoIPHeader)
	return a
}

// clientIP returns the client address of r as h reads it, and the problem to report when the
// peer is trusted: the name of an address header h does not read that it sent anyway (with
// AutoIPHeader, Disagree), or "missing " and the header h reads when it sent none (or none
// valid); "" when all is as configured.
func clientIP(r *http.Request, trusted []netip.Prefix, h ClientIPHeader) (netip.Addr, string) {
	peer := parseAddr(r.RemoteAddr)
	if !peer.IsValid() || !isTrusted(peer, trusted) {
		return peer, ""
	}
	if h == AutoIPHeader {
		xff := r.Header[headerKeys[XForwardedFor]]
		var xri netip.Addr
		if v := r.Header[headerKeys[XRealIP]]; len(v) > 0 {
			xri = parseAddr(strings.TrimSpace(v[0]))
		}
		if len(xff) == 0 {
			if xri.IsValid() {
				return xri, ""
			}
			return peer, ""
		}
		a := walk(xff, trusted, peer, xffEntry)
		// An X-Real-IP naming a trusted hop (a proxy behind a load balancer, without nginx's
		// realip module) is a misconfiguration too, but not a client's choice: not reported.
		if xri.IsValid() && xri != a && !isTrusted(xri, trusted) {
			return a, Disagree
		}
		return a, ""
	}
	name := ClientIPHeaderNames[h]
	problem := ""
	for _, o := range addressHeaders {
		if o != h && len(r.Header[headerKeys[o]]) > 0 {
			problem = ClientIPHeaderNames[o]
		}
	}
	vals := r.Header[headerKeys[h]]
	if len(vals) == 0 {
		return peer, "missing " + name
	}
	switch h {
	case XRealIP:
		// One address, which the proxy set: two values are a client's beside the proxy's.
		if a := parseAddr(strings.TrimSpace(vals[0])); len(vals) == 1 && a.IsValid() {
			return a, problem
		}
		return peer, "missing " + name
	case Forwarded:
		return walk(vals, trusted, peer, forwardedFor), problem
	}
	return walk(vals, trusted, peer, xffEntry), problem
}

// walk reads the comma-separated entries of vals (the header's lines, in order) from the right,
// skipping trusted proxies, and returns the first address that is not one of them; an entry
// that is not an address (entry returns an invalid one) ends the walk, and the hop that added it
// is taken. client is the trusted peer, taken if every entry is trusted.
func walk(vals []string, trusted []netip.Prefix, client netip.Addr, entry func(string) netip.Addr) netip.Addr {
	for i := len(vals) - 1; i >= 0; i-- {
		list := vals[i]
		for list != "" {
			var part string
			if j := strings.LastIndexByte(list, ','); j >= 0 {
				part, list = list[j+1:], list[:j]
			} else {
				part, list = list, ""
			}
			a := entry(part)
			if !a.IsValid() {
				return client
			}
			client = a
			if !isTrusted(a, trusted) {
				return client
			}
		}
	}
	return client
}

func xffEntry(part string) netip.Addr { return parseAddr(strings.TrimSpace(part)) }

// forwardedFor reads the address of one Forwarded element's for= parameter (RFC 7239:
// for=192.0.2.60;proto=http, for="[2001:db8::17]:4711"); an obfuscated or "unknown" node, or an
// element without for=, is no address.
func forwardedFor(elem string) netip.Addr {
	for _, pair := range strings.Split(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		return parseAddr(v)
	}
	return netip.Addr{}
}

// parseAddr reads an address with or without a port ("192.0.2.1", "192.0.2.1:80",
// "[2001:db8::1]:80", "2001:db8::1"); IPv4-mapped IPv6 becomes IPv4, and a zone is dropped.
func parseAddr(s string) netip.Addr {
	// Only a bracketed address or one with a single colon can have a port: trying the form s has
	// first spares the common cases a failed parse (whose error is an allocation).
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().Unmap().WithZone("")
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap().WithZone("")
		}
	}
	return netip.Addr{}
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParsePrefixes parses trusted proxies written as CIDRs ("10.0.0.0/8") or single addresses.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, &net.ParseError{Type: "CIDR or IP address", Text: s}
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
