package rules

import (
	"encoding/hex"
	"net/netip"
	"strings"

	"golang.org/x/crypto/blake2s"
)

// Input is what the rules see of a request. Front ends fill it from their own request type.
type Input struct {
	Method   string
	Host     string
	Path     string     // the URL path as the client sent it (escapes and all); Check normalises it
	ClientIP string     // the "ip" dimension's value: ClientKey of Addr (SetClient sets both)
	Addr     netip.Addr // the client address as the front end trusts it (trusted proxies, Kong's get_forwarded_ip, ...)
	Consumer string     // the authenticated account, if any
	Route    string     // the route or service the front end matched, if any
	Headers  Headers
	// Body is the first bytes of the request body (at most MaxPeek), for the rules that read
	// it (a usage rule's format or estimate_body, the body dimension; Reads.Body); "" when none
	// does. A string keeps Input comparable. BodyState says how much of the body it is.
	Body      string
	BodyState BodyState
	// BodyLength is the body's length when the front end knows it (Content-Length), else 0.
	BodyLength int64
}

// BodyState says what Input.Body holds of the request body.
type BodyState uint8

const (
	// BodyUnread: the front end did not read the body (the Kong plugin; a request the Envoy
	// filter decides at its headers): a usage rule reserves its estimate, which no client
	// chooses.
	BodyUnread BodyState = iota
	// BodyWhole: Body is the whole body ("" for none).
	BodyWhole
	// BodyPart: Body is the body's first bytes (MaxPeek, or fewer where the front end reads
	// fewer), and the body goes on.
	BodyPart
	// BodyEncoded: the body is compressed (a Content-Encoding other than identity): a usage
	// rule cannot read it.
	BodyEncoded
)

// SetClient records the client's address a, which rules match (match.clients) and count by
// (the "ip" dimension, IPv6 cut to its first ipv6Prefix bits; see ClientKey). An invalid a
// leaves the request without an address.
func (in *Input) SetClient(a netip.Addr, ipv6Prefix int) {
	if !a.IsValid() {
		in.Addr, in.ClientIP = netip.Addr{}, ""
		return
	}
	in.Addr = a.Unmap().WithZone("")
	in.ClientIP = ClientKey(a, ipv6Prefix)
}

// ClientName names the request's client in a log line: its client key, or "(no address)".
func (in *Input) ClientName() string {
	if in == nil || in.ClientIP == "" {
		return "(no address)"
	}
	return in.ClientIP
}

// Headers gives a request header's value; http.Header satisfies it. Rules call it only for the
// headers they match or count by, which matters where each call costs (Kong's PDK).
type Headers interface {
	Get(name string) string
}

func (in *Input) header(name string) string {
	if in.Headers == nil {
		return ""
	}
	return in.Headers.Get(name)
}

// maxValue bounds each part of a key: a longer value (a huge header) is replaced by its hash,
// so hostile input cannot make keys, and the memory or Redis traffic they cost, grow.
const maxValue = 128

// appendValue appends one part of a key. '|' separates the parts, so it and '%' are escaped
// (%7C, %25) to keep distinct identities distinct. A hashed value starts with "%blake2s:",
// which no escaped value can spell, so that a short value cannot pose as a long one's hash.
func appendValue(dst []byte, v string) []byte {
	return appendBody(append(dst, '|'), v)
}

// appendBody appends a value, escaped or hashed, without its separator.
func appendBody(dst []byte, v string) []byte {
	if len(v) > maxValue {
		sum := blake2s.Sum256([]byte(v))
		dst = append(dst, "%blake2s:"...)
		return hex.AppendEncode(dst, sum[:16])
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '|':
			dst = append(dst, "%7C"...)
		case '%':
			dst = append(dst, "%25"...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// key returns the identity of in under r: the rule's name, then each dimension's value.
//
// A request without a value for a dimension (no consumer, no such header, no address) is
// counted all the same, never let through: omitting a header must not escape a rule. It counts
// by its client address instead ("%ip:ADDR", as Kong's rate-limiting falls back to the client
// IP), or, without an address either, with every other such request ("%none"). Neither can be
// spelt by a value, whose '%' is escaped.
func (r *Rule) key(dst []byte, in *Input) []byte {
	dst = append(dst[:0], r.Name...)
	for _, d := range r.dims {
		v, ok := d.Value(in)
		switch {
		case ok && v == "": // "global" adds nothing
		case ok:
			dst = appendValue(dst, v)
		case in.ClientIP != "" && !isIP(d):
			dst = appendBody(append(dst, clientPart...), in.ClientIP)
		default:
			dst = append(dst, nonePart...)
		}
	}
	return dst
}

// ReadsAddr reports whether deciding in under r reads the client address: r matches by
// clients, counts by ip, or one of its dimensions has no value in in (see key). A front end where
// asking for the address costs a call (Kong) asks only then; in must hold everything else r
// reads.
func (r *Rule) ReadsAddr(in *Input) bool {
	if len(r.Match.Clients) > 0 {
		return true
	}
	for i := range r.Match.Not {
		if len(r.Match.Not[i].Clients) > 0 {
			return true
		}
	}
	for _, d := range r.dims {
		if _, ok := d.Value(in); !ok || isIP(d) {
			return true
		}
	}
	return false
}

func isIP(d Dimension) bool {
	_, ok := d.(ipField)
	return ok
}

// The parts of a key for a dimension without a value (see key): clientPart starts the one that
// counts the request by its client address, nonePart the one of a request without an address.
const (
	clientPart = "|%ip:"
	nonePart   = "|%none"
)

// WithoutClient returns key with every client-address part (a dimension without a value, see
// key) replaced by "%none": the requests without that value then share one count instead of
// one per client. Stores whose keys can never be deleted (proxy-wasm shared data) use it for
// rules whose dimensions are otherwise bounded by configuration (global, route), so that no
// request can add a key. It returns key itself when there is nothing to replace.
func WithoutClient(key string) string {
	i := strings.Index(key, clientPart)
	if i < 0 {
		return key
	}
	b := make([]byte, 0, len(key))
	for i >= 0 {
		b = append(append(b, key[:i]...), nonePart...)
		key = key[i+len(clientPart):]
		j := strings.Index(key, "|") // the address is escaped: '|' starts the next part
		if j < 0 {
			key = ""
		} else {
			key = key[j:]
		}
		i = strings.Index(key, clientPart)
	}
	return string(append(b, key...))
}
