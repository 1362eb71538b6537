// Package usage reads the cost of a request from its response: the tokens an LLM upstream says
// it used, from a response header, from a field path of a JSON body ("usage.total_tokens", or a
// sum "usage.input_tokens+usage.output_tokens"), or from the data: event of a streamed
// text/event-stream body that carries that path (OpenAI's last chunk with stream_options
// include_usage, Anthropic's message_delta), or from the last of the events that carry it, for
// an upstream that sends its running total in every event (vLLM's continuous_usage_stats;
// Events).
//
// A body is read incrementally: a Reader is an io.Writer fed the body chunk by chunk as it
// passes to the client, and never keeps it. It holds a push-down JSON scanner (one byte of
// state per open object or array, at most Limits.MaxDepth of them) and, for a stream, the SSE
// line state (a field name of at most five bytes); nothing else grows with the body. A token
// count is parsed as its digits arrive. So memory is bounded by Limits whatever the body:
// enormous, endless, or one line of a gigabyte.
//
// Bad input is an error, never a guess: a value that is negative, fractional, written with an
// exponent, above MaxValue (10^15, algos.MaxCount) or not a number; a path found twice (a
// duplicate key, a second event carrying usage unless the last counts); invalid JSON or UTF-8;
// nesting deeper than MaxDepth; a body longer than MaxBytes; a body cut before its JSON value
// ends; no usage at all. Every error wraps one of the Err values below, for a metric's label,
// and names the path.
// The caller then charges the rule's estimate or fallback: nothing is free. Write never fails,
// so that a body the reader gives up on still reaches the client untouched.
//
// The package uses only the standard library's unicode/utf8, errors and strconv: TinyGo builds
// it into the Envoy filter.
package usage

import (
	"errors"
	"strconv"
	"strings"
)

// MaxValue is the largest token count, or sum of counts, the reader accepts: algos.MaxCount,
// stated here again to keep this package free of imports (a test ties the two).
const MaxValue int64 = 1_000_000_000_000_000

// The classes of error; every error the package returns wraps one of them.
var (
	// ErrMissing: the response ended without the usage (no such header, no such field, no
	// event carrying it, an empty body).
	ErrMissing = errors.New("usage missing")
	// ErrValue: the usage is there but is not a whole number of tokens in [0, MaxValue].
	ErrValue = errors.New("usage value invalid")
	// ErrDuplicate: a path found twice (a duplicate key, a repeated header, a second event
	// carrying usage), so which one counts is the upstream's guess.
	ErrDuplicate = errors.New("usage given twice")
	// ErrSyntax: the body is not valid JSON (or valid UTF-8) where usage is read from it.
	ErrSyntax = errors.New("usage body malformed")
	// ErrDepth: the JSON nests deeper than Limits.MaxDepth.
	ErrDepth = errors.New("usage body nested too deep")
	// ErrTooLarge: the body is longer than Limits.MaxBytes.
	ErrTooLarge = errors.New("usage body too large")
	// ErrTruncated: the body ended inside its JSON value.
	ErrTruncated = errors.New("usage body cut short")
)

// MaxTerms is the most terms a Fields sum may have, and MaxSegments the most keys in one path.
const (
	MaxTerms    = 8
	MaxSegments = 16
)

// Fields is a cost read as the sum of one or more fields: JSON paths of object keys
// ("usage.total_tokens") or header names. Build it with ParsePaths or ParseHeaders.
type Fields struct {
	expr  string
	terms [][]string // JSON: the keys of each path; headers: one name each
}

// String returns the expression Fields was parsed from.
func (f *Fields) String() string { return f.expr }

// Terms returns the number of terms of the sum.
func (f *Fields) Terms() int { return len(f.terms) }

// ParsePaths parses a sum of JSON paths: terms joined by "+", each a non-empty list of object
// keys joined by ".". Array elements cannot be named: usage is an object's field.
func ParsePaths(expr string) (*Fields, error) {
	return parse(expr, func(t string) ([]string, error) {
		segs := strings.Split(t, ".")
		if len(segs) > MaxSegments {
			return nil, errors.New("path " + strconv.Quote(t) + " has more than " + strconv.Itoa(MaxSegments) + " keys")
		}
		for _, s := range segs {
			if s == "" {
				return nil, errors.New("path " + strconv.Quote(t) + " has an empty key")
			}
		}
		return segs, nil
	})
}

