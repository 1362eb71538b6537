package rules

import (
	"strconv"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
)

// Header is a response header of a verdict.
type Header struct{ Name, Value string }

// AppendHeaders appends the rate-limit headers of r to h, if its rule asks for them:
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset (seconds, rounded up) as Kong's
// rate-limiting plugin and the IETF draft name them, Retry-After on a denial (absent when the
// request can never pass: its cost is above the limit), and X-RateLimit-Limit /
// X-RateLimit-Remaining when the rule asks for Kong's older headers. Nothing when no rule
// applied, or when the decision came from a fail policy (its numbers would be made up).
//
// Names are in Go's canonical form ("Ratelimit-Limit"): header names are case-insensitive, and
// net/http stores them so; Envoy's front end lower-cases them.
func (r *Result) AppendHeaders(h []Header) []Header {
	if r.Rule == nil || !r.Rule.Reply.Headers || r.Err != nil {
		return h
	}
	d := &r.Decision
	limit, remaining := strconv.FormatInt(d.Limit, 10), strconv.FormatInt(d.Remaining, 10)
	h = append(h,
		Header{"Ratelimit-Limit", limit},
		Header{"Ratelimit-Remaining", remaining},
		Header{"Ratelimit-Reset", strconv.FormatInt(Seconds(d.ResetAfter), 10)})
	if r.Rule.Reply.Legacy {
		h = append(h, Header{"X-Ratelimit-Limit", limit}, Header{"X-Ratelimit-Remaining", remaining})
	}
	if !r.Allowed && d.RetryAfter != algos.Never {
		h = append(h, Header{"Retry-After", strconv.FormatInt(Seconds(d.RetryAfter), 10)})
	}
	return h
}

// Seconds turns µs into whole seconds, rounded up: a client that waits that long is not early.
func Seconds(us int64) int64 { return (max(us, 0) + algos.Second - 1) / algos.Second }

// BadPathMessage is the message of the 400 that refuses a path with an escaped slash.
const BadPathMessage = "the request path holds an encoded slash or a backslash, which this gateway refuses"

// Denial is the status of a denied request (its rule's, 429 by default; 400 for a refused path)
// and its JSON body.
func (r *Result) Denial() (status int, body []byte) {
	if r.BadPath {
		return 400, DenialBody(BadPathMessage, -1)
	}
	status, msg := 429, DefaultMessage
	if r.Rule != nil {
		status, msg = r.Rule.Reply.Status, r.Rule.Reply.Message
	}
	retry := int64(-1)
	if r.Decision.RetryAfter != algos.Never {
		retry = Seconds(r.Decision.RetryAfter)
	}
	return status, DenialBody(msg, retry)
}

// DenialBody is {"message": msg, "retry_after": retry} (seconds; null when retry < 0: the
// request can never pass).
func DenialBody(msg string, retry int64) []byte {
	b := append([]byte(`{"message":`), conf.AppendJSONString(nil, msg)...)
	b = append(b, `,"retry_after":`...)
	if retry < 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, retry, 10)
	}
	return append(b, "}\n"...)
}
