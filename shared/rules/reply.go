package rules

import (
	"strconv"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
)

// Header is a response header of a verdict.
type Header struct{ Name, Value string }

// HeaderStyle is the set of rate-limit headers a rule's replies carry (reply.headers).
type HeaderStyle uint8

const (
	// Draft: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset, as the IETF draft named
	// them up to its -06 revision and as Kong's rate-limiting and most gateways send them.
	Draft HeaderStyle = iota
	// Kong: what Kong's bundled rate-limiting plugin sends: the Draft headers, and
	// X-RateLimit-Limit-<Window> and X-RateLimit-Remaining-<Window>.
	Kong
	// Structured: the current draft's structured fields, RateLimit-Policy ("name";q=;w=) and
	// RateLimit ("name";r=;t=), the rule's name as the policy's.
	Structured
	// NoHeaders: none, Retry-After included.
	NoHeaders
	// Envoy: what Envoy's rate limit filters send with enable_x_ratelimit_headers set to
	// DRAFT_VERSION_03: X-RateLimit-Limit ("10, 10;w=60"), X-RateLimit-Remaining and
	// X-RateLimit-Reset.
	Envoy
)

// HeaderStyleNames are the config names of the header styles, by value.
var HeaderStyleNames = [...]string{Draft: "draft", Kong: "kong", Structured: "structured", NoHeaders: "none", Envoy: "envoy"}

// decodeHeaderStyle reads reply.headers: a style, or the older true (draft) and false (none).
func decodeHeaderStyle(o *conf.Obj) HeaderStyle {
	if o.IsBool("headers") {
		if o.Bool("headers", true) {
			return Draft
		}
		return NoHeaders
	}
	return HeaderStyle(o.EnumIndex("headers", HeaderStyleNames[:]...))
}

// kongWindows are the words Kong's rate-limiting puts in X-RateLimit-Limit-<Window>, by the
// window's length; any other window is written as a duration ("10s", "1w").
var kongWindows = [...]struct {
	us   int64
	name string
}{{algos.Second, "Second"}, {algos.Minute, "Minute"}, {algos.Hour, "Hour"}, {algos.Day, "Day"}, {30 * algos.Day, "Month"}, {algos.Year, "Year"}}

// AppendHeaders appends the rate-limit headers of r to h in its rule's style (see HeaderStyle),
// with Retry-After on a denial (absent when the request can never pass: its cost is above the
// limit). Nothing when no rule applied, or when the decision came from a fail policy (its numbers
// would be made up). What the numbers mean for each algorithm is in docs/configuration.md.
//
// Names are in Go's canonical form ("Ratelimit-Limit"): header names are case-insensitive, and
// net/http stores them so; Envoy's front end lower-cases them.
func (r *Result) AppendHeaders(h []Header) []Header {
	if r.Rule == nil || r.Rule.Reply.Headers == NoHeaders || r.Err != nil {
		return h
	}
	d := &r.Decision
	limit, remaining := strconv.FormatInt(d.Limit, 10), strconv.FormatInt(d.Remaining, 10)
	reset := strconv.FormatInt(Seconds(d.ResetAfter), 10)
	switch rule := r.Rule; rule.Reply.Headers {
	case Structured:
		policy := `"` + rule.Name + `";q=` + limit // rule names need no escaping in an sf-string
		if rule.Window > 0 {
			policy += ";w=" + strconv.FormatInt(Seconds(rule.Window), 10)
		}
		h = append(h, Header{"Ratelimit-Policy", policy},
			Header{"Ratelimit", `"` + rule.Name + `";r=` + remaining + ";t=" + reset})
	case Envoy:
		quota := limit
		if rule.Window > 0 {
			quota += ", " + limit + ";w=" + strconv.FormatInt(Seconds(rule.Window), 10)
		}
		h = append(h, Header{"X-Ratelimit-Limit", quota},
			Header{"X-Ratelimit-Remaining", remaining},
			Header{"X-Ratelimit-Reset", reset})
	default:
		h = append(h,
			Header{"Ratelimit-Limit", limit},
			Header{"Ratelimit-Remaining", remaining},
			Header{"Ratelimit-Reset", reset})
		if rule.Reply.Legacy {
			h = append(h, Header{"X-Ratelimit-Limit", limit}, Header{"X-Ratelimit-Remaining", remaining})
		}
		if rule.Reply.Headers == Kong && rule.Window > 0 {
			w := conf.FormatDuration(rule.Window)
			for _, k := range kongWindows {
				if k.us == rule.Window {
					w = k.name
				}
			}
			h = append(h, Header{"X-Ratelimit-Limit-" + w, limit}, Header{"X-Ratelimit-Remaining-" + w, remaining})
		}
	}
	if !r.Allowed && d.RetryAfter != algos.Never {
		h = append(h, Header{"Retry-After", strconv.FormatInt(Seconds(d.RetryAfter), 10)})
	}
	return h
}

// Seconds turns µs into whole seconds, rounded up: a client that waits that long is not early.
func Seconds(us int64) int64 { return (max(us, 0) + algos.Second - 1) / algos.Second }

// BadPathMessage is the message of the 400 that refuses a path with a control character, or an
// escaped slash under RejectSlashes.
const BadPathMessage = "the request path holds a control character, or an encoded slash or a backslash, which this gateway refuses"

// Denial is the status of a denied request (its rule's, 429 by default; 400 for a refused path)
// and its JSON body.
func (r *Result) Denial() (status int, body []byte) {
	if r.BadPath {
		return 400, DenialBody(BadPathMessage, -1)
	}
	if r.Refused != "" {
		return 400, DenialBody(r.Refused, -1)
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
