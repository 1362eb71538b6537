package usage

import (
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/jsontok"
)

// Limits bound what a Reader reads. Its memory is a few hundred bytes plus a few bytes per level
// of MaxDepth, whatever the body.
type Limits struct {
	// MaxDepth is the deepest nesting of JSON objects and arrays read (default DefaultMaxDepth,
	// at most MaxMaxDepth): LLM responses nest a handful of levels.
	MaxDepth int
	// MaxBytes is the longest body read, in bytes; a longer one is ErrTooLarge. 0: no bound
	// (memory is bounded anyway; a stream may be long).
	MaxBytes int64
}

// DefaultMaxDepth is Limits.MaxDepth's default, and MaxMaxDepth its largest value.
const (
	DefaultMaxDepth = 64
	MaxMaxDepth     = 1024
)

// maxText bounds the text the reader keeps of a key or a string: a model's name, an event's type.
// A longer key matches no path; a longer string is said to be long (Fields.Text).
const maxText = 256

// Events says which events of a stream carry the usage of a Fields reader.
type Events uint8

const (
	// OneEvent: one event carries the usage (OpenAI's last chunk with
	// stream_options.include_usage, Anthropic's message_delta); a second is ErrDuplicate.
	OneEvent Events = iota
	// LastEvent: any event may carry the usage so far, and the last one that does counts
	// (vLLM's stream_options.continuous_usage_stats, a running total in every chunk).
	LastEvent
)

// EventsNames are the Events as a config names them, in their order: "once", "last".
var EventsNames = []string{"once", "last"}

func (e Events) String() string {
	if int(e) < len(EventsNames) {
		return EventsNames[e]
	}
	return "Events(" + strconv.Itoa(int(e)) + ")"
}

// Framing is how a response body holds its JSON documents.
type Framing uint8

const (
	// JSONBody: the body is one JSON document (a JSON array of documents for a format that
	// streams so: Gemini's streamGenerateContent without alt=sse).
	JSONBody Framing = iota
	// EventStream: text/event-stream; each event's data is a document (OpenAI's "[DONE]" aside).
	EventStream
	// JSONLines: newline-delimited JSON (application/x-ndjson: Ollama's streams).
	JSONLines
)

// FramingOf returns the framing of a response body of this Content-Type.
func FramingOf(contentType string) Framing {
	mt, _, _ := strings.Cut(contentType, ";")
	switch strings.ToLower(strings.TrimSpace(mt)) {
	case "text/event-stream":
		return EventStream
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines":
		return JSONLines
	}
	return JSONBody
}

// IsStream reports whether a response of this Content-Type is a server-sent event stream,
// whose usage is read from its events rather than from one JSON document.
func IsStream(contentType string) bool { return FramingOf(contentType) == EventStream }

// docReader is what a Reader reads a body's documents for: a sum of fields, or a format's
// token classes.
type docReader interface {
	// paths returns the paths whose values the reader wants.
	paths() [][]string
	// begin starts a document; value takes a value its paths lead to (leaf: which); end ends
	// a document read whole.
	begin()
	value(leaf uint64, k jsontok.Kind, text []byte, long bool) error
	end() error
	// done notes a stream's "[DONE]" event, which is no JSON.
	done()
	// arrayDocs reports whether a JSON body that is an array holds one document per element.
	arrayDocs() bool
	// finish ends the body: the error of a body that says nothing usable, or nil; usage then
	// returns what it said.
	finish(framing Framing, complete bool) error
	usage() Usage
}

// A Reader reads a cost from a response body fed to it chunk by chunk (Write), and gives it when
// the body ends (End). The body is read per its Framing: one JSON document; a text/event-stream
// (lines ending in LF, CRLF or CR, an event's data: lines joined with LF, an event ending at a
// blank line, so that an event the body ends inside is dropped, as an EventSource drops it;
// comments and other fields skipped; each event's data a JSON document, but OpenAI's "[DONE]");
// or JSON lines. What it reads from the documents is a Fields sum or a Format's token counts.
//
// A Reader is not safe for concurrent use. Its zero value is not usable: see NewReader and
// NewFormatReader.
type Reader struct {
	d       docReader
	framing Framing
	lim     Limits
	n       int64 // bytes written
	tok     jsontok.Tokenizer
	w       walker
	err     error // the first error; the reader reads nothing after it
	ended   bool

	inDoc    bool // a document has begun (begin was called)
	complete bool // the JSON body was a whole document; a JSON lines body ended its last line
	arrays   bool // the JSON body is an array of documents, being read

	// A stream's state: where in its line the reader is, the field name read so far, the event
	// being read.
	line    uint8
	name    [5]byte // the field name's first bytes: "data" and one more
	nameLen int
	lastCR  bool
	evData  bool    // the event has a data: line
	hold    [6]byte // the event's first bytes, held while they may be "[DONE]"
	holdN   int
	holding bool
}

const (
	lnStart = iota // at the start of a line
	lnName         // reading a field name
	lnSpace        // after "data:", before the optional space
	lnData         // reading a data: line's value
	lnSkip         // in a comment or a field other than data
)

