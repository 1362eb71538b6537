package rules

import (
	"errors"

	"github.com/diana-gw/diana/shared/usage"
)

// Meter reads a response's usage for the rules a result reserved under, as the response passes:
// Header once its headers are known, Write with each chunk of its body, Trailer with its
// trailers if it has any, then Cost for each rule, which Engine.Settle takes. Rules that read the
// same thing share one reader; nothing of the body is kept. A Meter is for one response and is
// not safe for concurrent use.
type Meter struct {
	rules    []*Rule
	costs    []int64
	errs     []error
	used     []usage.Usage   // by rule: a format's usage, once read
	readers  []*usage.Reader // by rule; nil for a header rule or a body the meter does not read
	distinct []*usage.Reader
	lim      usage.Limits
	path     string // the request's path, for usage.FormatAuto
	model    string // the request's model, "" when unknown
	seen     map[string][]string
	headers  bool // Header was called
	trailers bool // Trailer was called
	ended    bool
}

// Meter returns the meter of res's response, or nil when res reserved nothing. lim bounds each
// body reader.
func (r *Result) Meter(lim usage.Limits) *Meter {
	if len(r.reserved) == 0 {
		return nil
	}
	rs := make([]*Rule, len(r.reserved))
	for i, rv := range r.reserved {
		rs[i] = rv.rule
	}
	m := NewMeter(rs, lim, r.llm.Path)
	m.model = r.llm.model()
	return m
}

// NewMeter returns a meter for rules' usage (each rule needs only its Name and Usage) of the
// response to a request to path: for a front end whose rules another process decided (the Envoy
// filter settling through dianad).
func NewMeter(rs []*Rule, lim usage.Limits, path string) *Meter {
	n := len(rs)
	return &Meter{lim: lim, rules: rs, path: path, costs: make([]int64, n), errs: make([]error, n),
		used: make([]usage.Usage, n), readers: make([]*usage.Reader, n)}
}

// ReadsBody reports whether a rule of m reads the response body: a front end that can read it
// only at a cost (buffering, a body callback) asks first.
func (m *Meter) ReadsBody() bool {
	for _, r := range m.rules {
		if r.Usage.Header == nil {
			return true
		}
	}
	return false
}

// format returns the format rule u reads the response in, nil for usage.FormatAuto on a path
// that says nothing.
func (m *Meter) format(u *Usage) *usage.Format {
	if u.Auto {
		return usage.FormatForPath(m.path)
	}
	return u.Format
}

