package rules

import "strings"

// The built-in dimensions. A rule's "by" list names one or more; the identity of a request
// under the rule is the rule's name followed by each dimension's value.
func init() {
	RegisterDimension("global", DimensionKind{New: noArg(global{}), Doc: "one count for every request the rule matches"})
	RegisterDimension("ip", DimensionKind{New: noArg(ipField{}), Reads: Reads{Addr: true},
		Doc: "the client IP, as the front end trusts it"})
	RegisterDimension("consumer", DimensionKind{New: noArg(field(func(in *Input) string { return in.Consumer })), Reads: Reads{Consumer: true},
		Doc: "the authenticated account (Kong consumer, or the header dianad is told to trust)"})
	RegisterDimension("route", DimensionKind{New: noArg(field(func(in *Input) string { return in.Route })), Reads: Reads{Route: true},
		Doc: "the route or service the front end matched"})
	RegisterDimension("path", DimensionKind{New: noArg(field(func(in *Input) string { return in.Path })), Reads: Reads{Path: true},
		Doc: "the URL path (the resource)"})
	RegisterDimension("method", DimensionKind{New: noArg(field(methodValue)), Reads: Reads{Method: true},
		Doc: "the HTTP method (HEAD counts as GET)"})
	RegisterDimension("host", DimensionKind{New: noArg(field(func(in *Input) string { return strings.ToLower(in.Host) })), Reads: Reads{Host: true},
		Doc: "the Host header"})
	RegisterDimension("header", DimensionKind{New: headerDim(""), Reads: Reads{Headers: true}, Arg: headerToken,
		Doc: "a request header, header:NAME (e.g. header:X-Api-Key)"})
	RegisterDimension("device", DimensionKind{New: headerDim("X-Device-Id"), Reads: Reads{Headers: true}, Arg: headerToken,
		Doc: "a device id header, X-Device-Id unless device:NAME names another"})
}

// methodValue counts HEAD as GET, whose handler serves it (see Match).
func methodValue(in *Input) string {
	if in.Method == "HEAD" {
		return "GET"
	}
	return in.Method
}

// newDimension parses a "by" entry, NAME or NAME:ARG.
func newDimension(spec string) (Dimension, string) {
	name, arg, colon := strings.Cut(spec, ":")
	kind, ok := dimensions[name]
	if !ok {
		return nil, "must be one of " + strings.Join(Dimensions(), ", ") + " (NAME or NAME:ARG), got " + quote(spec)
	}
	if colon && arg == "" {
		return nil, "has nothing after the colon: write " + quote(name) + " or " + quote(name+":ARG")
	}
	return kind.New(arg)
}

func noArg(d Dimension) func(string) (Dimension, string) {
	return func(arg string) (Dimension, string) {
		if arg != "" {
			return nil, "takes no argument, got " + quote(arg)
		}
		return d, ""
	}
}

// ipField is the "ip" dimension, a type of its own so that Rule.key knows a missing value is the
// address's.
type ipField struct{}

func (ipField) Value(in *Input) (string, bool) { return in.ClientIP, in.ClientIP != "" }

type global struct{}

func (global) Value(*Input) (string, bool) { return "", true }

// field is a dimension read from one field of the Input; empty means absent.
type field func(in *Input) string

func (f field) Value(in *Input) (string, bool) {
	v := f(in)
	return v, v != ""
}

type header string

func (h header) Value(in *Input) (string, bool) {
	v := in.header(string(h))
	return v, v != ""
}

// headerToken is the form of a header name (RFC 9110's token).
const headerToken = "[!#$%&'*+.^_`|~0-9A-Za-z-]+"

func headerDim(def string) func(string) (Dimension, string) {
	return func(arg string) (Dimension, string) {
		if arg == "" {
			arg = def
		}
		if arg == "" {
			return nil, "needs a header name: header:NAME"
		}
		if !validHeaderName(arg) {
			return nil, "is not a valid header name: " + quote(arg)
		}
		return header(arg), ""
	}
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}