// NewReader returns a Reader of the sum at f in a body: a stream if stream (see IsStream), else
// one JSON document.
func NewReader(f *Fields, stream bool, lim Limits) *Reader {
	r := &Reader{}
	r.Reset(f, stream, lim)
	return r
}

// Reset makes r a new reader of the sum at f, keeping its memory.
func (r *Reader) Reset(f *Fields, stream bool, lim Limits) {
	framing := JSONBody
	if stream {
		framing = EventStream
	}
	var s *sumReader
	if old, ok := r.d.(*sumReader); ok {
		s = old
	} else {
		s = &sumReader{}
	}
	*s = sumReader{f: f}
	r.reset(s, framing, lim)
}

func (r *Reader) reset(d docReader, framing Framing, lim Limits) {
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = DefaultMaxDepth
	}
	lim.MaxDepth = min(lim.MaxDepth, MaxMaxDepth)
	tok, w := r.tok, r.w
	*r = Reader{d: d, framing: framing, lim: lim, tok: tok, w: w}
	r.startDoc()
}

// SetEvents says which events of a stream carry a Fields reader's usage (default OneEvent); call
// it before the first Write. Reset sets OneEvent again.
func (r *Reader) SetEvents(e Events) {
	if s, ok := r.d.(*sumReader); ok {
		s.events = e
	}
}

// startDoc prepares the tokenizer and the walker for the next document.
func (r *Reader) startDoc() {
	r.tok.Reset(r.lim.MaxDepth, maxText)
	r.w.reset(r.d.paths())
	r.inDoc = false
}

// Write reads the next chunk of the body. It always returns len(p), nil: a body the reader
// cannot read still passes on (io.MultiWriter, io.TeeReader); End reports why.
func (r *Reader) Write(p []byte) (int, error) {
	r.write(p)
	return len(p), nil
}

func (r *Reader) write(p []byte) {
	if r.err != nil || r.ended {
		return
	}
	over := false
	if r.lim.MaxBytes > 0 && int64(len(p)) > r.lim.MaxBytes-r.n {
		p, over = p[:r.lim.MaxBytes-r.n], true
	}
	r.n += int64(len(p))
	switch r.framing {
	case EventStream:
		r.writeStream(p)
	case JSONLines:
		r.writeLines(p)
	default:
		r.feed(p)
	}
	if over && r.err == nil {
		r.err = wrap(ErrTooLarge, "the body is longer than "+strconv.FormatInt(r.lim.MaxBytes, 10)+" bytes")
	}
}

// feed gives the current document its next bytes and reads the tokens they complete.
func (r *Reader) feed(p []byte) {
	if r.err != nil || len(p) == 0 {
		return
	}
	r.tok.Feed(p)
	r.tokens()
}

// tokens reads the tokens the tokenizer has, passing the values on the paths to the doc reader.
func (r *Reader) tokens() {
	for r.err == nil {
		k := r.tok.Next()
		switch k {
		case jsontok.None:
			return
		case jsontok.Error:
			r.err = syntaxErr(r.tok.Err())
			return
		}
		if r.framing == JSONBody && r.d.arrayDocs() && r.arrayToken(k) {
			continue
		}
		if !r.inDoc {
			r.inDoc = true
			r.d.begin()
		}
		leaf, err := r.w.token(k, r.tok.Text(), r.tok.Long())
		if err == nil && leaf != 0 {
			err = r.d.value(leaf, k, r.tok.Text(), r.tok.Long())
		}
		if err != nil {
			r.err = err
			return
		}
	}
}

// arrayToken reads the tokens of a JSON body that is an array of documents: it takes the array's
// own tokens, starts a document with each element and ends it with the element. It reports
// whether it took k.
func (r *Reader) arrayToken(k jsontok.Kind) bool {
	depth := r.tok.Depth()
	switch {
	case k == jsontok.BeginArray && depth == 1 && !r.arrays && !r.inDoc:
		r.arrays = true
		return true
	case !r.arrays:
		return false
	case k == jsontok.EndArray && depth == 0:
		return true
	}
	if !r.inDoc {
		r.inDoc = true
		r.w.reset(r.d.paths())
		r.d.begin()
	}
	leaf, err := r.w.token(k, r.tok.Text(), r.tok.Long())
	if err == nil && leaf != 0 {
		err = r.d.value(leaf, k, r.tok.Text(), r.tok.Long())
	}
	if err == nil && depth == 1 && k != jsontok.Key { // the element has ended
		r.inDoc = false
		err = r.d.end()
	}
	if err != nil {
		r.err = err
	}
	return true
}

// endDoc ends the current document (an event's data, a line, the body): the doc reader is told
// of a whole one; a document cut short or malformed is an error.
func (r *Reader) endDoc() {
	if r.err != nil {
		return
	}
	if !r.tok.Started() { // nothing but whitespace: no document
		r.startDoc()
		return
	}
	r.tok.End()
	r.tokens()
	switch {
	case r.err != nil:
	case r.arrays:
		r.complete = true
	default:
		r.err = r.d.end()
		r.complete = r.err == nil
	}
	r.startDoc()
}

