package usage

import (
	"errors"
	"strconv"
	"strings"
	"unsafe"

	"github.com/diana-gw/diana/shared/jsontok"
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

// Read returns the sum at f's paths in doc, the first bytes of a JSON document (a bounded peek at
// a request body, for an estimate such as max_tokens); whole says whether doc is all of it. The
// whole of doc is read, so that a path given twice is found wherever the second is. The sum is
// an error that a client cannot steer: ErrMissing when doc is whole and has no such path (the
// caller's default then applies), and otherwise, when a path is not read for sure, an error of
// another class: ErrTruncated when doc is not whole (what follows may hold a path, or hold it
// again), ErrDuplicate, ErrValue, ErrSyntax or ErrDepth.
func (f *Fields) Read(doc string, whole bool) (int64, error) {
	var s scan
	s.run(f.terms, doc, whole, false)
	if s.err != nil {
		return 0, s.err
	}
	var sum int64
	for t := range f.terms {
		if s.found&(1<<t) == 0 {
			if !whole {
				return 0, wrap(ErrTruncated, "the body's first "+strconv.Itoa(len(doc))+" bytes hold no "+strings.Join(f.terms[t], "."))
			}
			return 0, wrap(ErrMissing, "the body has no "+strings.Join(f.terms[t], "."))
		}
		v, err := count(s.vals[t], s.long[t])
		if err != nil {
			return 0, wrapErr(err, strings.Join(f.terms[t], "."))
		}
		if sum += v; sum > MaxValue {
			return 0, wrap(ErrValue, f.expr+": the sum is above 10^15")
		}
	}
	if !whole {
		return 0, wrap(ErrTruncated, "the body goes on after its first "+strconv.Itoa(len(doc))+" bytes, which may give "+f.expr+" again")
	}
	return sum, nil
}

// Text returns the string at the JSON path of f (its first term) in doc, a JSON document or the
// first bytes of one (a bounded peek at a request body): for a dimension such as the request's
// model. ok is false when doc has no string there before it ends or turns invalid. A path found
// twice (a duplicate key, which the upstream may read the other way) gives "%duplicate", and a
// string longer than 256 bytes "%long": such requests share one identity each, rather than
// choose theirs.
func (f *Fields) Text(doc string) (v string, ok bool) {
	var s scan
	s.run(f.terms[:1], doc, false, true)
	switch {
	case errors.Is(s.err, ErrDuplicate):
		return "%duplicate", true
	case s.found == 0:
		return "", false
	case s.long[0]:
		return "%long", true
	}
	return s.vals[0], true
}

// scan reads the values at a few paths of a JSON document held whole or in part: each path's
// value, its text (a number's, or a string's when text), and the first error.
type scan struct {
	found uint64
	vals  [MaxTerms]string
	long  [MaxTerms]bool
	err   error
}

// run reads doc; whole says whether the document ends with it. A string is taken at a path when
// text, else a number; a value of another kind is ErrValue.
func (s *scan) run(paths [][]string, doc string, whole, text bool) {
	_, err := walkPeek(paths, doc, whole, func(k jsontok.Kind, leaf uint64, t *jsontok.Tokenizer) error {
		if leaf == 0 || s.err != nil {
			return nil
		}
		p := firstPath(leaf)
		want := jsontok.Number
		if text {
			want = jsontok.String
		}
		if k != want {
			s.fail(wrap(ErrValue, strings.Join(paths[p], ".")+": "+kindName(k)+", not "+kindName(want)))
			return nil
		}
		s.found |= leaf
		s.vals[p], s.long[p] = string(t.Text()), t.Long()
		return nil
	})
	if err != nil {
		s.fail(err)
	}
}

// walkPeek reads doc, the first bytes of a JSON document (whole: all of them), and calls token
// with each token and the paths whose value it is (leaf, 0 for none), until token returns an
// error. It returns whether the document was read to its end, and the first error: token's, a
// key on a path given twice, or the document's own (one cut short is none unless whole; an empty
// one is none).
func walkPeek(paths [][]string, doc string, whole bool, token func(k jsontok.Kind, leaf uint64, t *jsontok.Tokenizer) error) (bool, error) {
	var t jsontok.Tokenizer
	var w walker
	t.Reset(DefaultMaxDepth, maxText)
	w.reset(paths)
	t.Feed(readOnly(doc))
	if whole {
		t.End()
	}
	for {
		k := t.Next()
		switch k {
		case jsontok.None:
			return t.Done(), nil
		case jsontok.Error:
			if e := t.Err(); t.Started() && (!e.Truncated() || whole) {
				return false, syntaxErr(e)
			}
			return false, nil
		}
		leaf, err := w.token(k, t.Text(), t.Long())
		if err == nil {
			err = token(k, leaf, &t)
		}
		if err != nil {
			return false, err
		}
	}
}

func (s *scan) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// readOnly returns the bytes of s, which the tokenizer reads and never writes, without a copy:
// a request's peek may hold a megabyte.
func readOnly(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// firstPath returns the index of the lowest bit of m.
func firstPath(m uint64) int {
	p := 0
	for m&1 == 0 {
		m >>= 1
		p++
	}
	return p
}

// kindName names a value's kind in a message.
func kindName(k jsontok.Kind) string {
	switch k {
	case jsontok.BeginObject:
		return "an object"
	case jsontok.BeginArray:
		return "an array"
	case jsontok.String:
		return "a string"
	case jsontok.Number:
		return "a number"
	}
	return k.String()
}

// parseValue reads a token count written as a header value: a JSON number, whole, in
// [0, MaxValue]. Every other form is an ErrValue naming what is wrong.
func parseValue(s string) (int64, error) {
	if !jsontok.IsNumber(s) {
		return 0, wrap(ErrValue, "not a number ("+strconv.Quote(clip(s))+")")
	}
	return count(s, false)
}

// count reads a token count from a JSON number's text (long: cut by the tokenizer): whole, in
// [0, MaxValue]. Every other number is an ErrValue saying why.
func count[T string | []byte](text T, long bool) (int64, error) {
	if len(text) > 0 && text[0] == '-' {
		return 0, wrap(ErrValue, "negative ("+clip(string(text))+")")
	}
	for i := 0; i < len(text); i++ {
		if c := text[i]; c == '.' || c == 'e' || c == 'E' {
			return 0, wrap(ErrValue, "not a whole number ("+clip(string(text))+")")
		}
	}
	if long || len(text) > 16 {
		return 0, wrap(ErrValue, "above 10^15")
	}
	var v int64
	for i := 0; i < len(text); i++ {
		v = v*10 + int64(text[i]-'0')
	}
	if v > MaxValue {
		return 0, wrap(ErrValue, "above 10^15")
	}
	return v, nil
}

// sumReader reads a Fields sum from a body's documents: a document holding any of the paths
// carries the usage and must hold them all; a second such document is ErrDuplicate, unless the
// last counts (LastEvent).
type sumReader struct {
	f      *Fields
	events Events
	vals   [MaxTerms]int64
	found  uint64
	cost   int64
	read   bool // a document carried the usage
}

func (s *sumReader) paths() [][]string { return s.f.terms }
func (s *sumReader) arrayDocs() bool   { return false }
func (s *sumReader) done()             {}
func (s *sumReader) begin()            { s.found = 0 }

func (s *sumReader) value(leaf uint64, k jsontok.Kind, text []byte, long bool) error {
	p := firstPath(leaf)
	name := strings.Join(s.f.terms[p], ".")
	if k != jsontok.Number {
		return wrap(ErrValue, name+": "+kindName(k)+", not a number")
	}
	v, err := count(text, long)
	if err != nil {
		return wrapErr(err, name)
	}
	for t := range s.f.terms {
		if leaf&(1<<t) != 0 {
			s.vals[t] = v
		}
	}
	s.found |= leaf
	return nil
}

func (s *sumReader) end() error {
	if s.found == 0 {
		return nil
	}
	if s.read && s.events != LastEvent {
		return wrap(ErrDuplicate, "a second event carries "+s.f.expr)
	}
	var sum int64
	for t, segs := range s.f.terms {
		if s.found&(1<<t) == 0 {
			return wrap(ErrMissing, "a document carries usage without "+strings.Join(segs, "."))
		}
		if sum += s.vals[t]; sum > MaxValue {
			return wrap(ErrValue, s.f.expr+": the sum is above 10^15")
		}
	}
	s.cost, s.read = sum, true // with LastEvent, over the count of an earlier event
	return nil
}

func (s *sumReader) finish(framing Framing, complete bool) error {
	switch {
	case s.read:
		return nil
	case framing == EventStream:
		return wrap(ErrMissing, "the stream ended without an event carrying "+s.f.expr)
	}
	return wrap(ErrMissing, "the body has no "+s.f.expr)
}

func (s *sumReader) usage() Usage { return Usage{Tokens: Tokens{Input: s.cost}} }
