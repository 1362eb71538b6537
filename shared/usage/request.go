package usage

import (
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/jsontok"
)

// Request is what a gateway reads of an LLM request before it sends it on: the model, the most
// output tokens the request lets the model write, and whether it streams and asks for the stream's
// usage. It is read from the request body's first bytes, in every format at once: the providers'
// field names do not collide.
type Request struct {
	// Model is the request's "model", at most 256 bytes, when ModelOK.
	Model   string
	ModelOK bool
	// Cap is the most output tokens the request lets the model write: the largest of its
	// max_tokens, max_completion_tokens (OpenAI), max_output_tokens (Responses),
	// generationConfig.maxOutputTokens (Gemini) and options.num_predict (Ollama; negative: no
	// cap), times its n (OpenAI) or generationConfig.candidateCount (Gemini), at most MaxValue.
	// HasCap is false when the request names none (the provider's own default applies).
	Cap    int64
	HasCap bool
	// Err says why the cap, and the model, cannot be read for sure, whatever a client may have
	// written: ErrTruncated (the body goes on past the bytes read: a field may follow, or come
	// again), ErrDuplicate, ErrValue, ErrSyntax or ErrDepth. nil: Cap, HasCap and Model are the
	// request's.
	Err error
	// Stream is "stream": true; IncludeUsage is "stream_options": {"include_usage": true}.
	Stream, IncludeUsage bool

	ask edit // how to make the body ask for the stream's usage; ask.ok false when it cannot
}

// edit replaces the bytes [at, end) of a body with text.
type edit struct {
	at, end int
	text    string
	ok      bool
}

// The request fields, in the order of requestPaths.
const (
	rqModel = iota
	rqMaxTokens
	rqMaxCompletion
	rqMaxOutput
	rqGeminiMax
	rqOllamaMax
	rqN
	rqCandidates
	rqStream
	rqStreamOptions
	rqIncludeUsage
	numRequestPaths
)

var requestPaths = func() [][]string {
	l := []string{"model", "max_tokens", "max_completion_tokens", "max_output_tokens", "generationConfig.maxOutputTokens",
		"options.num_predict", "n", "generationConfig.candidateCount", "stream", "stream_options", "stream_options.include_usage"}
	var p [][]string
	for _, s := range l {
		p = append(p, strings.Split(s, "."))
	}
	return p
}()

// ReadRequest reads a request body's first bytes, doc; whole says whether they are all of it.
func ReadRequest(doc string, whole bool) Request {
	var q Request
	var rd requestReader
	rd.read(&q, doc, whole)
	return q
}

// requestReader holds what ReadRequest has read so far.
type requestReader struct {
	caps      [numRequestPaths]int64
	have      uint64
	rootAt    int  // the offset of the body's '{'
	soAt      int  // stream_options' value: its first byte, and the byte after it
	soEnd     int  //
	soObj     bool // it is an object
	soEmpty   bool // ... with no key
	iuAt      int  // include_usage's value
	iuEnd     int
	afterSoOb bool // the token before was stream_options' '{'
}

func (rd *requestReader) read(q *Request, doc string, whole bool) {
	rd.rootAt = -1
	done, err := walkPeek(requestPaths, doc, whole, func(k jsontok.Kind, leaf uint64, t *jsontok.Tokenizer) error {
		if rd.afterSoOb {
			rd.afterSoOb, rd.soEmpty = false, k == jsontok.EndObject
		}
		if k == jsontok.BeginObject && t.Depth() == 1 {
			rd.rootAt = int(t.Start())
		}
		if leaf == 0 {
			return nil
		}
		return rd.value(q, firstPath(leaf), k, t)
	})
	q.Err = err
	rd.results(q, whole && done)
}

