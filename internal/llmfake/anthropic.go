package llmfake

import (
	"net/http"
	"strings"
)

// anthropic is POST /v1/messages, Anthropic's Messages API.
type anthropic struct{}

func (anthropic) fail(w http.ResponseWriter, code int, msg string) {
	typ := "invalid_request_error"
	switch {
	case code == 529:
		typ = "overloaded_error"
	case code >= 500:
		typ = "api_error"
	case code == 404:
		typ = "not_found_error"
	}
	writeJSON(w, code, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// usage is Anthropic's usage object: input_tokens are the prompt's tokens neither read from nor
// written to the cache; output is the output so far.
func (a anthropic) usage(c *call, output int) map[string]any {
	u := c.u
	return map[string]any{"input_tokens": c.count(u.Prompt - u.Cached - u.CacheWrite), "cache_creation_input_tokens": u.CacheWrite,
		"cache_read_input_tokens": u.Cached, "output_tokens": c.count(output),
		"cache_creation": map[string]any{"ephemeral_5m_input_tokens": u.CacheWrite, "ephemeral_1h_input_tokens": 0}, "service_tier": "standard"}
}

func (a anthropic) answer(c *call) {
	text := strings.Repeat("tok", c.u.Completion) + c.pad
	msg := func(content []any, stop any, usage any) map[string]any {
		return map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": c.model(), "content": content,
			"stop_reason": stop, "stop_sequence": nil, "usage": usage}
	}
	if !c.streams(false) {
		var usage any
		if c.withUsage() {
			usage = c.duplicated(a.usage(c, c.u.Completion), "output_tokens")
		}
		writeJSON(c.w, http.StatusOK, msg([]any{map[string]any{"type": "text", "text": text}}, "end_turn", usage))
		return
	}
	c.startStream("text/event-stream")
	start := msg([]any{}, nil, nil)
	if c.withUsage() {
		start["usage"] = a.usage(c, 1)
	} else {
		delete(start, "usage")
	}
	c.event("message_start", map[string]any{"type": "message_start", "message": start})
	c.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	c.event("ping", map[string]any{"type": "ping"})
	for i := 0; i < c.u.Completion; i++ {
		c.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "tok" + c.pad}})
	}
	c.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	// Running totals: with server tools, several deltas; only the last says end_turn.
	for d := 1; d <= c.deltas; d++ {
		out := max(1, c.u.Completion*d/c.deltas) // message_start said 1
		if c.hostile == "down" && d == c.deltas {
			out = 0
		}
		stop := "pause_turn"
		if d == c.deltas {
			stop = "end_turn"
		}
		delta := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}}
		if c.withUsage() {
			delta["usage"] = c.duplicated(map[string]any{"output_tokens": c.count(out)}, "output_tokens")
		}
		c.event("message_delta", delta)
	}
	if c.hostile != "noend" {
		c.event("message_stop", map[string]any{"type": "message_stop"})
	}
	c.end()
}
