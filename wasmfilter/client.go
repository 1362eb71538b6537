package main

import (
	"net/netip"
	"strings"
)

// clientAddr returns the client's address: with hops > 0, the hops-th address from the right of
// X-Forwarded-For (each trusted proxy appends the address it got the request from, so the
// entries right of it were written by trusted hops and it is the first that a client cannot
// forge); otherwise, or when X-Forwarded-For has fewer valid entries than that, source.address
// (the peer of Envoy's connection) without its port. An invalid address gives the zero Addr.
func clientAddr(source []byte, xff string, hops int) netip.Addr {
	if hops > 0 && xff != "" {
		for i := 1; i <= hops; i++ {
			j := strings.LastIndexByte(xff, ',')
			entry := strings.TrimSpace(xff[j+1:])
			if i == hops {
				if a, err := netip.ParseAddr(entry); err == nil {
					return a
				}
				break
			}
			if j < 0 {
				break
			}
			xff = xff[:j]
		}
	}
	if ap, err := netip.ParseAddrPort(string(source)); err == nil {
		return ap.Addr()
	}
	a, _ := netip.ParseAddr(string(source)) // a pipe or an address without port
	return a
}
