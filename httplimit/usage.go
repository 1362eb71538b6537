package httplimit

import (
	"bytes"
	"io"
	"net/http"

	"github.com/diana-gw/diana/shared/rules"
)

// A rule whose cost comes from the response (rules.Usage): Limit peeks at the request body when
// a rule takes its estimate from it (PeekBody), and passes the response through a meterWriter,
// which hands the status line's headers and each chunk of the body to a rules.Meter on their way
// to the client: nothing is held back or kept, so a stream reaches the client as it arrives.
// When the handler returns, Engine.Settle charges the actual cost (or the fallback).

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
	m      *rules.Meter
	header bool
}

func (w *meterWriter) WriteHeader(code int) {
	if !w.header && code >= 200 { // 1xx responses are interim
		w.header = true
		w.m.Header(w.Header().Values)
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
