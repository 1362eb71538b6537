package httplimit

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP returns the address of the client that sent r. The peer (r.RemoteAddr) is the client
// unless it is one of the trusted proxies; then X-Forwarded-For is read from the right, skipping
// the trusted proxies, and the first address that is not one of them is the client (an entry
// that is not an address ends the walk: the hop that added it is taken instead). Without
// X-Forwarded-For, a trusted peer's X-Real-IP is used. A client can write anything to the left
// of what the proxies append, so nothing left of the first untrusted hop is ever read.
func ClientIP(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer := parseAddr(r.RemoteAddr)
	if !peer.IsValid() || !isTrusted(peer, trusted) {
		return peer
	}
	client := peer
	xff := r.Header.Values("X-Forwarded-For")
	for i := len(xff) - 1; i >= 0; i-- {
		list := xff[i]
		for list != "" {
			var part string
			if j := strings.LastIndexByte(list, ','); j >= 0 {
				part, list = list[j+1:], list[:j]
			} else {
				part, list = list, ""
			}
			a := parseAddr(strings.TrimSpace(part))
			if !a.IsValid() {
				return client
			}
			client = a
			if !isTrusted(a, trusted) {
				return client
			}
		}
	}
	if len(xff) == 0 {
		if a := parseAddr(strings.TrimSpace(r.Header.Get("X-Real-IP"))); a.IsValid() {
			return a
		}
	}
	return client
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
