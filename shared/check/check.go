// Package check is the wire format of dianad's decision API, POST /v1/check (docs/api.md): the
// request a gateway sends and the answer it gets back. dianad reads requests and writes answers
// with it, the Envoy filter writes requests and reads answers with it, so the two cannot
// disagree on a field's name or type.
//
// It uses no reflection and compiles under TinyGo (the JSON goes through shared/conf).
package check

import (
	"errors"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/usage"
)

// Request is the body of POST /v1/check: the request to decide, as the gateway sees it. Every
// field is optional.
type Request struct {
	Method   string
	Host     string
	Path     string // the URL path, without the query
	ClientIP string
	Consumer string
	Route    string
	// Headers are the request headers that rules may match or count by, in order; dianad
	// matches their names without regard to case.
	Headers [][2]string
	// Settle: the caller reads the response's usage and settles it with POST /v1/settle, so
	// dianad reserves a usage rule's estimate and answers with Response.Usage rather than charge
	// the rule's fallback at once.
	Settle bool
}

// field is one of Request's string fields on the wire.
type field struct {
	name   string
	v      *string
	always bool // written even when empty
}

// fields are Request's string fields by their JSON names, in order: the one statement of the
// wire format that AppendJSON, ParseRequest and the errors' field list follow. "headers" follows
// them.
func (r *Request) fields() [6]field {
	return [6]field{{"method", &r.Method, true}, {"host", &r.Host, true}, {"path", &r.Path, true},
		{"client_ip", &r.ClientIP, false}, {"consumer", &r.Consumer, false}, {"route", &r.Route, false}}
}

// requestFields are Request's fields by their JSON names, in order, for errors.
var requestFields = func() string {
	var names []string
	for _, f := range new(Request).fields() {
		names = append(names, f.name)
	}
	return strings.Join(append(names, "headers", "settle"), ", ")
}()

