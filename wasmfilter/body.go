package main

import (
	"strings"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The request body. A request that a local rule reading the body matches (a usage rule's format
// or estimate_body: its model, its output cap), or, in cluster mode, an OpenAI request (dianad's
// rules may read its response in OpenAI's format), is decided once its body's first bytes are
// read: its headers wait (ActionPause) while Envoy buffers the body, up to peekLimit bytes or its
// end (OnHttpRequestBody). A streamed OpenAI request that does not ask for its usage, whose
// response such a rule reads, is made to ask (stream_options.include_usage; its content-length
// removed, as the edit changes it), and strip takes the usage back out of the response the client
// receives, as dianad does.

// peekLimit is the most bytes of a request body the filter reads before deciding: a quarter of
// Envoy's default buffer limit (1 MiB), past which Envoy answers 413 to a body it is told to
// buffer. A field further into the body cannot be read for sure: the rule reserves its worst case.
const peekLimit = 256 << 10

// readsBody reports whether the request in is decided with its body's first bytes.
func (h *httpContext) readsBody(in *rules.Input) bool {
	cfg := h.p.cfg
	for _, r := range cfg.bodyRules {
		if r.Match.Matches(in) {
			return true
		}
	}
	return cfg.cluster != nil && openAIPath(in.Path)
}

// openAIPath reports whether a request to path is OpenAI's (Chat Completions, Completions).
func openAIPath(path string) bool {
	f := usage.FormatForPath(path)
	return f != nil && f.Name == "openai"
}

// waitBody holds the request read as in until its body's first bytes have come.
func (h *httpContext) waitBody(in *rules.Input) types.Action {
	b := *in
	h.body = &b
	return types.ActionPause
}

// OnHttpRequestBody decides a request that waits for its body's first bytes, once they are
// buffered, and makes it ask for its stream's usage when a rule reads it.
func (h *httpContext) OnHttpRequestBody(size int, endOfStream bool) types.Action {
	in := h.body
	if in == nil {
		return types.ActionContinue
	}
	if !endOfStream && size < peekLimit {
		return types.ActionPause // Envoy buffers the body until more comes
	}
	h.body = nil
	data, err := proxywasm.GetHttpRequestBody(0, min(size, peekLimit))
	enc := header("content-encoding")
	switch {
	case err != nil: // nothing read: the rules reserve their estimate
	case enc != "" && !strings.EqualFold(enc, "identity"):
		in.BodyState = rules.BodyEncoded
	case endOfStream && size <= peekLimit:
		in.Body, in.BodyState = string(data), rules.BodyWhole
	default:
		in.Body, in.BodyState = string(data), rules.BodyPart
	}
	h.askUsage = h.p.cfg.cluster != nil && openAIPath(in.Path)
	act := h.decide(in)
	if h.askUsage && !h.replied && in.BodyState == rules.BodyWhole && openAIPath(in.Path) {
		h.asksUsage(data)
	}
	return act
}

// asksUsage edits a streamed request's body, whole in data, to ask for its stream's usage, if it
// does not; its response's usage chunk is then taken out for the client (strip).
func (h *httpContext) asksUsage(data []byte) {
	q := usage.ReadRequest(string(data), true)
	if !q.AsksUsage() {
		return
	}
	edited, _ := q.AskUsage(data)
	if err := proxywasm.ReplaceHttpRequestBody(edited); err != nil {
		proxywasm.LogWarn("diana.wasm: asking the stream for its usage: " + err.Error())
		return
	}
	if err := proxywasm.RemoveHttpRequestHeader("content-length"); err != nil {
		proxywasm.LogWarn("diana.wasm: removing the content-length of an edited body: " + err.Error())
	}
	h.strip = &usage.UsageChunks{}
}

// stripped returns what of chunk, a piece of an OpenAI stream whose usage the filter asked for,
// the client receives: without the usage chunk and the "usage": null of the others; end: the
// stream's last piece, with what was held of an event it ended inside.
func (h *httpContext) stripped(chunk []byte, end bool) []byte {
	var out []byte
	emit := func(p []byte, drop bool) {
		if !drop {
			out = append(out, p...)
		}
	}
	h.strip.Write(chunk, emit)
	if end {
		h.strip.Close(emit)
	}
	return out
}

// responseHeader returns a response header's value, "" when it has none.
func responseHeader(name string) string {
	v, _ := proxywasm.GetHttpResponseHeader(name)
	return v
}
