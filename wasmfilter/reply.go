package main

import (
	"strconv"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// The reply formatting of httplimit (SetHeaders, Denial), which the filter cannot import
// (httplimit imports net/http, which TinyGo lacks). Envoy's header names are lower case.

// appendHeaders appends the rate-limit headers of res, if its rule asks for them:
// ratelimit-limit, ratelimit-remaining and ratelimit-reset (seconds, rounded up), retry-after on
// a denial (absent when the request can never pass), and x-ratelimit-limit /
// x-ratelimit-remaining when the rule asks for Kong's older headers. Nothing when no rule
// applied or the decision did not come from the rule's state (res.Err).
func appendHeaders(h [][2]string, res *rules.Result) [][2]string {
	if res.Rule == nil || !res.Rule.Reply.Headers || res.Err != nil {
		return h
	}
	d := &res.Decision
	limit, remaining := strconv.FormatInt(d.Limit, 10), strconv.FormatInt(d.Remaining, 10)
	h = append(h,
		[2]string{"ratelimit-limit", limit},
		[2]string{"ratelimit-remaining", remaining},
		[2]string{"ratelimit-reset", strconv.FormatInt(seconds(d.ResetAfter), 10)})
	if res.Rule.Reply.Legacy {
		h = append(h, [2]string{"x-ratelimit-limit", limit}, [2]string{"x-ratelimit-remaining", remaining})
	}
	if !res.Allowed && d.RetryAfter != algos.Never {
		h = append(h, [2]string{"retry-after", strconv.FormatInt(seconds(d.RetryAfter), 10)})
	}
	return h
}

// seconds turns µs into whole seconds, rounded up: a client that waits that long is not early.
func seconds(us int64) int64 { return (max(us, 0) + algos.Second - 1) / algos.Second }

// denial is the status of a denied request (its rule's, 429 by default) and its JSON body,
// {"message": ..., "retry_after": seconds} (retry_after null when it can never pass).
func denial(res *rules.Result) (status int, body []byte) {
	status, msg := 429, rules.DefaultMessage
	if res.Rule != nil {
		status, msg = res.Rule.Reply.Status, res.Rule.Reply.Message
	}
	retry := int64(-1)
	if res.Decision.RetryAfter != algos.Never {
		retry = seconds(res.Decision.RetryAfter)
	}
	return status, denialBody(msg, retry)
}

// denialBody is {"message": msg, "retry_after": retry}, retry -1 writing null.
func denialBody(msg string, retry int64) []byte {
	b := append([]byte(`{"message":`), jsonString(nil, msg)...)
	b = append(b, `,"retry_after":`...)
	if retry < 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, retry, 10)
	}
	return append(b, "}\n"...)
}

// jsonString appends s as a JSON string. Bytes ≥ 0x80 are copied as they are: the strings come
// from JSON documents or from Envoy's headers.
func jsonString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
