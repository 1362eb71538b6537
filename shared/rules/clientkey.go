package rules

import "net/netip"

// ClientKey is the "ip" dimension's value of a client address: the address, or for IPv6 its
// first ipv6Prefix bits (0 or 128: the address), since one customer usually holds a whole /64
// and counting single addresses would let it evade the limit; "" if a is not valid.
// IPv4-mapped IPv6 counts as IPv4, and a zone is dropped.
func ClientKey(a netip.Addr, ipv6Prefix int) string {
	if !a.IsValid() {
		return ""
	}
	a = a.Unmap().WithZone("")
	if a.Is6() && ipv6Prefix > 0 && ipv6Prefix < 128 {
		p, _ := a.Prefix(ipv6Prefix)
		return p.String()
	}
	return a.String()
}