// Header reads the response's headers, which get returns by name (every value): the costs of
// the header rules, and for the body rules how to read the body, by its Content-Type. A body
// with a Content-Encoding other than identity cannot be read: those rules get an error.
func (m *Meter) Header(get func(name string) []string) {
	first := func(name string) string {
		if v := get(name); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if m.headers {
		return
	}
	m.headers = true
	framing := usage.FramingOf(first("content-type"))
	enc := first("content-encoding")
	for i, r := range m.rules {
		u := r.Usage
		if u.Header != nil {
			m.costs[i], m.errs[i] = u.Header.Header(func(name string) []string {
				v := get(name)
				if m.seen == nil {
					m.seen = map[string][]string{}
				}
				m.seen[name] = v
				return v
			})
			continue
		}
		if enc != "" && enc != "identity" {
			m.errs[i] = &encodedError{what: "response", enc: enc}
			continue
		}
		for j := range i {
			if m.readers[j] != nil && m.sameReader(m.rules[j].Usage, u) {
				m.readers[i] = m.readers[j]
			}
		}
		if m.readers[i] == nil {
			if u.Body != nil {
				m.readers[i] = usage.NewReader(u.Body, framing == usage.EventStream, m.lim)
				m.readers[i].SetEvents(u.StreamUsage)
			} else {
				m.readers[i] = usage.NewFormatReader(m.format(u), framing, m.lim)
			}
			m.distinct = append(m.distinct, m.readers[i])
		}
	}
}

// sameReader reports whether rules reading a and b can share a reader.
func (m *Meter) sameReader(a, b *Usage) bool {
	if a.Body != nil || b.Body != nil {
		return a.Body != nil && b.Body != nil && a.Body.String() == b.Body.String() && a.StreamUsage == b.StreamUsage
	}
	return m.format(a) == m.format(b)
}

// encodedError is the error of a body whose Content-Encoding hides its usage.
type encodedError struct{ what, enc string }

func (e *encodedError) Error() string {
	if e.enc == "" {
		return usage.ErrSyntax.Error() + ": the " + e.what + " body is compressed (Content-Encoding)"
	}
	return usage.ErrSyntax.Error() + ": the " + e.what + " body has Content-Encoding " + e.enc
}
func (e *encodedError) Unwrap() error { return usage.ErrSyntax }

// Trailer reads the response's trailers, which get returns by name (every value), once the body
// has ended: a header rule's fields are looked for in the headers and the trailers together, so
// that an upstream that knows the usage only after the body (a gRPC or HTTP/2 stream) sends it
// as a trailer. A field in both is given twice (usage.ErrDuplicate), charged the fallback as a
// repeated header is: neither value wins, the upstream's intent being a guess.
func (m *Meter) Trailer(get func(name string) []string) {
	if !m.headers || m.trailers || m.ended {
		return
	}
	m.trailers = true
	for i, r := range m.rules {
		if r.Usage.Header == nil {
			continue
		}
		both := ""
		m.costs[i], m.errs[i] = r.Usage.Header.Header(func(name string) []string {
			h, t := m.seen[name], get(name)
			switch {
			case len(t) == 0:
				return h
			case len(h) == 0:
				return t
			}
			both = name
			return append(append([]string(nil), h...), t...)
		})
		if both != "" && errors.Is(m.errs[i], usage.ErrDuplicate) {
			m.errs[i] = &trailedError{both}
		}
	}
}

// trailedError is the error of a usage header given in both the headers and the trailers.
type trailedError struct{ name string }

func (e *trailedError) Error() string {
	return usage.ErrDuplicate.Error() + ": header " + e.name + ": in the response's headers and in its trailers"
}
func (e *trailedError) Unwrap() error { return usage.ErrDuplicate }

// Write reads the next chunk of the body. It never fails (see usage.Reader.Write).
func (m *Meter) Write(p []byte) (int, error) {
	for _, rd := range m.distinct {
		rd.Write(p)
	}
	return len(p), nil
}

// end ends the body, once: a body that never started, as after a transport error, reads as
// empty.
func (m *Meter) end() {
	if m.ended {
		return
	}
	m.ended = true
	for i, rd := range m.readers {
		switch {
		case !m.headers:
			m.errs[i] = errNoHeaders
		case rd != nil:
			m.used[i], m.errs[i] = rd.Usage()
			if m.errs[i] != nil {
				m.used[i], _ = usage.Partial(m.errs[i])
			}
			m.costs[i] = m.rules[i].Usage.Price(m.model, m.used[i])
		}
	}
}

// Cost returns what the response says rule r cost, or why it says nothing: for Engine.Settle,
// once the body has ended. With an error, the cost is what a stream cut short counted before it
// was cut (usage.Partial), else 0. A rule the meter was not made for has ErrMissing.
func (m *Meter) Cost(r *Rule) (int64, error) {
	m.end()
	for i, mr := range m.rules {
		if mr == r {
			return m.costs[i], m.errs[i]
		}
	}
	return 0, errNoHeaders
}

// Usage returns the tokens the response says rule r used, in its format (or the sum of its
// fields), or why it says nothing: for a front end that settles through another process, which
// prices them (the Envoy filter through dianad's POST /v1/settle).
func (m *Meter) Usage(r *Rule) (usage.Usage, error) {
	m.end()
	for i, mr := range m.rules {
		if mr == r {
			u := m.used[i]
			if mr.Usage.Header != nil && m.errs[i] == nil {
				u.Tokens = usage.Tokens{usage.Input: m.costs[i]}
			}
			return u, m.errs[i]
		}
	}
	return usage.Usage{}, errNoHeaders
}

// errNoHeaders is the error of a rule whose response never came (no headers, no body).
var errNoHeaders = &noResponse{}

type noResponse struct{}

func (*noResponse) Error() string { return usage.ErrMissing.Error() + ": no response" }
func (*noResponse) Unwrap() error { return usage.ErrMissing }

// ReadsFormat reports whether a rule res reserved under reads the response in the format named
// (a usage.Format's Name), given, or picked by the request's path (usage.FormatAuto).
func (r *Result) ReadsFormat(name string) bool {
	for _, rv := range r.reserved {
		if u := rv.rule.Usage; u.ReadsFormat() {
			m := Meter{path: r.llm.Path}
			if f := m.format(u); f != nil && f.Name == name {
				return true
			}
		}
	}
	return false
}
