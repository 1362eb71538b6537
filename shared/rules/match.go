package rules

import (
	"net/netip"
	"slices"
	"strings"
)

// Match selects the requests a rule applies to: all of its non-empty parts must match, and any
// entry of a part matches (methods GET or POST; paths /a or /b).
//
// Methods are matched without regard to case, and GET includes HEAD. HTTP says methods are
// case-sensitive, and nginx's limit_except compares them exactly, but a limiter must see a
// request as its upstream will: Werkzeug and others upper-case the method, so "post" runs the
// POST handler, and a rule that let "post" pass would be a way around it. Counting "post" as
// POST can only count a request more, never let one escape, so the fold is the safe side: the
// engine upper-cases the request's method (NormalMethod) before any rule sees it. A rule's
// methods must be written upper-case (methods: [post] is refused, naming the field), so that the
// config reads as the rules match. Likewise Go's ServeMux,
// Flask, Rails and Express run the GET handler for HEAD, so a rule on GET also matches HEAD, and
// the "method" dimension counts HEAD as GET. A rule may still name HEAD alone.
//
// Path patterns: "/login" matches exactly; "*" stands for one non-empty segment
// ("/users/*/orders"); a final "**" for any rest, including none ("/api/**" matches /api,
// /api/ and /api/v1/x). Hosts: "api.example.com", "*.example.com" for any subdomain (not
// example.com itself), or an IPv6 address in brackets ("[::1]"); the request's port and a final
// dot are ignored and case does not matter. Headers: name → value, where "*" asks only that the
// header be present (with a non-empty value). Clients: addresses and CIDR blocks the client
// address must fall in. Consumers: the accounts the request's consumer must be one of.
//
// Not lists exceptions: a request that matches any of them is not the rule's, whatever the
// other parts say (an allowlist of internal networks, a health check path, a partner's
// consumer). An exception cannot hold exceptions of its own.
type Match struct {
	Methods   []string
	Paths     []string
	Hosts     []string
	Headers   []HeaderMatch
	Clients   []netip.Prefix
	Consumers []string
	Not       []Match

	paths [][]string // Paths split into segments
}

// IsEmpty reports whether m selects every request.
func (m *Match) IsEmpty() bool {
	return len(m.Methods)+len(m.Paths)+len(m.Hosts)+len(m.Headers)+len(m.Clients)+len(m.Consumers)+len(m.Not) == 0
}

// HeaderMatch asks a request header for a value ("*": any value).
type HeaderMatch struct{ Name, Value string }

// compile checks the patterns and prepares them, calling fail for each wrong one (field is
// "methods", "paths", "hosts" or "headers.NAME").
func (m *Match) compile(fail func(field, reason string)) {
	for _, meth := range m.Methods {
		// A lower-case method is refused rather than upper-cased: the config then says what
		// the rules see.
		if meth == "" || NormalMethod(meth) != meth {
			fail("methods", "must be upper-case method names, got "+quote(meth))
		}
	}
	m.paths = m.paths[:0]
	for _, p := range m.Paths {
		if reason := checkPath(p); reason != "" {
			fail("paths", reason)
			continue
		}
		// Requests are matched in their normal form (NormalPath): so is the pattern, whose
		// escapes and non-ASCII characters are written as a request's would be.
		n, _ := NormalPath(p, KeepSlashes)
		m.paths = append(m.paths, strings.Split(n[1:], "/"))
	}
	for i, h := range m.Hosts {
		m.Hosts[i] = strings.ToLower(h)
		if !validHost(m.Hosts[i]) {
			fail("hosts", "must be a host name (no port), *.domain or a bracketed IPv6 address, got "+quote(h))
		}
	}
	for _, h := range m.Headers {
		switch {
		case !validHeaderName(h.Name):
			fail("headers."+h.Name, "is not a valid header name")
		case h.Value == "":
			fail("headers."+h.Name, `cannot be empty (use "*" to ask only that the header be present)`)
		}
	}
	for _, c := range m.Consumers {
		if c == "" {
			fail("consumers", "cannot hold an empty name: a request without a consumer matches no entry")
		}
	}
}

// checkPath returns the reason p is not a path pattern, or "". Requests are matched in their
// normal form (NormalPath), and patterns are brought to it too (/api/ is /api, //a is /a), but a
// pattern with ;parameters, a query or a backslash could never match one.
func checkPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "a path pattern starts with /, got " + quote(p)
	}
	if _, ok := NormalPath(p, KeepSlashes); !ok {
		return "requests with a control character (raw or escaped) in their path are refused, so no pattern may hold one: got " + quote(p)
	}
	if strings.ContainsAny(p, ";?#\\") {
		return "requests are matched by their normal path, which holds no ;parameters, query or backslash: got " + quote(p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "**" && i != len(segs)-1 {
			return "** may only end a pattern, got " + quote(p)
		}
		if s != "*" && s != "**" && strings.Contains(s, "*") {
			return "* must be a whole segment, got " + quote(p)
		}
	}
	return ""
}

