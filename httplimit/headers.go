package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// SetHeaders writes the rate-limit headers of res to h, if its rule asks for them:
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset (seconds, rounded up) as Kong's
// rate-limiting plugin and the IETF draft name them, Retry-After on a denial (absent when the
// request can never pass: its cost is above the limit), and X-RateLimit-Limit /
// X-RateLimit-Remaining when the rule asks for Kong's older headers. Nothing is written when no
// rule applied, or when the decision came from a fail policy (its numbers would be made up).
func SetHeaders(h http.Header, res *rules.Result) {
	if res.Rule == nil || !res.Rule.Reply.Headers || res.Err != nil {
		return
	}
	d := &res.Decision
	limit, remaining := strconv.FormatInt(d.Limit, 10), strconv.FormatInt(d.Remaining, 10)
	h["Ratelimit-Limit"] = []string{limit}
	h["Ratelimit-Remaining"] = []string{remaining}
	h["Ratelimit-Reset"] = []string{strconv.FormatInt(Seconds(d.ResetAfter), 10)}
	if res.Rule.Reply.Legacy {
		h["X-Ratelimit-Limit"] = []string{limit}
		h["X-Ratelimit-Remaining"] = []string{remaining}
	}
	if !res.Allowed && d.RetryAfter != algos.Never {
		h["Retry-After"] = []string{strconv.FormatInt(Seconds(d.RetryAfter), 10)}
	}
}

// Seconds turns µs into whole seconds, rounded up: a client that waits that long is not early.
func Seconds(us int64) int64 { return (max(us, 0) + algos.Second - 1) / algos.Second }

// Deny answers a denied request with Denial's status and body, and the headers.
func Deny(w http.ResponseWriter, res *rules.Result) {
	h := w.Header()
	SetHeaders(h, res)
	status, body := Denial(res)
	h["Content-Type"] = []string{"application/json; charset=utf-8"}
	w.WriteHeader(status)
	w.Write(body)
}

// Denial is the status of a denied request (its rule's, 429 by default) and its JSON body,
// {"message": ..., "retry_after": seconds} (retry_after null when it can never pass).
func Denial(res *rules.Result) (status int, body []byte) {
	status, msg := http.StatusTooManyRequests, rules.DefaultMessage
	if res.Rule != nil {
		status, msg = res.Rule.Reply.Status, res.Rule.Reply.Message
	}
	m, _ := json.Marshal(msg) // a string always marshals
	b := append([]byte(`{"message":`), m...)
	b = append(b, `,"retry_after":`...)
	if res.Decision.RetryAfter == algos.Never {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, Seconds(res.Decision.RetryAfter), 10)
	}
	return status, append(b, "}\n"...)
}
