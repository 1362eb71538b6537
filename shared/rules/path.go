package rules

import (
	"bytes"
	"strings"

	"github.com/diana-gw/diana/shared/conf"
)

// Paths. A rule matches and counts a request by the path its upstream will serve, not by the
// spelling the client chose: /api//login, //api/login, /x/../api/login, /api/./login,
// /api/%2e%2e/x/../login, /api/log%69n, /api/login/ and /api/login;jsessionid=1 all reach
// /api/login on common upstreams, so they must all meet a rule on /api/login and share its count.
// Engine.Check therefore rewrites Input.Path once, before any rule sees it, into its normal form:
//
//   - only the path counts: a query (from '?') or fragment ('#') is cut off; an absolute-form
//     target (http://host/a) keeps its path; a path that does not start with '/' gets one;
//   - escapes of unreserved characters (A–Z a–z 0–9 - . _ ~) are decoded, once (%2e is '.',
//     %252e stays %252E); every other escape keeps its '%' and upper-case hex; a '%' without two
//     hex digits after it, and any byte a path may not hold raw (space, controls, non-ASCII, ...),
//     is escaped: "/a b" and "/a%20b" are one path;
//   - an encoded slash (%2F), an encoded backslash (%5C) and a raw backslash follow the engine's
//     EscapedSlashes: by default they separate segments, as IIS and any upstream that decodes
//     before routing read them; KeepSlashes leaves them inside their segment, as %2F and %5C;
//     RejectSlashes refuses the request;
//   - each segment's ";parameters" are dropped, as servlet containers do before routing
//     (/api;v=1/login and /public/..;/login are /api/login and /login on Tomcat);
//   - empty segments are dropped (slashes merged), "." segments too, and ".." removes the segment
//     before it, never climbing above the root (RFC 3986 5.2.4);
//   - a final slash is dropped (but for "/"): /api/login/ is /api/login on most frameworks;
//   - a control character (0x00–0x1F, 0x7F), raw or escaped (%00, %09, %7F), anywhere in the
//     path refuses the request with 400, as nginx, Apache and Go's server refuse them: some
//     upstreams cut the path at %00 or strip a %09, so no normal form is safe;
//   - trailing dots and spaces of a segment (/api/login., /api/login%2e, /api/login%20) are kept
//     by default, since most upstreams serve "login." as a name of its own; Windows and IIS strip
//     them, and PathForm.StripDotsSpaces (strip_trailing_dots_spaces in the configs) strips them
//     too, so that such an upstream's /api/login. meets a rule on /api/login. A segment of dots
//     alone ("." and "..") is a dot segment, not stripped; "..." and a segment of spaces are
//     stripped to nothing and dropped.
//
// Case is kept: paths are case-sensitive on most upstreams. The rewrite is linear in the path's
// length and allocates nothing for a path already normal, which is nearly every path. Rules only
// match and count the normal form: a proxy forwards the request as it came.

// EscapedSlashes says what an encoded slash or backslash in a path is, as Envoy's
// path_with_escaped_slashes_action does.
type EscapedSlashes uint8

const (
	// DecodeSlashes takes %2F, %5C and '\' for '/': the safe default for a limiter, since a path
	// split where its upstream does not split it only shares a count more, never escapes one.
	DecodeSlashes EscapedSlashes = iota
	// KeepSlashes keeps them inside their segment (as %2F and %5C), for upstreams that route on
	// the path as sent and serve /a%2Fb as one name.
	KeepSlashes
	// RejectSlashes refuses a request whose path holds one, with 400.
	RejectSlashes
)

// EscapedSlashesNames are the config names of the EscapedSlashes values, by value.
var EscapedSlashesNames = [...]string{DecodeSlashes: "decode", KeepSlashes: "keep", RejectSlashes: "reject"}

// DecodeEscapedSlashes reads the escaped_slashes field of a front end's config: decode (the
// default), keep or reject.
func DecodeEscapedSlashes(o *conf.Obj) EscapedSlashes {
	return EscapedSlashes(o.EnumIndex("escaped_slashes", EscapedSlashesNames[:]...))
}

// PathForm says how a path is brought to its normal form where upstreams differ.
type PathForm struct {
	Slashes         EscapedSlashes
	StripDotsSpaces bool // strip trailing dots and spaces from each segment, as Windows does
}

