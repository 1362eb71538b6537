package rules

import "strings"

// Reads says which parts of a request some rules read, for front ends where asking for one
// costs a call (a host call in Envoy, a socket round trip in Kong). A dimension's kind states
// what it reads (DimensionKind.Reads). Path and Addr say whether a rule reads the path or the
// client address itself; a front end may read them anyway (the path is normalised, and may be
// refused, before any rule; a dimension without a value counts by the address: see
// Rule.ReadsAddr).
type Reads struct {
	Method, Host, Consumer, Route, Headers, Path, Addr bool
	// Body: a rule reads the request body (a usage rule's format or estimate_body, the body
	// dimension), from the first MaxPeek bytes a front end reads ahead (Input.Body).
	Body bool
}

// ReadsOf returns what rs read: by their dimensions and by their matches, exceptions included.
func ReadsOf(rs []*Rule) Reads {
	var rd Reads
	for _, r := range rs {
		for _, b := range r.By {
			name, _, _ := strings.Cut(b, ":")
			rd.or(dimensions[name].Reads)
		}
		rd.match(&r.Match)
		rd.Body = rd.Body || r.Usage != nil && r.Usage.readsRequest()
		for i := range r.Match.Not {
			rd.match(&r.Match.Not[i])
		}
	}
	return rd
}

func (rd *Reads) match(m *Match) {
	rd.or(Reads{Method: len(m.Methods) > 0, Host: len(m.Hosts) > 0, Consumer: len(m.Consumers) > 0,
		Headers: len(m.Headers) > 0, Path: len(m.Paths) > 0, Addr: len(m.Clients) > 0})
}

func (rd *Reads) or(o Reads) {
	rd.Method, rd.Host, rd.Consumer = rd.Method || o.Method, rd.Host || o.Host, rd.Consumer || o.Consumer
	rd.Route, rd.Headers = rd.Route || o.Route, rd.Headers || o.Headers
	rd.Path, rd.Addr, rd.Body = rd.Path || o.Path, rd.Addr || o.Addr, rd.Body || o.Body
}

// All is every part: for a front end that hands the request on (to dianad, whose rules it
// does not know).
var All = Reads{Method: true, Host: true, Consumer: true, Route: true, Headers: true, Path: true, Addr: true}
