package usage

import (
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/jsontok"
)

// A Format is how one provider's responses carry their usage: which fields of its JSON documents
// count tokens, how those counts make the token classes, and which marks say that a document is
// the provider's and that a stream has ended. Each provider is one small table (openai.go,
// anthropic.go, ...) read by the one reader below.
//
// A body is read as its documents: one JSON document, or a stream's events or lines (Gemini's
// stream without alt=sse: a JSON array, one document per element). Every document may carry
// counts; the counts are cumulative, as Anthropic's message_delta and Gemini's chunks send them:
// the last value of each count is the response's, a count a document omits keeps its earlier
// value, and a count that goes down is ErrValue. A stream must end with the provider's own end
// (OpenAI's [DONE], Anthropic's message_stop, Responses' response.completed, Gemini's finishReason,
// Ollama's done); one cut before is ErrTruncated, with what it counted so far (Partial).
type Format struct {
	Name string
	// fields are the paths of the format's counts, model and marks.
	fields []field
	// tokens turns the counts of a response into token classes.
	tokens func(c *counts) (Tokens, error)
	// mark reads a mark: whether the document is the provider's (sure) and the stream's last
	// (final). k and text are the mark's value.
	mark func(m int, k jsontok.Kind, text []byte) (sure, final bool)
	// doneIsFinal: a stream's "[DONE]" ends it (OpenAI).
	doneIsFinal bool
	// countsAreSure: counts are the format's own names, which no other format has.
	countsAreSure bool
	// arrayDocs: a JSON body that is an array holds a document per element.
	arrayDocs bool

	paths [][]string // the fields' paths, split
}

// A field is a path of a format's documents and what its value is.
type field struct {
	path string
	role uint8 // roleCount, roleModel or roleMark
	n    int   // the count's slot, or the mark's number
}

const (
	roleCount = iota
	roleModel
	roleMark
)

// maxCounts is the most counts a format reads.
const maxCounts = 8

// counts are the counts a response has given, by slot.
type counts struct {
	v    [maxCounts]int64
	have uint8
}

func (c *counts) has(i int) bool  { return c.have&(1<<i) != 0 }
func (c *counts) get(i int) int64 { return c.v[i] }

// init splits the fields' paths.
func (f *Format) init() *Format {
	for _, fl := range f.fields {
		f.paths = append(f.paths, strings.Split(fl.path, "."))
	}
	return f
}

// FormatAuto is the name of the format that picks one of Formats by the request's path
// (FormatForPath) or, where the path says nothing, by the response's own marks.
const FormatAuto = "auto"

// Formats are the provider formats, in the order FormatAuto prefers them when a response's
// marks fit more than one.
var Formats = []*Format{openAI.init(), openAIResponses.init(), anthropic.init(), gemini.init(), ollama.init()}

// FormatNames are the names a config may give a format: FormatAuto, then each of Formats.
var FormatNames = func() []string {
	names := []string{FormatAuto}
	for _, f := range Formats {
		names = append(names, f.Name)
	}
	return names
}()