// AppendJSON appends r as JSON. Headers that would take b past max bytes are left out (dianad
// refuses bodies over 64 KiB), as a request must still be decided without them.
func (r *Request) AppendJSON(b []byte, max int) []byte {
	sep := byte('{')
	for _, f := range r.fields() {
		if f.always || *f.v != "" {
			b, sep = appendField(b, sep, f.name, *f.v), ','
		}
	}
	if r.Settle {
		b = append(b, `,"settle":true`...)
	}
	b = append(b, `,"headers":{`...)
	first := true
	for _, kv := range r.Headers {
		if len(b)+len(kv[0])+len(kv[1])+16 > max { // 16: quotes, colon, comma and the closing "}}"
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = conf.AppendJSONString(b, kv[0])
		b = append(b, ':')
		b = conf.AppendJSONString(b, kv[1])
	}
	return append(b, "}}"...)
}

// ParseRequest reads a Request from one JSON object of its fields, nothing else: an unknown
// field (a misspelt client_ip would leave a per-IP rule without its address), a value that is
// not a string, null, or anything but one object is an error that names the field.
func ParseRequest(body []byte) (Request, error) {
	var r Request
	err := conf.DecodeObject(body, requestFields, func(o *conf.Obj) {
		for _, f := range r.fields() {
			*f.v = o.String(f.name, "")
		}
		r.Settle = o.Bool("settle", false)
		names, vals := o.StringMap("headers")
		if len(names) > 0 {
			r.Headers = make([][2]string, len(names))
			for i, n := range names {
				r.Headers[i] = [2]string{n, vals[i]}
			}
		}
	})
	return r, err
}

// Response is the answer of POST /v1/check (status 200).
type Response struct {
	Allowed bool
	Rule    string // the rule the numbers are from ("" when no rule applied)
	Status  int    // the status to answer a denied request with; 200 when allowed
	// Limit, Remaining and Reset (seconds, rounded up) are the rule's numbers.
	Limit     int64
	Remaining int64
	Reset     int64
	// RetryAfter is in seconds, rounded up; negative (null on the wire) when the request can
	// never pass.
	RetryAfter int64
	DelayMS    int64 // hold an allowed request this long before forwarding it
	// Headers are the rate-limit headers to set on the response (on a denial and on an allowed
	// request alike), already formatted, in order.
	Headers [][2]string
	Body    string // the JSON body of a denial; "" when allowed
	// Unlimited names the unlimited rule that exempted the request from every rule, if one did
	// (left out of the JSON when "").
	Unlimited string
	// Usage lists the usage rules that reserved an estimate for the request, when it asked to
	// settle (Request.Settle): where each reads its cost from the response, and the ticket to
	// settle it with.
	Usage []Usage
}

// Usage is a usage rule a request must settle: its cost is read from the response's Header
// (names, "a+b") or Body (JSON paths, "usage.input_tokens+usage.output_tokens"), or its tokens in
// a provider's Format (a name of usage.FormatNames: "auto" when the request's path does not name
// the provider), and sent back with Ticket in POST /v1/settle. StreamUsage is the rule's
// stream_usage ("last": the last of a stream's events carrying Body counts); "" for the default,
// once (absent on the wire, as an empty Format is).
type Usage struct {
	Rule, Header, Body, Ticket string
	StreamUsage, Format        string
}

// AppendJSON appends r as JSON.
func (r *Response) AppendJSON(b []byte) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, r.Allowed)
	b = appendField(b, ',', "rule", r.Rule)
	b = appendInt(b, "status", int64(r.Status))
	b = appendInt(b, "limit", r.Limit)
	b = appendInt(b, "remaining", r.Remaining)
	b = appendInt(b, "reset", r.Reset)
	if r.RetryAfter < 0 {
		b = append(b, `,"retry_after":null`...)
	} else {
		b = appendInt(b, "retry_after", r.RetryAfter)
	}
	b = appendInt(b, "delay_ms", r.DelayMS)
	b = append(b, `,"headers":{`...)
	for i, kv := range r.Headers {
		if i > 0 {
			b = append(b, ',')
		}
		b = conf.AppendJSONString(b, kv[0])
		b = append(b, ':')
		b = conf.AppendJSONString(b, kv[1])
	}
	b = append(b, '}')
	b = appendField(b, ',', "body", r.Body)
	if r.Unlimited != "" {
		b = appendField(b, ',', "unlimited", r.Unlimited)
	}
	if len(r.Usage) > 0 {
		b = append(b, `,"usage":[`...)
		for i, u := range r.Usage {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendField(b, '{', "rule", u.Rule)
			b = appendField(b, ',', "header", u.Header)
			b = appendField(b, ',', "body", u.Body)
			b = appendField(b, ',', "ticket", u.Ticket)
			if u.StreamUsage != "" {
				b = appendField(b, ',', "stream_usage", u.StreamUsage)
			}
			if u.Format != "" {
				b = appendField(b, ',', "format", u.Format)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// ParseResponse reads a Response. Unknown fields are ignored (a newer dianad may add some);
// "allowed" is required, and a denial must carry a status of 400 or more.
func ParseResponse(body []byte) (Response, error) {
	var r Response
	v, err := conf.ParseJSON(body)
	if err != nil {
		return r, err
	}
	errs := &conf.Errors{}
	o := conf.Read(v, errs)
	o.Require("allowed")
	r.Allowed = o.Bool("allowed", false)
	r.Rule = o.String("rule", "")
	r.Status = int(o.Int("status", 429, 100, 599))
	r.Limit = o.Int("limit", 0, 0, maxInt)
	r.Remaining = o.Int("remaining", 0, 0, maxInt)
	r.Reset = o.Int("reset", 0, 0, maxInt)
	r.RetryAfter = -1
	if o.Has("retry_after") {
		r.RetryAfter = o.Int("retry_after", -1, 0, maxInt) // null reads as absent: never
	}
	r.DelayMS = o.Int("delay_ms", 0, 0, maxInt)
	names, vals := o.StringMap("headers")
	for i, n := range names {
		r.Headers = append(r.Headers, [2]string{n, vals[i]})
	}
	r.Body = o.String("body", "")
	r.Unlimited = o.String("unlimited", "")
	for _, u := range o.List("usage") {
		r.Usage = append(r.Usage, Usage{Rule: u.String("rule", ""), Header: u.String("header", ""),
			Body: u.String("body", ""), Ticket: u.String("ticket", ""), StreamUsage: u.String("stream_usage", ""),
			Format: u.String("format", "")})
	}
	if err := errs.Err(); err != nil {
		return r, err
	}
	if !r.Allowed && r.Status < 400 {
		return r, errors.New("status: a denial needs a status of 400 or more, got " + strconv.Itoa(r.Status))
	}
	return r, nil
}

const maxInt = 1<<63 - 1

// Settlement is one entry of POST /v1/settle's body {"settle": [...]}: a Ticket of
// Response.Usage with the Cost the response told (a Header or Body rule), or the Tokens it told
// by class and the Model it named (a Format rule: dianad prices them), or, when it told nothing
// usable, the Unread reason (the rule's fallback is then charged, or what Tokens counted of a
// stream cut short, if more).
type Settlement struct {
	Ticket    string
	Cost      int64
	Tokens    usage.Tokens
	HasTokens bool
	Model     string
	Unread    string
}

// MaxCost bounds a settled cost, as shared/usage bounds a cost read from a response.
const MaxCost = 1_000_000_000_000_000

// AppendSettle appends the body of POST /v1/settle.
func AppendSettle(b []byte, s []Settlement) []byte {
	b = append(b, `{"settle":[`...)
	for i, x := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendField(b, '{', "ticket", x.Ticket)
		switch {
		case x.Unread != "":
			b = appendField(b, ',', "unread", x.Unread)
		case !x.HasTokens:
			b = appendInt(b, "cost", x.Cost)
		}
		if x.HasTokens {
			b = append(b, `,"tokens":`...)
			sep := byte('{')
			for c, name := range usage.ClassNames {
				b = append(append(append(b, sep, '"'), name...), '"', ':')
				b = strconv.AppendInt(b, x.Tokens[c], 10)
				sep = ','
			}
			b = append(b, '}')
			if x.Model != "" {
				b = appendField(b, ',', "model", x.Model)
			}
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// ParseSettle reads the body of POST /v1/settle: each entry has a ticket and either a cost (0 to
// MaxCost) or an unread reason; an error names the field.
func ParseSettle(body []byte) ([]Settlement, error) {
	var out []Settlement
	err := conf.DecodeObject(body, "settle", func(o *conf.Obj) {
		o.Require("settle")
		for _, e := range o.List("settle") {
			e.Require("ticket")
			x := Settlement{Ticket: e.String("ticket", ""), Cost: e.Int("cost", 0, 0, MaxCost), Unread: e.String("unread", ""),
				Model: e.String("model", ""), HasTokens: e.Has("tokens")}
			to := e.Obj("tokens")
			for c, name := range usage.ClassNames {
				x.Tokens[c] = to.Int(name, 0, 0, MaxCost)
			}
			to.Done()
			switch {
			case e.Has("cost") && (e.Has("unread") || x.HasTokens):
				e.Fail("cost", "give one of cost (a header or body rule's usage), tokens (a format rule's) or unread (why it has none)")
			case !e.Has("cost") && !x.HasTokens && !e.Has("unread"):
				e.Fail("cost", "give one of cost (a header or body rule's usage), tokens (a format rule's) or unread (why it has none)")
			case e.Has("model") && !x.HasTokens:
				e.Fail("model", "goes with tokens")
			}
			e.Done()
			out = append(out, x)
		}
	})
	return out, err
}

func appendField(b []byte, sep byte, name, v string) []byte {
	b = append(b, sep, '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return conf.AppendJSONString(b, v)
}

func appendInt(b []byte, name string, v int64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}