// validHost reports whether h, lower-cased, is a host pattern: dot-separated labels of letters,
// digits, '-' and '_', optionally after "*."; or an IPv6 address in brackets. A port would
// never match (Matches ignores the request's port), so it is refused.
func validHost(h string) bool {
	if len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' {
		for i := 1; i < len(h)-1; i++ {
			if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || c == ':' || c == '.') {
				return false
			}
		}
		return true
	}
	h = strings.TrimPrefix(h, "*.")
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// NormalMethod is the method as the rules see it: its ASCII letters upper-cased (see Match),
// every other byte kept (strings.ToUpper would rewrite invalid UTF-8). It allocates nothing for
// a method already upper-case, which is nearly every method.
func NormalMethod(m string) string {
	i := 0
	for i < len(m) && !('a' <= m[i] && m[i] <= 'z') {
		i++
	}
	if i == len(m) {
		return m
	}
	b := []byte(m)
	for ; i < len(b); i++ {
		if 'a' <= b[i] && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

// Matches reports whether in matches m.
func (m *Match) Matches(in *Input) bool {
	if len(m.Methods) > 0 && !anyMethod(m.Methods, in.Method) {
		return false
	}
	if len(m.paths) > 0 && !anyPath(m.paths, in.Path) {
		return false
	}
	if len(m.Hosts) > 0 && !anyHost(m.Hosts, in.Host) {
		return false
	}
	for _, h := range m.Headers {
		v := in.header(h.Name)
		if v == "" || (h.Value != "*" && v != h.Value) {
			return false
		}
	}
	if len(m.Clients) > 0 && !anyPrefix(m.Clients, in.Addr) {
		return false
	}
	if len(m.Consumers) > 0 && (in.Consumer == "" || !slices.Contains(m.Consumers, in.Consumer)) {
		return false
	}
	for i := range m.Not {
		if m.Not[i].Matches(in) {
			return false
		}
	}
	return true
}

// anyPrefix reports whether a is in one of the blocks; an unknown address is in none.
func anyPrefix(blocks []netip.Prefix, a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range blocks {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseClient reads an address or CIDR block of a clients list: 10.0.0.0/8, 192.0.2.7,
// 2001:db8::/32. An IPv4-mapped IPv6 block is taken as IPv4, as client addresses are; a block
// with bits set past its length is refused, since the intended block is unclear.
func ParseClient(s string) (netip.Prefix, string) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, "must be an IP address or a CIDR block such as 10.0.0.0/8, got " + quote(s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), ""
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, "must be an IP address or a CIDR block such as 10.0.0.0/8, got " + quote(s)
	}
	if p.Addr().Is4In6() && p.Bits() < 96 {
		return netip.Prefix{}, "is an IPv4-mapped block shorter than /96, which holds IPv6 addresses too: got " + quote(s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, "has bits set past its length: write " + quote(p.Masked().String()) + " for the block, got " + quote(s)
	}
	if a := p.Addr(); a.Is4In6() {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, ""
}

// anyMethod compares without regard to case (ASCII), so that a Match used outside
// Engine.Check, whose method NormalMethod has not upper-cased, sees methods as the engine does;
// HEAD is in any list that holds GET.
func anyMethod(list []string, m string) bool {
	head := asciiEqualFold(m, "HEAD")
	for _, e := range list {
		if asciiEqualFold(e, m) || head && e == "GET" {
			return true
		}
	}
	return false
}

// asciiEqualFold is strings.EqualFold for ASCII letters only: "ſ" is not "S" to a method.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func anyPath(patterns [][]string, path string) bool {
	for _, p := range patterns {
		if matchPath(p, path) {
			return true
		}
	}
	return false
}

// matchPath walks path segment by segment against the pattern, without allocating.
func matchPath(pattern []string, path string) bool {
	rest := path
	for _, seg := range pattern {
		if seg == "**" {
			return true
		}
		if rest == "" || rest[0] != '/' {
			return false
		}
		rest = rest[1:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			j = len(rest)
		}
		s := rest[:j]
		rest = rest[j:]
		if seg == "*" {
			if s == "" {
				return false
			}
		} else if s != seg {
			return false
		}
	}
	return rest == ""
}

func anyHost(patterns []string, host string) bool {
	// Drop the port: after the brackets of an IPv6 literal, or after the only colon of a name
	// (a bare IPv6 address has several colons and no port).
	if i := strings.LastIndexByte(host, ':'); i > 0 && (host[i-1] == ']' || strings.IndexByte(host, ':') == i) {
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".") // a fully qualified name: "example.com." is example.com
	for _, p := range patterns {
		if p == "" { // refused by compile; a rule built by hand must not panic on it
			continue
		}
		if p[0] == '*' {
			if len(host) > len(p)-1 && strings.EqualFold(host[len(host)-len(p)+1:], p[1:]) {
				return true
			}
		} else if strings.EqualFold(host, p) {
			return true
		}
	}
	return false
}
