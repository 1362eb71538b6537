package httplimit

import (
	"net/http"

	"github.com/diana-gw/diana/shared/rules"
)

// statusWriter records the status of the response next writes, so that adaptive rules learn
// when the upstream failed a request (algos.Request.Dropped). Unwrap lets
// http.ResponseController (which ReverseProxy uses to flush and to switch protocols) reach the
// writer it wraps; a handler that asserts http.Hijacker on it directly gets nothing.
type statusWriter struct {
	http.ResponseWriter
	status int // the first final status written; 0 before
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 { // 1xx are interim
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// FlushError flushes what was written (a status of 200 if none was), for
// http.ResponseController.
func (s *statusWriter) FlushError() error {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// Flush is FlushError for handlers that look for an http.Flusher (server-sent events).
func (s *statusWriter) Flush() { s.FlushError() }

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// dropped reports whether the upstream failed the request: a 5xx status, which dianad's reverse
// proxy also answers on a transport error or a timeout (502). Not when the client went away
// first (the proxy answers 502 then too, but the upstream did not fail), nor for a request
// whose status was not recorded (s nil).
func (s *statusWriter) dropped(r *http.Request) bool {
	return s != nil && rules.Dropped(s.status) && r.Context().Err() == nil
}