// FormatNamed returns the format of this name, nil for FormatAuto or an unknown name.
func FormatNamed(name string) *Format {
	for _, f := range Formats {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// FormatForPath returns the format of a request to path (its path without the query), by the
// providers' API paths, wherever they are mounted: ".../chat/completions", ".../completions" and
// ".../embeddings" are OpenAI's (and every OpenAI-compatible server's), ".../responses" OpenAI's
// Responses, ".../messages" Anthropic's, ".../models/M:generateContent" and
// ":streamGenerateContent" Gemini's (and Vertex AI's), ".../api/chat", "/api/generate",
// "/api/embed" and "/api/embeddings" Ollama's. nil: the path says nothing.
func FormatForPath(path string) *Format {
	last := path[strings.LastIndexByte(path, '/')+1:]
	if _, method, ok := strings.Cut(last, ":"); ok {
		if method == "generateContent" || method == "streamGenerateContent" {
			return gemini
		}
		return nil
	}
	switch {
	case strings.HasSuffix(path, "/api/chat"), strings.HasSuffix(path, "/api/generate"),
		strings.HasSuffix(path, "/api/embed"), strings.HasSuffix(path, "/api/embeddings"):
		return ollama
	}
	switch last {
	case "completions", "embeddings":
		return openAI
	case "responses":
		return openAIResponses
	case "messages":
		return anthropic
	}
	return nil
}

// NewFormatReader returns a Reader of a response's usage in format f, its body framed so. f nil
// is FormatAuto with a path that said nothing: the reader reads every format at once, and the
// response's marks choose.
func NewFormatReader(f *Format, framing Framing, lim Limits) *Reader {
	r := &Reader{}
	if f != nil {
		r.reset(newFormatReader(f), framing, lim)
	} else {
		r.reset(newAutoReader(), framing, lim)
	}
	return r
}

// formatReader reads a response in one format.
type formatReader struct {
	f     *Format
	doc   counts // this document's
	run   counts // the response's so far
	found bool   // a document carried counts
	final bool   // the stream's end was seen
	sure  bool   // a document had the format's own marks
	model string

	docSure, docFinal bool
}

func newFormatReader(f *Format) *formatReader { return &formatReader{f: f} }

func (r *formatReader) paths() [][]string { return r.f.paths }
func (r *formatReader) arrayDocs() bool   { return r.f.arrayDocs }
func (r *formatReader) begin()            { r.doc, r.docSure, r.docFinal = counts{}, false, false }

func (r *formatReader) done() {
	if r.f.doneIsFinal {
		r.final = true
	}
}

func (r *formatReader) value(leaf uint64, k jsontok.Kind, text []byte, long bool) error {
	fl := r.f.fields[firstPath(leaf)]
	switch fl.role {
	case roleModel:
		if k == jsontok.String {
			r.model = string(text)
		}
	case roleMark:
		sure, final := r.f.mark(fl.n, k, text)
		r.docSure = r.docSure || sure
		r.docFinal = r.docFinal || final
	case roleCount:
		switch k {
		case jsontok.Null:
			return nil // OpenAI-compatible servers send null for a count they do not keep
		case jsontok.Number:
		default:
			return wrap(ErrValue, fl.path+": "+kindName(k)+", not a number")
		}
		v, err := count(text, long)
		if err != nil {
			return wrapErr(err, fl.path)
		}
		if r.doc.has(fl.n) {
			return wrap(ErrDuplicate, fl.path+": a document gives the count twice")
		}
		r.doc.v[fl.n], r.doc.have = v, r.doc.have|1<<fl.n
	}
	return nil
}

func (r *formatReader) end() error {
	r.sure = r.sure || r.docSure || r.doc.have != 0 && r.f.countsAreSure
	r.final = r.final || r.docFinal
	for i := range maxCounts {
		if !r.doc.has(i) {
			continue
		}
		if r.run.has(i) && r.doc.v[i] < r.run.v[i] {
			return wrap(ErrValue, r.f.countName(i)+" went down from "+strconv.FormatInt(r.run.v[i], 10)+" to "+strconv.FormatInt(r.doc.v[i], 10))
		}
		r.run.v[i], r.run.have = r.doc.v[i], r.run.have|1<<i
		r.found = true
	}
	return nil
}

// countName names a count's slot by its first path.
func (f *Format) countName(slot int) string {
	for _, fl := range f.fields {
		if fl.role == roleCount && fl.n == slot {
			return fl.path
		}
	}
	return "?"
}

func (r *formatReader) finish(framing Framing, complete bool) error {
	if !r.found {
		if framing == JSONBody {
			return wrap(ErrMissing, "the body has no "+r.f.Name+" usage")
		}
		return wrap(ErrMissing, "the stream ended without "+r.f.Name+" usage")
	}
	t, err := r.f.tokens(&r.run)
	if err != nil {
		return err
	}
	if framing != JSONBody && !r.final {
		return &partialError{u: Usage{Tokens: t, Model: r.model, Format: r.f.Name}}
	}
	return nil
}

func (r *formatReader) usage() Usage {
	t, _ := r.f.tokens(&r.run)
	return Usage{Tokens: t, Model: r.model, Format: r.f.Name}
}

// partialError is the error of a stream cut before its end, with what it had counted.
type partialError struct{ u Usage }

func (e *partialError) Error() string {
	return ErrTruncated.Error() + ": the stream ended before its last usage (" + strconv.FormatInt(e.u.Tokens.Sum(), 10) + " tokens counted so far)"
}
func (e *partialError) Unwrap() error { return ErrTruncated }

// Partial returns what a stream that err says was cut short had counted before it was cut.
func Partial(err error) (Usage, bool) {
	if p, ok := err.(*partialError); ok { // a type switch: errors.As would link reflection into TinyGo builds
		return p.u, true
	}
	return Usage{}, false
}

// autoReader reads a response in every format at once, for FormatAuto when the request's path
// said nothing: at the end, the first format whose marks the response had, else the first that
// found counts, is the response's. A format's error counts only if it is the one chosen.
type autoReader struct {
	rs    []*formatReader
	errs  []error
	first []int // the index of each format's first path in all
	all   [][]string
}

func newAutoReader() *autoReader {
	a := &autoReader{}
	for _, f := range Formats {
		a.first = append(a.first, len(a.all))
		a.all = append(a.all, f.paths...)
		a.rs = append(a.rs, newFormatReader(f))
	}
	a.errs = make([]error, len(a.rs))
	return a
}

func (a *autoReader) paths() [][]string { return a.all }
func (a *autoReader) arrayDocs() bool   { return gemini.arrayDocs }

func (a *autoReader) begin() {
	for _, r := range a.rs {
		r.begin()
	}
}

func (a *autoReader) done() {
	for _, r := range a.rs {
		r.done()
	}
}

func (a *autoReader) value(leaf uint64, k jsontok.Kind, text []byte, long bool) error {
	for i, r := range a.rs {
		if m := leaf >> a.first[i] & all(len(r.f.paths)); m != 0 && a.errs[i] == nil {
			a.errs[i] = r.value(m, k, text, long)
		}
	}
	return nil
}

func (a *autoReader) end() error {
	for i, r := range a.rs {
		if a.errs[i] == nil {
			a.errs[i] = r.end()
		}
	}
	return nil
}

// pick returns the index of the format the response is read as.
func (a *autoReader) pick() int {
	for i, r := range a.rs {
		if r.sure {
			return i
		}
	}
	for i, r := range a.rs {
		if r.found || a.errs[i] != nil {
			return i
		}
	}
	return 0
}

func (a *autoReader) finish(framing Framing, complete bool) error {
	i := a.pick()
	if a.errs[i] != nil {
		return a.errs[i]
	}
	if !a.rs[i].found {
		what := "the body has"
		if framing != JSONBody {
			what = "the stream ended with"
		}
		return wrap(ErrMissing, what+" no usage in any format ("+strings.Join(FormatNames[1:], ", ")+")")
	}
	return a.rs[i].finish(framing, complete)
}

func (a *autoReader) usage() Usage { return a.rs[a.pick()].usage() }