// NormalPath returns the normal form of the request path raw (see above) with every option at
// its default but slashes; ok is false when the path holds a control character, or an escaped
// slash and slashes is RejectSlashes.
func NormalPath(raw string, slashes EscapedSlashes) (path string, ok bool) {
	return PathForm{Slashes: slashes}.Normal(raw)
}

// Normal returns the normal form of the request path raw under f (see above); ok is false when
// the path holds a control character, or an escaped slash and f.Slashes is RejectSlashes.
func (f PathForm) Normal(raw string) (path string, ok bool) {
	slashes := f.Slashes
	// A plain path holds no space; with StripDotsSpaces it needs a rewrite if a segment ends in '.'.
	if plain(raw) && !(f.StripDotsSpaces && (strings.HasSuffix(raw, ".") || strings.Contains(raw, "./"))) {
		return raw, true
	}
	p := raw
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	p = stripAuthority(p)

	// One segment at a time, into out; a segment is written only once its end shows whether it
	// is "." or "..", which out then undoes.
	out := make([]byte, 0, len(p)+1)
	seg := make([]byte, 0, 32)
	params := false // past a ';' in this segment: dropped
	end := func() {
		if f.StripDotsSpaces && string(seg) != "." && string(seg) != ".." {
			seg = stripDotsSpaces(seg)
		}
		switch string(seg) {
		case "", ".":
		case "..":
			if i := bytes.LastIndexByte(out, '/'); i >= 0 {
				out = out[:i]
			}
		default:
			out = append(out, '/')
			out = append(out, seg...)
		}
		seg, params = seg[:0], false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		escaped := false
		if c == '%' && i+2 < len(p) && hexVal(p[i+1]) >= 0 && hexVal(p[i+2]) >= 0 {
			c = byte(hexVal(p[i+1])<<4 | hexVal(p[i+2]))
			escaped, i = true, i+2
		}
		if c < ' ' || c == 0x7f {
			return "", false // a control character, raw or escaped: refused (see above)
		}
		if c == '/' && !escaped {
			end()
			continue
		}
		if params {
			continue // dropped, whatever it holds
		}
		switch {
		case c == '/' || c == '\\':
			switch slashes {
			case RejectSlashes:
				return "", false
			case DecodeSlashes:
				end()
				continue
			}
			escaped = true // kept in the segment, as an escape
		case c == ';' && !escaped:
			params = true
			continue
		}
		switch {
		case unreserved(c):
			seg = append(seg, c)
		case !escaped && c != '%' && c > ' ' && c < 0x7f && c != '"' && c != '<' && c != '>' && c != '\\' &&
			c != '^' && c != '`' && c != '{' && c != '|' && c != '}':
			seg = append(seg, c) // a sub-delim, ':' or '@', allowed raw
		default:
			seg = append(seg, '%', hexDigit[c>>4], hexDigit[c&15])
		}
	}
	end()
	if len(out) == 0 {
		return "/", true
	}
	return string(out), true
}

// stripDotsSpaces cuts the trailing dots and spaces (written "%20" in a segment) off seg.
func stripDotsSpaces(seg []byte) []byte {
	for {
		switch {
		case bytes.HasSuffix(seg, []byte(".")):
			seg = seg[:len(seg)-1]
		case bytes.HasSuffix(seg, []byte("%20")):
			seg = seg[:len(seg)-3]
		default:
			return seg
		}
	}
}

// plain reports whether p needs no rewrite: it starts with '/', holds only characters a path
// may hold raw, none of '%', ';', '\', '?', '#', no empty, "." or ".." segment, and does not end
// with '/' unless it is "/".
func plain(p string) bool {
	if p == "/" {
		return true
	}
	if len(p) < 2 || p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			switch p[segStart:i] {
			case "", ".", "..":
				return false
			}
			segStart = i + 1
			continue
		}
		c := p[i]
		if !unreserved(c) && !strings.ContainsRune("!$&'()*+,=:@", rune(c)) {
			return false
		}
	}
	return true
}

// stripAuthority returns the path of an absolute-form target (scheme://authority/path), or p
// itself.
func stripAuthority(p string) string {
	i := strings.Index(p, "://")
	if i <= 0 || strings.IndexByte(p[:i], '/') >= 0 {
		return p
	}
	for _, c := range p[:i] {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.') {
			return p
		}
	}
	rest := p[i+3:]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		return rest[j:]
	}
	return "/"
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

const hexDigit = "0123456789ABCDEF"
