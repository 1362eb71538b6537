package llmfake

import (
	"net/http"
	"strings"
	"time"
)

// ollama is Ollama's POST /api/chat (chat) and /api/generate: a JSON body with "stream": false,
// else an application/x-ndjson stream whose last object, done, has the counts.
type ollama struct{ chat bool }

func (ollama) fail(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": msg})
}

func (o ollama) answer(c *call) {
	part := func(text string, done bool) map[string]any {
		m := map[string]any{"model": c.model(), "created_at": time.Unix(1691000000, 0).UTC().Format(time.RFC3339Nano), "done": done}
		if o.chat {
			m["message"] = map[string]any{"role": "assistant", "content": text}
		} else {
			m["response"] = text
		}
		if done {
			m["done_reason"] = "stop"
			m["total_duration"], m["load_duration"], m["prompt_eval_duration"], m["eval_duration"] = 4883583458, 1334875, 342546000, 4535599000
			if c.withUsage() {
				m["prompt_eval_count"], m["eval_count"] = c.count(c.u.Prompt), c.count(c.u.Completion)
			}
		}
		return m
	}
	if !c.streams(true) {
		last := part(strings.Repeat("tok", c.u.Completion)+c.pad, true)
		writeJSON(c.w, http.StatusOK, c.duplicated(last, "eval_count"))
		return
	}
	c.startStream("application/x-ndjson")
	for i := 0; i < c.u.Completion; i++ {
		c.send(marshal(part("tok"+c.pad, false)) + "\n")
	}
	if c.hostile != "noend" {
		c.send(marshal(c.duplicated(part("", true), "eval_count")) + "\n")
	}
	c.end()
}
