package main

import (
	"context"
	"errors"

	"github.com/diana-gw/diana/shared/check"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// A local rule whose cost comes from the response (usage, an LLM's tokens): the request reserves
// its estimate in shared data when admitted; the response's headers, each chunk of its body and
// its trailers go to a rules.Meter on their way (the body is passed on at once, never buffered:
// the filter reads each chunk, then continues); when the stream is done (OnHttpStreamDone, after
// the trailers and the body's end: the response ended, or the stream was reset), the actual
// cost, or the rule's fallback, is settled in shared data. A usage.header is looked for in the
// headers and the trailers (gRPC and HTTP/2 upstreams send what they know only at the end as
// trailers); given in both, it is given twice and the fallback is charged (rules.Meter.Trailer).
// The filter does not read request bodies: usage.estimate_body is refused, usage.estimate applies.
//
// A cluster rule with usage is decided by dianad: the filter's /v1/check says "settle": true, and
// dianad answers with each usage rule's fields to read and a ticket (check.Response.Usage). The
// response is read the same way (a rules.Meter over rules holding only those fields), and when the
// stream is done the costs, or why each is unread, go back with the tickets to dianad's POST
// /v1/settle (cluster.settle_path), which settles them in Redis. A settle call that fails is
// counted (diana.settle_failed) and logged: dianad then keeps the estimate only.

// metering is what an admitted request holds for its usage rules until its stream is done.
type metering struct {
	res rules.Result
	m   *rules.Meter
}

// meter starts metering the response of res, if a local rule reserved under it.
func (h *httpContext) meter(res *rules.Result) {
	if m := res.Meter(usage.Limits{}); m != nil {
		h.metered = &metering{res: *res, m: m}
	}
}

// remote is what an admitted request holds for dianad's usage rules until its stream is done.
type remote struct {
	m       *rules.Meter
	rules   []*rules.Rule
	tickets []string
	bad     []error // by rule: dianad's fields could not be parsed (a newer dianad), unread
}

// meterRemote starts metering the response for the usage rules dianad reserved under.
func (h *httpContext) meterRemote(us []check.Usage, path string) {
	if len(us) == 0 {
		return
	}
	rm := &remote{rules: make([]*rules.Rule, len(us)), tickets: make([]string, len(us)), bad: make([]error, len(us))}
	for i, u := range us {
		ru := &rules.Usage{}
		var err error
		switch {
		case u.Header != "":
			ru.Header, err = usage.ParseHeaders(u.Header)
		case u.Format == usage.FormatAuto:
			ru.Auto = true
		case u.Format != "":
			if ru.Format = usage.FormatNamed(u.Format); ru.Format == nil {
				err = errors.New("unknown usage format " + strconv.Quote(u.Format) + " (a newer dianad?)")
			}
		default:
			ru.Body, err = usage.ParsePaths(u.Body)
			if u.StreamUsage == usage.LastEvent.String() {
				ru.StreamUsage = usage.LastEvent
			}
		}
		if err != nil {
			rm.bad[i] = err
			ru = &rules.Usage{Header: noHeader}
		}
		rm.rules[i], rm.tickets[i] = &rules.Rule{Name: u.Rule, Usage: ru}, u.Ticket
	}
	rm.m = rules.NewMeter(rm.rules, usage.Limits{}, path)
	h.remote = rm
}

// noHeader stands for fields dianad sent that the filter cannot read.
var noHeader, _ = usage.ParseHeaders("x-diana-unreadable")

// meterHeaders hands the response's headers to the meters.
func (h *httpContext) meterHeaders() {
	get := func(name string) []string {
		v, err := proxywasm.GetHttpResponseHeader(strings.ToLower(name))
		if err != nil {
			return nil
		}
		return []string{v}
	}
	if h.metered != nil {
		h.metered.m.Header(get)
	}
	if h.remote != nil {
		h.remote.m.Header(get)
	}
}

// OnHttpResponseTrailers hands the response's trailers to the meters of a request whose usage
// rules read headers: all of them in one host call, at the first field a rule asks for.
func (h *httpContext) OnHttpResponseTrailers(int) types.Action {
	if h.metered == nil && h.remote == nil {
		return types.ActionContinue
	}
	var all [][2]string
	read := false
	get := func(name string) []string {
		if !read {
			read = true
			all, _ = proxywasm.GetHttpResponseTrailers()
		}
		var vs []string
		for _, kv := range all {
			if strings.EqualFold(kv[0], name) {
				vs = append(vs, kv[1])
			}
		}
		return vs
	}
	if h.metered != nil {
		h.metered.m.Trailer(get)
	}
	if h.remote != nil {
		h.remote.m.Trailer(get)
	}
	return types.ActionContinue
}

// OnHttpResponseBody shows each chunk of the body to the meter of a request whose usage rules
// read it, and passes it on.
func (h *httpContext) OnHttpResponseBody(size int, endOfStream bool) types.Action {
	local := h.metered != nil && h.metered.m.ReadsBody()
	remote := h.remote != nil && h.remote.m.ReadsBody()
	if size == 0 && (h.strip == nil || !endOfStream) || !local && !remote && h.strip == nil {
		return types.ActionContinue
	}
	chunk, err := proxywasm.GetHttpResponseBody(0, size)
	if err != nil {
		return types.ActionContinue
	}
	if local {
		h.metered.m.Write(chunk)
	}
	if remote {
		h.remote.m.Write(chunk)
	}
	if h.strip != nil {
		if err := proxywasm.ReplaceHttpResponseBody(h.stripped(chunk, endOfStream)); err != nil {
			proxywasm.LogWarn("diana.wasm: taking the usage out of the stream: " + err.Error())
		}
	}
	return types.ActionContinue
}

// settle charges the usage rules once the stream is done.
func (h *httpContext) settle() {
	h.settleRemote()
	if h.metered == nil {
		return
	}
	mt := h.metered
	h.metered = nil
	h.p.local.Settle(context.Background(), &mt.res, mt.m.Cost)
}

// unmeter settles the usage rules of a request answered by the filter itself (refused by dianad
// after the local rules admitted it): it reached no upstream and used nothing.
func (h *httpContext) unmeter() {
	if h.metered == nil {
		return
	}
	mt := h.metered
	h.metered = nil
	h.p.local.Settle(context.Background(), &mt.res, func(*rules.Rule) (int64, error) { return 0, nil })
}

// settled is the local engine's Settled hook: a response charged its fallback is counted and
// logged (summarised at each tick).
func (p *pluginContext) settled(s rules.Settled) {
	if s.Err == nil {
		return
	}
	p.m.usageUnread.Increment(1)
	p.usageLog.add("rule " + strconv.Quote(s.Rule.Name) + " charged " + strconv.FormatInt(s.Cost, 10) + ": " + s.Err.Error())
}

// settleRemote sends dianad the costs of its usage rules (POST /v1/settle), once the stream is
// done.
func (h *httpContext) settleRemote() {
	rm := h.remote
	if rm == nil {
		return
	}
	h.remote = nil
	p := h.p
	c := p.cfg.cluster
	list := make([]check.Settlement, len(rm.rules))
	for i, r := range rm.rules {
		list[i] = settlement(rm.m, r, rm.tickets[i], rm.bad[i])
	}
	hdrs := [][2]string{
		{":method", "POST"}, {":path", c.settle}, {":authority", c.authority},
		{"content-type", "application/json"},
	}
	if c.token != "" {
		hdrs = append(hdrs, [2]string{"authorization", "Bearer " + c.token})
	}
	body := check.AppendSettle(make([]byte, 0, 256), list)
	// The call is made from the plugin's context: Envoy cancels the calls a stream's context has
	// in flight when it deletes that context, right after this callback.
	if err := proxywasm.SetEffectiveContext(p.id); err != nil {
		p.settleFailed("switching to the plugin's context: " + err.Error())
		return
	}
	if _, err := proxywasm.DispatchHttpCall(c.name, hdrs, body, nil, c.timeoutMS, p.onSettle); err != nil {
		p.settleFailed("dispatching to cluster " + c.name + ": " + err.Error())
	}
	proxywasm.SetEffectiveContext(h.id)
}

// settlement is what the response told of rule r's usage, for dianad to settle ticket with: the
// cost of a header or body rule, the tokens of a format rule, which dianad prices, or why it told
// nothing usable (bad: dianad's fields could not be parsed).
func settlement(m *rules.Meter, r *rules.Rule, ticket string, bad error) check.Settlement {
	x := check.Settlement{Ticket: ticket}
	var err error
	if r.Usage.ReadsFormat() {
		var u usage.Usage
		u, err = m.Usage(r)
		if err != nil {
			u, _ = usage.Partial(err)
		}
		x.Tokens, x.HasTokens, x.Model = u.Tokens, err == nil || u.Tokens.Sum() > 0, u.Model
	} else {
		x.Cost, err = m.Cost(r)
	}
	if bad != nil {
		err, x.HasTokens, x.Model = bad, false, ""
	}
	if err != nil {
		x.Unread = err.Error()
	}
	if !x.HasTokens {
		x.Model = ""
	}
	return x
}

// onSettle checks dianad's answer to a settlement: 204.
func (p *pluginContext) onSettle(numHeaders, bodySize, _ int) {
	if numHeaders == 0 {
		p.settleFailed("no answer from cluster " + p.cfg.cluster.name + " (connection failed or reset)")
		return
	}
	hdrs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		p.settleFailed("reading dianad's answer: " + err.Error())
		return
	}
	for _, kv := range hdrs {
		if kv[0] == ":status" && kv[1] != "204" {
			msg := ""
			if b, err := proxywasm.GetHttpCallResponseBody(0, min(bodySize, 512)); bodySize > 0 && err == nil {
				msg = ": " + string(b)
			}
			p.settleFailed("dianad answered with status " + kv[1] + msg)
		}
	}
}

// settleFailed counts and logs (summarised at each tick) a settlement dianad did not take: the
// request stays charged its estimate.
func (p *pluginContext) settleFailed(reason string) {
	p.m.settleFailed.Increment(1)
	p.settleLog.add(reason)
}