// syntaxErr wraps a tokenizer's error in the class it belongs to.
func syntaxErr(e *jsontok.SyntaxError) error {
	switch {
	case e.TooDeep():
		return wrap(ErrDepth, e.Error())
	case e.Truncated():
		return wrap(ErrTruncated, "the body ends inside its JSON value")
	}
	return wrap(ErrSyntax, e.Error())
}

// End ends the body and returns its cost (the sum of a Fields reader; the tokens' total of a
// format's), or why there is none. It may be called again.
func (r *Reader) End() (int64, error) {
	u, err := r.Usage()
	return u.Tokens.Sum(), err
}

// Usage ends the body and returns what it says was used, or why it says nothing usable. It may
// be called again.
func (r *Reader) Usage() (Usage, error) {
	if !r.ended {
		r.ended = true
		r.end()
	}
	if r.err != nil {
		return Usage{}, r.err
	}
	return r.d.usage(), nil
}

func (r *Reader) end() {
	if r.err != nil {
		return
	}
	switch r.framing {
	case JSONBody:
		if r.n == 0 || !r.tok.Started() && !r.arrays {
			r.err = wrap(ErrMissing, "the body is empty")
			return
		}
		r.endDoc()
	case JSONLines:
		r.endDoc() // a last line without its LF
	}
	if r.err == nil {
		r.err = r.d.finish(r.framing, r.complete)
	}
}

// writeLines reads a chunk of a JSON lines body: each line is a document.
func (r *Reader) writeLines(p []byte) {
	for len(p) > 0 && r.err == nil {
		i := 0
		for i < len(p) && p[i] != '\n' {
			i++
		}
		r.feed(p[:i])
		if i == len(p) {
			return
		}
		r.endDoc()
		p = p[i+1:]
	}
}

// writeStream reads a chunk of a text/event-stream.
func (r *Reader) writeStream(p []byte) {
	for i := 0; i < len(p) && r.err == nil; {
		if r.line == lnData && !r.lastCR {
			// A data line's bytes up to its end go to the document at once.
			j := i
			for j < len(p) && p[j] != '\n' && p[j] != '\r' {
				j++
			}
			if j > i {
				r.data(p[i:j])
				i = j
				continue
			}
		}
		r.streamByte(p[i])
		i++
	}
}

// streamByte reads a byte of an event stream outside a data line's value.
func (r *Reader) streamByte(c byte) {
	if r.lastCR && c == '\n' { // the LF of a CRLF
		r.lastCR = false
		return
	}
	r.lastCR = c == '\r'
	eol := c == '\n' || c == '\r'
	switch r.line {
	case lnStart:
		switch {
		case eol:
			r.dispatch()
		case c == ':':
			r.line = lnSkip
		default:
			r.line, r.nameLen = lnName, 0
			r.nameByte(c)
		}
	case lnName:
		switch {
		case eol:
			if r.isData() { // "data" alone: an empty data line
				r.dataLine()
			}
			r.line = lnStart
		case c == ':':
			if r.isData() {
				r.dataLine()
				r.line = lnSpace
			} else {
				r.line = lnSkip
			}
		default:
			r.nameByte(c)
		}
	case lnSpace, lnData:
		switch {
		case eol:
			r.line = lnStart
		case c == ' ' && r.line == lnSpace:
			r.line = lnData
		default:
			r.line = lnData
			r.data([]byte{c})
		}
	case lnSkip:
		if eol {
			r.line = lnStart
		}
	}
}

func (r *Reader) nameByte(c byte) {
	if r.nameLen < len(r.name) {
		r.name[r.nameLen] = c
	}
	r.nameLen++
}

func (r *Reader) isData() bool { return r.nameLen == 4 && string(r.name[:4]) == "data" }

// dataLine starts a data: line of the event: the first starts the event's document, the others
// continue it after an LF.
func (r *Reader) dataLine() {
	if !r.evData {
		r.evData, r.holding, r.holdN = true, true, 0
		return
	}
	r.data([]byte{'\n'})
}

// done is the data of OpenAI's last event, which is no JSON.
const done = "[DONE]"

// data feeds bytes of the event's data to its document, holding its first bytes while they may
// be "[DONE]".
func (r *Reader) data(p []byte) {
	for r.holding && len(p) > 0 {
		if r.holdN < len(done) && p[0] == done[r.holdN] {
			r.hold[r.holdN] = p[0]
			r.holdN++
			p = p[1:]
			continue
		}
		r.release()
	}
	r.feed(p)
}

// release feeds the held bytes, which turned out not to be "[DONE]".
func (r *Reader) release() {
	r.holding = false
	r.feed(r.hold[:r.holdN])
}

// dispatch ends an event at a blank line.
func (r *Reader) dispatch() {
	if !r.evData {
		return
	}
	r.evData = false
	if r.holding && r.holdN == len(done) {
		r.holding = false
		r.d.done()
		r.startDoc()
		return
	}
	if r.holding {
		r.release()
	}
	r.endDoc()
}
