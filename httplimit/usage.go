package httplimit

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
)

// A rule whose cost comes from the response (rules.Usage): Limit reads the request body's first
// bytes when a rule reads the request (ReadBody: its model and output cap, or a field), and
// passes the response through a meterWriter, which hands the status line's headers and each chunk
// of the body to a rules.Meter on their way to the client: nothing is held back or kept, so a
// stream reaches the client as it arrives. When the handler returns, the meter is shown the
// response's trailers (an upstream that knows the usage only after the body sends it as one),
// and Engine.Settle charges the actual cost (or the fallback).
//
// A streamed OpenAI request that does not ask for its stream's usage gets it asked for (askUsage:
// stream_options.include_usage, Content-Length corrected), and the usage chunk it did not ask for
// is taken out of what its client receives (usage.UsageChunks): the client gets the stream it
// asked for, and the budget the true cost.

// ReadBody reads the first rules.MaxPeek bytes of r's body into in (Body, BodyState, BodyLength),
// for the rules that read the request, and puts them back in front of the rest: the handler
// still reads the whole body. A compressed body (Content-Encoding) is not read: its fields cannot
// be.
func ReadBody(r *http.Request, in *rules.Input) {
	in.BodyState, in.BodyLength = rules.BodyWhole, max(r.ContentLength, 0)
	if enc := r.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		in.BodyState = rules.BodyEncoded
		return
	}
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	var b bytes.Buffer
	_, err := io.CopyN(&b, r.Body, rules.MaxPeek)
	p := &peeked{peek: b.Bytes(), rest: r.Body, Closer: r.Body}
	switch err {
	case nil: // MaxPeek bytes read: the body may go on
		in.BodyState = rules.BodyPart
	case io.EOF:
		// The whole body is read: r.Body is never read again. net/http closes it as the response's
		// header is written, and a transport that reads it once more to find its end (a reverse
		// proxy's) would fail then and close the upstream connection, cutting the response.
		p.rest = http.NoBody
	default:
		p.rest = errReader{err} // the read error the handler would have met
	}
	p.Reader = io.MultiReader(bytes.NewReader(p.peek), p.rest)
	r.Body = p
	in.Body = b.String()
}

// peeked is a body whose first bytes were read, followed by the rest.
type peeked struct {
	io.Reader
	io.Closer
	peek []byte
	rest io.Reader
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// askUsage makes a streamed OpenAI request that does not ask for its stream's usage ask for it,
// when a rule reads the response in OpenAI's format, and reports whether it did: its client's
// stream then has the usage chunk taken out.
func askUsage(r *http.Request, res *rules.Result) bool {
	llm := res.LLM()
	p, ok := r.Body.(*peeked)
	if llm == nil || llm.Req == nil || !llm.Req.AsksUsage() || !ok || !res.ReadsFormat("openai") {
		return false
	}
	edited, delta := llm.Req.AskUsage(p.peek)
	if delta == 0 && len(edited) == len(p.peek) && string(edited) == string(p.peek) {
		return false
	}
	p.peek = edited
	p.Reader = io.MultiReader(bytes.NewReader(edited), p.rest)
	if r.ContentLength > 0 {
		r.ContentLength += int64(delta)
		r.Header.Set("Content-Length", strconv.FormatInt(r.ContentLength, 10))
	}
	return true
}

// meterWriter passes a response on to the client, showing it to a meter on the way. Unwrap lets
// http.ResponseController (which the reverse proxy flushes streams with) reach the writer below.
type meterWriter struct {
	http.ResponseWriter
	m         *rules.Meter
	header    bool
	announced map[string]bool // the names the Trailer header announces: trailers, not headers
	// strip takes the usage chunk out of an event stream whose usage the gateway asked for
	// (askUsage); nil when it did not, or the response is no stream.
	strip *usage.UsageChunks
	gone  bool // a write to the client failed: nothing more reaches it
}

func (w *meterWriter) WriteHeader(code int) {
	if !w.header && code >= 200 { // 1xx responses are interim
		w.header = true
		h := w.Header()
		for _, v := range h.Values("Trailer") {
			for _, name := range strings.Split(v, ",") {
				if w.announced == nil {
					w.announced = map[string]bool{}
				}
				w.announced[http.CanonicalHeaderKey(strings.TrimSpace(name))] = true
			}
		}
		w.m.Header(func(name string) []string {
			if w.announced[http.CanonicalHeaderKey(name)] {
				return nil // net/http sends it after the body
			}
			return h.Values(name)
		})
		if w.strip != nil && !usage.IsStream(h.Get("Content-Type")) {
			w.strip = nil
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write meters what reached the client: a body the client did not take whole (gone) has no
// usage, and is charged the fallback. The usage chunk taken out of a stream is metered as if it
// had reached the client.
func (w *meterWriter) Write(b []byte) (int, error) {
	if !w.header {
		w.WriteHeader(http.StatusOK)
	}
	if w.strip == nil {
		n, err := w.ResponseWriter.Write(b)
		w.m.Write(b[:n])
		return n, err
	}
	var err error
	w.strip.Write(b, func(p []byte, drop bool) { err = w.pass(p, drop, err) })
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// pass writes an event of a stripped stream to the client, or drops it, metering it either way;
// nothing after a failed write.
func (w *meterWriter) pass(p []byte, drop bool, err error) error {
	if w.gone || err != nil {
		return err
	}
	if !drop {
		var n int
		n, err = w.ResponseWriter.Write(p)
		p = p[:n]
		w.gone = err != nil
	}
	w.m.Write(p)
	return err
}

// end passes on what the stripper holds once the handler has returned: an event the stream
// ended inside.
func (w *meterWriter) end() {
	if w.strip != nil {
		var err error
		w.strip.Close(func(p []byte, drop bool) { err = w.pass(p, drop, err) })
	}
}

func (w *meterWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// trailers shows the meter the trailers the handler set, once it has returned, as net/http sends
// them: the names the Trailer header announced, and the keys of http.TrailerPrefix (the reverse
// proxy uses both).
func (w *meterWriter) trailers() {
	h := w.Header()
	w.m.Trailer(func(name string) []string {
		name = http.CanonicalHeaderKey(name)
		v := h[http.TrailerPrefix+name]
		if w.announced[name] {
			v = append(v[:len(v):len(v)], h[name]...)
		}
		return v
	})
}
