package llmfake

import (
	"net/http"
	"strings"
)

// gemini is Gemini's POST .../models/MODEL:generateContent and :streamGenerateContent (as
// text/event-stream with ?alt=sse, else a JSON array of chunks streamed as it is written).
type gemini struct {
	model       string
	stream, sse bool
}

func (gemini) fail(w http.ResponseWriter, code int, msg string) {
	status := "INVALID_ARGUMENT"
	if code >= 500 {
		status = "UNAVAILABLE"
	}
	writeJSON(w, code, map[string]any{"error": map[string]any{"code": code, "message": msg, "status": status}})
}

// usage is Gemini's usageMetadata with out candidate tokens so far: the prompt's count holds the
// cached tokens; thoughts are counted apart.
func (g gemini) usage(c *call, out int) any {
	u := c.u
	m := map[string]any{"promptTokenCount": c.count(u.Prompt), "totalTokenCount": c.count(u.Prompt + out + u.Reasoning),
		"promptTokensDetails": []any{map[string]any{"modality": "TEXT", "tokenCount": u.Prompt}}}
	if out > 0 {
		m["candidatesTokenCount"] = c.count(out)
	}
	if u.Cached > 0 {
		m["cachedContentTokenCount"] = u.Cached
	}
	if u.Reasoning > 0 {
		m["thoughtsTokenCount"] = u.Reasoning
	}
	return c.duplicated(m, "promptTokenCount")
}

func (g gemini) answer(c *call) {
	chunk := func(text string, finish bool, out int) map[string]any {
		cand := map[string]any{"content": map[string]any{"parts": []any{map[string]any{"text": text}}, "role": "model"}, "index": 0}
		if finish {
			cand["finishReason"] = "STOP"
		}
		m := map[string]any{"candidates": []any{cand}, "modelVersion": g.model, "responseId": "fake"}
		if c.withUsage() {
			m["usageMetadata"] = g.usage(c, out)
		}
		return m
	}
	if !g.stream {
		writeJSON(c.w, http.StatusOK, chunk(strings.Repeat("tok", c.u.Completion)+c.pad, true, c.u.Completion))
		return
	}
	n := c.u.Completion
	if g.sse {
		c.startStream("text/event-stream")
		for i := 1; i <= n; i++ {
			out := i
			if c.hostile == "down" && i == n {
				out = 0
			}
			if last := i == n; !last || c.hostile != "noend" {
				c.send("data: " + marshal(chunk("tok"+c.pad, last, out)) + "\r\n\r\n")
			}
		}
		c.end()
		return
	}
	c.startStream("application/json")
	sep := "["
	for i := 1; i <= n; i++ {
		c.send(sep + marshal(chunk("tok"+c.pad, i == n, i)))
		sep = ",\r\n"
	}
	c.end()
	if c.hostile != "noend" {
		c.send("]")
	}
}
