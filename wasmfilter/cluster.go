package main

import (
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/check"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// maxCheckBody keeps the request to dianad under its 64 KiB limit: headers that would pass it
// are left out.
const maxCheckBody = 60 << 10

// sensitive headers are never sent to dianad unless cluster.headers names them.
func sensitive(name string) bool {
	return name == "authorization" || name == "cookie" || name == "proxy-authorization"
}

// callout sends the request to dianad's POST /v1/check and pauses it; onCheck resumes it or
// replies.
func (h *httpContext) callout(in *rules.Input) types.Action {
	c := h.p.cfg.cluster
	h.path = in.Path
	body := h.checkBody(in, c)
	hdrs := [][2]string{
		{":method", "POST"}, {":path", c.path}, {":authority", c.authority},
		{"content-type", "application/json"},
	}
	if c.token != "" {
		hdrs = append(hdrs, [2]string{"authorization", "Bearer " + c.token})
	}
	if _, err := proxywasm.DispatchHttpCall(c.name, hdrs, body, nil, c.timeoutMS, h.onCheck); err != nil {
		return h.failed("dispatching to cluster " + c.name + ": " + err.Error())
	}
	h.paused = true
	return types.ActionPause
}

// checkBody is the body of dianad's POST /v1/check (shared/check, docs/api.md).
func (h *httpContext) checkBody(in *rules.Input, c *clusterConfig) []byte {
	req := check.Request{Method: in.Method, Host: in.Host, Path: in.Path, ClientIP: h.addr,
		Consumer: in.Consumer, Route: in.Route, Settle: true}
	if c.headers != nil {
		for _, k := range c.headers {
			if v, err := proxywasm.GetHttpRequestHeader(k); err == nil {
				req.Headers = append(req.Headers, [2]string{k, v})
			}
		}
	} else if all, err := proxywasm.GetHttpRequestHeaders(); err == nil {
		req.Headers = all[:0]
		for _, kv := range all {
			if k := strings.ToLower(kv[0]); k != "" && k[0] != ':' && !sensitive(k) {
				req.Headers = append(req.Headers, [2]string{k, kv[1]})
			}
		}
	}
	return req.AppendJSON(make([]byte, 0, 512), maxCheckBody)
}

// onCheck handles dianad's answer (or its absence: 0 headers on a reset, 504 on a timeout).
func (h *httpContext) onCheck(numHeaders, bodySize, _ int) {
	if numHeaders == 0 {
		h.failed("no answer from cluster " + h.p.cfg.cluster.name + " (connection failed or reset)")
		return
	}
	hdrs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		h.failed("reading dianad's answer: " + err.Error())
		return
	}
	status := ""
	for _, kv := range hdrs {
		if kv[0] == ":status" {
			status = kv[1]
		}
	}
	if len(status) != 3 || status[0] != '2' {
		h.failed("dianad answered with status " + strconv.Quote(status))
		return
	}
	var body []byte
	if bodySize > 0 {
		if body, err = proxywasm.GetHttpCallResponseBody(0, bodySize); err != nil {
			h.failed("reading dianad's answer: " + err.Error())
			return
		}
	}
	ans, err := check.ParseResponse(body)
	if err != nil {
		h.failed("dianad's answer is unreadable: " + err.Error())
		return
	}
	for i := range ans.Headers { // Envoy keeps header names in lower case
		ans.Headers[i][0] = strings.ToLower(ans.Headers[i][0])
	}
	if !ans.Allowed && h.enforced("dianad's "+strconv.Quote(ans.Rule)) {
		h.reply(ans.Status, append(ans.Headers, ratelimited), []byte(ans.Body))
		return
	}
	if len(ans.Headers) > 0 {
		h.hdrs = ans.Headers
	}
	h.meterRemote(ans.Usage, h.path)
	h.resume()
}

// resume lets a paused, allowed request go on.
func (h *httpContext) resume() {
	h.allow()
	if err := proxywasm.ResumeHttpRequest(); err != nil {
		proxywasm.LogWarn("diana.wasm: resuming the request: " + err.Error())
	}
}

// failed applies cluster.on_failure to a request dianad could not decide; if it waits for the
// callout (h.paused), it is resumed or answered.
func (h *httpContext) failed(reason string) types.Action {
	p := h.p
	p.m.backendErrors.Increment(1)
	p.callouts.add(reason + "; on_failure " + p.cfg.cluster.onFailure.String() + ", client " + h.client())
	switch p.cfg.cluster.onFailure {
	case rules.FailClosed:
		h.hdrs = nil
		if h.enforced("(on_failure: closed)") {
			return h.reply(p.cfg.cluster.status, nil, rules.DenialBody("rate limit service unavailable", -1))
		}
	case rules.FailLocal:
		in := h.input()
		res := h.check(p.fallback, &in)
		if !res.Allowed {
			return h.deny(&res)
		}
		h.hdrs = appendHeaders(h.hdrs[:0], &res)
	}
	return h.pass()
}