// value reads the value of request field p.
func (rd *requestReader) value(q *Request, p int, k jsontok.Kind, t *jsontok.Tokenizer) error {
	name := strings.Join(requestPaths[p], ".")
	rd.have |= 1 << p
	switch p {
	case rqModel:
		if k != jsontok.String {
			return wrap(ErrValue, name+": "+kindName(k)+", not a string")
		}
		q.Model, q.ModelOK = string(t.Text()), !t.Long()
		if t.Long() {
			return wrap(ErrValue, name+": longer than 256 bytes")
		}
	case rqStream:
		q.Stream = k == jsontok.True
	case rqStreamOptions:
		rd.soAt, rd.soObj = int(t.Start()), k == jsontok.BeginObject
		rd.soEnd, rd.afterSoOb = int(t.Offset()), rd.soObj
	case rqIncludeUsage:
		q.IncludeUsage = k == jsontok.True
		rd.iuAt, rd.iuEnd = int(t.Start()), int(t.Offset())
	default:
		if k != jsontok.Number {
			return wrap(ErrValue, name+": "+kindName(k)+", not a number")
		}
		text := t.Text()
		if p == rqOllamaMax && len(text) > 0 && text[0] == '-' && jsontok.IsNumber(string(text)) {
			rd.have &^= 1 << p // -1 and -2: no cap
			return nil
		}
		v, err := count(text, t.Long())
		if err != nil {
			return wrapErr(err, name)
		}
		rd.caps[p] = v
	}
	return nil
}

// results sets the cap and the edit once the body has been read; whole: it was read to its end.
func (rd *requestReader) results(q *Request, whole bool) {
	if q.Err == nil && !whole {
		q.Err = wrap(ErrTruncated, "the body goes on past the bytes read, which may name the model or the output cap, or name them again")
	}
	if q.Err != nil {
		q.ModelOK = false
	} else {
		for p := rqMaxTokens; p <= rqOllamaMax; p++ {
			if rd.have&(1<<p) != 0 {
				q.Cap, q.HasCap = max(q.Cap, rd.caps[p]), true
			}
		}
		n := int64(1)
		for _, p := range [...]int{rqN, rqCandidates} {
			if rd.have&(1<<p) != 0 {
				n = max(n, rd.caps[p])
			}
		}
		if q.Cap > MaxValue/n {
			q.Cap = MaxValue
		} else {
			q.Cap *= n
		}
	}
	q.ask = rd.askUsage(q)
}

// askUsage returns the edit that makes a streamed request ask for its stream's usage:
// "stream_options": {"include_usage": true}, however much of it the body has. None when the
// request does not stream, asks already, or is not a JSON object read as such.
func (rd *requestReader) askUsage(q *Request) edit {
	const iu = `"include_usage":true`
	switch {
	case !q.Stream || q.IncludeUsage || rd.rootAt < 0:
		return edit{}
	case q.Err != nil && !isClass(q.Err, ErrTruncated):
		return edit{}
	case rd.have&(1<<rqIncludeUsage) != 0: // false, null, ...: made true
		return edit{at: rd.iuAt, end: rd.iuEnd, text: "true", ok: true}
	case rd.have&(1<<rqStreamOptions) != 0 && rd.soObj:
		if rd.soEmpty {
			return edit{at: rd.soAt + 1, end: rd.soAt + 1, text: iu, ok: true}
		}
		return edit{at: rd.soAt + 1, end: rd.soAt + 1, text: iu + ",", ok: true}
	case rd.have&(1<<rqStreamOptions) != 0: // null, or not an object: replaced
		return edit{at: rd.soAt, end: rd.soEnd, text: "{" + iu + "}", ok: true}
	}
	return edit{at: rd.rootAt + 1, end: rd.rootAt + 1, text: `"stream_options":{` + iu + `},`, ok: true}
}

func isClass(err, cls error) bool {
	u, ok := err.(*usageError)
	return ok && u.cls == cls
}

// AsksUsage reports whether AskUsage would change the body: the request streams and does not ask
// for its stream's usage.
func (q *Request) AsksUsage() bool { return q.ask.ok }

// AskUsage returns the body whose first bytes ReadRequest read as q, edited to ask for its
// stream's usage (stream_options.include_usage: true), and how many bytes longer it is. The edit
// lies in the bytes read; the rest of the body follows unchanged.
func (q *Request) AskUsage(peek []byte) ([]byte, int) {
	e := q.ask
	if !e.ok || e.end > len(peek) {
		return peek, 0
	}
	out := make([]byte, 0, len(peek)+len(e.text))
	out = append(append(append(out, peek[:e.at]...), e.text...), peek[e.end:]...)
	return out, len(e.text) - (e.end - e.at)
}

// String describes q for a log line.
func (q *Request) String() string {
	s := "model " + strconv.Quote(q.Model)
	if q.HasCap {
		s += ", output cap " + strconv.FormatInt(q.Cap, 10)
	}
	if q.Err != nil {
		s += ", unread: " + q.Err.Error()
	}
	return s
}
