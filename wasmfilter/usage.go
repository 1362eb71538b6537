package main

import (
	"context"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// A local rule whose cost comes from the response (usage, an LLM's tokens): the request reserves
// its estimate in shared data when admitted; the response's headers and each chunk of its body go
// to a rules.Meter on their way (the body is passed on at once, never buffered: the filter reads
// each chunk, then continues); when the stream is done (OnHttpStreamDone: the response ended, or
// the stream was reset), the actual cost, or the rule's fallback, is settled in shared data.
// The filter does not read request bodies: usage.estimate_body is refused, usage.estimate applies.

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

// meterHeaders hands the response's headers to the meter.
func (h *httpContext) meterHeaders() {
	if h.metered == nil {
		return
	}
	h.metered.m.Header(func(name string) []string {
		v, err := proxywasm.GetHttpResponseHeader(strings.ToLower(name))
		if err != nil {
			return nil
		}
		return []string{v}
	})
}

// OnHttpResponseBody shows each chunk of the body to the meter of a request whose usage rules
// read it, and passes it on.
func (h *httpContext) OnHttpResponseBody(size int, endOfStream bool) types.Action {
	if h.metered == nil || size == 0 || !h.metered.m.ReadsBody() {
		return types.ActionContinue
	}
	chunk, err := proxywasm.GetHttpResponseBody(0, size)
	if err == nil {
		h.metered.m.Write(chunk)
	}
	return types.ActionContinue
}

// settle charges the usage rules once the stream is done.
func (h *httpContext) settle() {
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