// ParseHeaders parses a sum of header names joined by "+". Names are case-insensitive, kept in
// lower case.
func ParseHeaders(expr string) (*Fields, error) {
	return parse(expr, func(t string) ([]string, error) {
		for i := 0; i < len(t); i++ {
			if !tokenChar(t[i]) {
				return nil, errors.New("header name " + strconv.Quote(t) + " has a character a header name cannot have")
			}
		}
		return []string{strings.ToLower(t)}, nil
	})
}

func parse(expr string, term func(string) ([]string, error)) (*Fields, error) {
	f := &Fields{expr: expr}
	parts := strings.Split(expr, "+")
	if len(parts) > MaxTerms {
		return nil, errors.New("more than " + strconv.Itoa(MaxTerms) + " terms")
	}
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, errors.New("empty term in " + strconv.Quote(expr))
		}
		t, err := term(p)
		if err != nil {
			return nil, err
		}
		for _, o := range f.terms {
			if strings.Join(o, ".") == strings.Join(t, ".") {
				return nil, errors.New(strconv.Quote(p) + " named twice")
			}
		}
		f.terms = append(f.terms, t)
	}
	return f, nil
}

// tokenChar reports whether c may appear in a header name (RFC 9110's tchar).
func tokenChar(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*-.^_`|~", c) >= 0 // and '+', which joins terms
}

// Header reads the cost from response headers: the sum of the named headers, each present
// once with a whole number. get returns a header's values (net/http's Header.Values, Kong's
// and proxy-wasm's header maps).
func (f *Fields) Header(get func(name string) []string) (int64, error) {
	var sum int64
	for _, t := range f.terms {
		name := t[0]
		vs := get(name)
		switch {
		case len(vs) == 0:
			return 0, wrap(ErrMissing, "header "+name+": not in the response")
		case len(vs) > 1:
			return 0, wrap(ErrDuplicate, "header "+name+": given "+strconv.Itoa(len(vs))+" times")
		}
		v, err := parseValue(strings.TrimSpace(vs[0]))
		if err != nil {
			return 0, wrapErr(err, "header "+name)
		}
		if sum += v; sum > MaxValue {
			return 0, wrap(ErrValue, "header "+f.expr+": the sum is above 10^15")
		}
	}
	return sum, nil
}

// Prefix returns the cost at f's paths in doc, a JSON document or the first bytes of one (a
// bounded peek at a request body, for an estimate such as max_tokens): the paths found before
// doc ends count, and a document cut short is no error once they are all found.
func (f *Fields) Prefix(doc string) (int64, error) {
	var s scanner
	s.reset(f, DefaultMaxDepth)
	for i := 0; i < len(doc) && s.err == nil && s.found != all(f); i++ {
		s.step(doc[i])
		s.off++
	}
	switch {
	case s.found == all(f):
		var sum int64
		for t := range f.terms {
			if sum += s.vals[t]; sum > MaxValue {
				return 0, wrap(ErrValue, f.expr+": the sum is above 10^15")
			}
		}
		return sum, nil
	case s.err != nil:
		return 0, s.err
	case !s.started():
		return 0, wrap(ErrMissing, "the body is empty")
	case s.state == stEnd:
		return 0, wrap(ErrMissing, "the body has no "+f.expr)
	}
	return 0, wrap(ErrTruncated, "the body's first bytes hold no "+f.expr)
}

// Text returns the string at the JSON path of f (its first term) in doc, a JSON document or the
// first bytes of one (a bounded peek at a request body): for a dimension such as the request's
// model. ok is false when doc has no string there before it ends or turns invalid. A path found
// twice (a duplicate key, which the upstream may read the other way) gives "%duplicate", and a
// string longer than 256 bytes "%long": such requests share one identity each, rather than
// choose theirs.
func (f *Fields) Text(doc string) (v string, ok bool) {
	var s scanner
	s.reset(f, DefaultMaxDepth)
	s.text = true
	for i := 0; i < len(doc) && s.err == nil; i++ {
		s.step(doc[i])
		s.off++
	}
	switch {
	case errors.Is(s.err, ErrDuplicate):
		return "%duplicate", true
	case s.found == 0:
		return "", false
	case s.over:
		return "%long", true
	}
	return string(s.captured), true
}

// parseValue reads a token count written as a JSON number or a header value: decimal digits
// only, at most MaxValue. Every other form is an ErrValue naming what is wrong.
func parseValue(s string) (int64, error) {
	var n number
	for i := 0; i < len(s); i++ {
		if !n.add(s[i]) {
			return 0, wrap(ErrValue, "not a number ("+strconv.Quote(clip(s))+")")
		}
	}
	return n.value(s)
}

// number parses a JSON number's text as it arrives, byte by byte, keeping its value (or why it
// is no count) rather than its text.
type number struct {
	state  uint8 // numStart, ...
	v      int64
	neg    bool
	frac   bool // a fraction or an exponent
	huge   bool // more than MaxValue
	digits int  // bytes seen, for the error's excerpt
}

const (
	numStart = iota // nothing yet
	numMinus        // "-"
	numZero         // "0" or "-0": no more integer digits
	numInt          // integer digits
	numDot          // "."
	numFrac         // fraction digits
	numE            // "e" or "E"
	numESign        // the exponent's sign
	numExp          // exponent digits
)

// add takes the next byte; false if it does not continue a JSON number.
func (n *number) add(c byte) bool {
	digit := '0' <= c && c <= '9'
	switch n.state {
	case numStart, numMinus:
		switch {
		case c == '-' && n.state == numStart:
			n.state, n.neg = numMinus, true
		case c == '0':
			n.state = numZero
		case digit:
			n.state, n.v = numInt, int64(c-'0')
		default:
			return false
		}
	case numZero, numInt:
		switch {
		case digit && n.state == numInt:
			if n.v > (MaxValue-int64(c-'0'))/10 {
				n.huge = true
			} else {
				n.v = n.v*10 + int64(c-'0')
			}
		case c == '.':
			n.state, n.frac = numDot, true
		case c == 'e' || c == 'E':
			n.state, n.frac = numE, true
		default:
			return false
		}
	case numDot, numFrac:
		switch {
		case digit:
			n.state = numFrac
		case (c == 'e' || c == 'E') && n.state == numFrac:
			n.state = numE
		default:
			return false
		}
	case numE:
		switch {
		case c == '+' || c == '-':
			n.state = numESign
		case digit:
			n.state = numExp
		default:
			return false
		}
	case numESign, numExp:
		if !digit {
			return false
		}
		n.state = numExp
	}
	n.digits++
	return true
}

// complete reports whether the bytes so far are a whole JSON number.
func (n *number) complete() bool {
	return n.state == numZero || n.state == numInt || n.state == numFrac || n.state == numExp
}

// value returns the count, or an ErrValue saying why the number is none; text is the number
// as written, quoted in the message when given.
func (n *number) value(text string) (int64, error) {
	if text != "" {
		text = " (" + clip(text) + ")"
	}
	switch {
	case !n.complete():
		return 0, wrap(ErrValue, "not a number"+text)
	case n.neg:
		return 0, wrap(ErrValue, "negative"+text)
	case n.frac:
		return 0, wrap(ErrValue, "not a whole number"+text)
	case n.huge:
		return 0, wrap(ErrValue, "above 10^15")
	}
	return n.v, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 24 {
		return s[:24] + "…"
	}
	return s
}

// usageError is an error of class cls (ErrMissing...) with what and where.
type usageError struct {
	cls error
	msg string
}

func (e *usageError) Error() string { return e.cls.Error() + ": " + e.msg }
func (e *usageError) Unwrap() error { return e.cls }

func wrap(cls error, msg string) error { return &usageError{cls: cls, msg: msg} }

// wrapErr prefixes a usageError's message with where it was found.
func wrapErr(err error, where string) error {
	if u, ok := err.(*usageError); ok { // a type switch: errors.As would link reflection into TinyGo builds
		return &usageError{cls: u.cls, msg: where + ": " + u.msg}
	}
	return err
}

// Class returns the name of err's class for a metric label: "missing", "value", "duplicate",
// "syntax", "depth", "too_large", "truncated", or "other".
func Class(err error) string {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "other"
}

var classes = [...]struct {
	err  error
	name string
}{
	{ErrMissing, "missing"}, {ErrValue, "value"}, {ErrDuplicate, "duplicate"}, {ErrSyntax, "syntax"},
	{ErrDepth, "depth"}, {ErrTooLarge, "too_large"}, {ErrTruncated, "truncated"},
}

// ClassOf returns the error class that text, an error's Error() sent by another process (the
// Envoy filter to dianad's /v1/settle), begins with; nil for none.
func ClassOf(text string) error {
	for _, c := range classes {
		if strings.HasPrefix(text, c.err.Error()) {
			return c.err
		}
	}
	return nil
}
