package rules

import "strings"

// Reads says which parts of a request some rules read, for front ends where asking for one
// costs a call (a host call in Envoy). The path and the client address are always read: the
// path is normalised, and may be refused, before any rule; a missing dimension counts by the
// address.
type Reads struct {
	Method, Host, Consumer, Route, Headers bool
}

// ReadsOf returns what rs read: by their dimensions and by their matches, exceptions included.
func ReadsOf(rs []*Rule) Reads {
	var rd Reads
	for _, r := range rs {
		for _, b := range r.By {
			name, _, _ := strings.Cut(b, ":")
			switch name {
			case "method":
				rd.Method = true
			case "host":
				rd.Host = true
			case "consumer":
				rd.Consumer = true
			case "route":
				rd.Route = true
			case "header", "device":
				rd.Headers = true
			}
		}
		rd.match(&r.Match)
		for i := range r.Match.Not {
			rd.match(&r.Match.Not[i])
		}
	}
	return rd
}

func (rd *Reads) match(m *Match) {
	rd.Method = rd.Method || len(m.Methods) > 0
	rd.Host = rd.Host || len(m.Hosts) > 0
	rd.Consumer = rd.Consumer || len(m.Consumers) > 0
	rd.Headers = rd.Headers || len(m.Headers) > 0
}

// All is every part: for a front end that hands the request on (to dianad, whose rules it
// does not know).
var All = Reads{Method: true, Host: true, Consumer: true, Route: true, Headers: true}
