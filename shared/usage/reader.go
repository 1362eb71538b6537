package usage

import (
	"strconv"
	"strings"
)

// Limits bound what a Reader reads. Its memory is a few hundred bytes plus one byte per level
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

// Events says which events of a stream carry its usage.
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

// IsStream reports whether a response of this Content-Type is a server-sent event stream,
// whose usage is read from its events rather than from one JSON document.
func IsStream(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// A Reader reads a cost from a response body fed to it chunk by chunk (Write), and gives it
// when the body ends (End). A JSON body is one document, the cost the sum of its fields at the
// Fields' paths, each present once. A stream (text/event-stream) is read per the SSE format:
// lines ending in LF, CRLF or CR, an event's data: lines joined with LF, an event ending at a
// blank line (an event the body ends inside is dropped, as an EventSource drops it); comments
// and other fields skipped. Each event's data is a JSON document, except OpenAI's terminator
// "[DONE]"; an event holding any of the paths carries the usage and must hold them all; a
// second such event is ErrDuplicate, unless the reader counts the last (SetEvents(LastEvent)).
//
// A Reader is not safe for concurrent use. Its zero value is not usable: see NewReader.
type Reader struct {
	f      *Fields
	stream bool
	events Events
	lim    Limits
	n      int64 // bytes written
	sc     scanner
	err    error // the first error; the reader reads nothing after it
	ended  bool

	cost  int64
	found bool // a cost was read (the JSON document's fields, or a usage event)

	// The stream's state: where in its line the reader is, the field name read so far, and
	// the event being read.
	line    uint8
	name    [5]byte // the field name's first bytes: "data" and one more
	nameLen int
	lastCR  bool
	evData  bool  // the event has a data: line
	evLen   int64 // bytes of the event's data
	evDone  bool  // the event's data so far is a prefix of "[DONE]"
}

const (
	lnStart = iota // at the start of a line
	lnName         // reading a field name
	lnSpace        // after "data:", before the optional space
	lnData         // reading a data: line's value
	lnSkip         // in a comment or a field other than data
)

// NewReader returns a Reader of the cost at f in a body: a stream if stream (see IsStream),
// else one JSON document.
func NewReader(f *Fields, stream bool, lim Limits) *Reader {
	r := &Reader{}
	r.Reset(f, stream, lim)
	return r
}

// Reset makes r a new reader, keeping its memory.
func (r *Reader) Reset(f *Fields, stream bool, lim Limits) {
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = DefaultMaxDepth
	}
	lim.MaxDepth = min(lim.MaxDepth, MaxMaxDepth)
	sc := r.sc
	*r = Reader{f: f, stream: stream, lim: lim, sc: sc}
	r.sc.reset(f, lim.MaxDepth)
}

// SetEvents says which events of a stream carry the usage (default OneEvent); call it before
// the first Write. Reset sets OneEvent again.
func (r *Reader) SetEvents(e Events) { r.events = e }

// Write reads the next chunk of the body. It always returns len(p), nil: a body the reader
// cannot read still passes on (io.MultiWriter, io.TeeReader); End reports why.
func (r *Reader) Write(p []byte) (int, error) {
	write(r, p)
	return len(p), nil
}

func write(r *Reader, p []byte) {
	if r.err != nil || r.ended {
		return
	}
	over := false
	if r.lim.MaxBytes > 0 && int64(len(p)) > r.lim.MaxBytes-r.n {
		p, over = p[:r.lim.MaxBytes-r.n], true
	}
	r.n += int64(len(p))
	for i := 0; i < len(p) && r.err == nil; {
		// Most of a body is the text of strings no path reads: skipped in bulk.
		if r.sc.skipping() && (!r.stream || r.line == lnData) {
			j := i
			for j < len(p) && plain(p[j]) {
				j++
			}
			if j > i {
				r.sc.off += int64(j - i)
				r.evLen += int64(j - i)
				i = j
				continue
			}
		}
		if r.stream {
			r.streamByte(p[i])
		} else {
			r.sc.step(p[i])
			r.sc.off++
			r.err = r.sc.err
		}
		i++
	}
	if over && r.err == nil {
		r.err = wrap(ErrTooLarge, "the body is longer than "+strconv.FormatInt(r.lim.MaxBytes, 10)+" bytes")
	}
}

// End ends the body and returns its cost, or why there is none. It may be called again.
func (r *Reader) End() (int64, error) {
	if !r.ended {
		r.ended = true
		r.end()
	}
	if r.err != nil {
		return 0, r.err
	}
	return r.cost, nil
}

func (r *Reader) end() {
	if r.err != nil {
		return
	}
	if r.stream {
		if !r.found {
			r.err = wrap(ErrMissing, "the stream ended without an event carrying "+r.f.expr)
		}
		return
	}
	if !r.sc.started() {
		r.err = wrap(ErrMissing, "the body is empty")
		return
	}
	if r.err = r.sc.finish(); r.err == nil {
		r.record()
	}
}

// record sums the scanner's values into the cost, or sets the error saying what is missing.
func (r *Reader) record() {
	sc := &r.sc
	if sc.found != all(r.f) {
		for t, segs := range r.f.terms {
			if sc.found&(1<<t) == 0 {
				what := "the body has no " + joinPath(segs)
				if r.stream {
					what = "an event carries usage without " + joinPath(segs)
				}
				r.err = wrap(ErrMissing, what)
				return
			}
		}
	}
	var sum int64
	for t := range r.f.terms {
		if sum += sc.vals[t]; sum > MaxValue {
			r.err = wrap(ErrValue, r.f.expr+": the sum is above 10^15")
			return
		}
	}
	r.cost, r.found = sum, true
}

// streamByte reads a byte of an event stream.
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
			r.eventByte(c)
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

// dataLine starts a data: line of the event: the first starts the event's document, the
// others continue it after an LF.
func (r *Reader) dataLine() {
	if !r.evData {
		r.evData, r.evLen, r.evDone = true, 0, true
		r.sc.reset(r.f, r.lim.MaxDepth)
		return
	}
	r.eventByte('\n')
}

// eventByte feeds a byte of the event's data to its document. A JSON error is held while the
// data may still be "[DONE]".
func (r *Reader) eventByte(c byte) {
	if r.evDone && (r.evLen >= int64(len(done)) || done[r.evLen] != c) {
		r.evDone = false
	}
	r.evLen++
	if r.sc.err == nil {
		r.sc.step(c)
		r.sc.off++
	}
	if r.sc.err != nil && !r.evDone {
		r.err = r.sc.err
	}
}

// done is the data of OpenAI's last event, which is no JSON.
const done = "[DONE]"

// dispatch ends an event at a blank line.
func (r *Reader) dispatch() {
	if !r.evData {
		return
	}
	r.evData = false
	if r.evDone && r.evLen == int64(len(done)) {
		return
	}
	if r.sc.err != nil {
		r.err = r.sc.err
		return
	}
	if !r.sc.started() {
		return // an empty data: line carries nothing
	}
	if err := r.sc.finish(); err != nil {
		r.err = err
		return
	}
	if r.sc.found == 0 {
		return
	}
	if r.found && r.events != LastEvent {
		r.err = wrap(ErrDuplicate, "a second event carries "+r.f.expr)
		return
	}
	r.record() // with LastEvent, over the count of an earlier event
}
