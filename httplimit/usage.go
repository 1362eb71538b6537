package httplimit

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/diana-gw/diana/shared/rules"
)

// A rule whose cost comes from the response (rules.Usage): Limit peeks at the request body when
// a rule takes its estimate from it (PeekBody), and passes the response through a meterWriter,
// which hands the status line's headers and each chunk of the body to a rules.Meter on their way
// to the client: nothing is held back or kept, so a stream reaches the client as it arrives.
// When the handler returns, the meter is shown the response's trailers (an upstream that knows the
// usage only after the body sends it as one), and Engine.Settle charges the actual cost (or the
// fallback).

// PeekBody reads the first rules.MaxPeek bytes of r's body, for the rules that read a field of
// it, and puts them back in front of the rest: the handler still reads the whole body.
func PeekBody(r *http.Request) string {
	if r.Body == nil || r.Body == http.NoBody {
		return ""
	}
	var b bytes.Buffer
	_, err := io.CopyN(&b, r.Body, rules.MaxPeek)
	var rest io.Reader = r.Body
	if err != nil && err != io.EOF {
		rest = errReader{err} // the read error the handler would have met
	}
	r.Body = peeked{Reader: io.MultiReader(bytes.NewReader(b.Bytes()), rest), Closer: r.Body}
	return b.String()
}

type peeked struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// meterWriter passes a response on to the client, showing it to a meter on the way. Unwrap lets
// http.ResponseController (which the reverse proxy flushes streams with) reach the writer below.
type meterWriter struct {
	http.ResponseWriter
	m         *rules.Meter
	header    bool
	announced map[string]bool // the names the Trailer header announces: trailers, not headers
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
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write meters what reached the client: a body the client did not take whole (gone) has no
// usage, and is charged the fallback.
func (w *meterWriter) Write(b []byte) (int, error) {
	if !w.header {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.m.Write(b[:n])
	return n, err
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
