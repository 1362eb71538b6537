package httplimit

import (
	"net/http"

	"github.com/diana-gw/diana/shared/rules"
)

// SetHeaders writes the rate-limit headers of res to h (see rules.Result.AppendHeaders).
func SetHeaders(h http.Header, res *rules.Result) {
	var buf [6]rules.Header
	hs := res.AppendHeaders(buf[:0])
	vals := make([]string, len(hs)) // one allocation for all the values; each capped to itself
	for i, x := range hs {
		vals[i] = x.Value
		h[x.Name] = vals[i : i+1 : i+1]
	}
}

// Deny answers a denied request with its status, the headers and the JSON body
// {"message": ..., "retry_after": seconds} (see rules.Result.Denial).
func Deny(w http.ResponseWriter, res *rules.Result) {
	h := w.Header()
	SetHeaders(h, res)
	status, body := res.Denial()
	h["Content-Type"] = []string{"application/json; charset=utf-8"}
	w.WriteHeader(status)
	w.Write(body)
}
