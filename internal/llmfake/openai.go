package llmfake

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"strings"
)

// openAIError is OpenAI's error body.
func openAIError(w http.ResponseWriter, code int, msg string) {
	typ := "invalid_request_error"
	if code >= 500 {
		typ = "server_error"
	}
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}

// openAIUsage is OpenAI's usage object of u.
func (c *call) openAIUsage() any {
	u := c.u
	return c.duplicated(map[string]any{
		"prompt_tokens": c.count(u.Prompt), "completion_tokens": c.count(u.Completion), "total_tokens": c.count(u.Prompt + u.Completion),
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.Cached, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": u.Reasoning, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
	}, "prompt_tokens")
}

// openAIStream streams chunks made by chunk (of a delta's text, "" for the first and last) as
// OpenAI does: with stream_options.include_usage, "usage": null in each and a last chunk with
// the usage and no choices; then [DONE].
func (c *call) openAIStream(chunk func(text string, first bool, finish any) map[string]any) {
	c.startStream("text/event-stream")
	opts, _ := c.req["stream_options"].(map[string]any)
	includeUsage := c.withUsage() && opts["include_usage"] == true
	send := func(m map[string]any) {
		if includeUsage {
			m["usage"] = nil
		}
		c.event("", m)
	}
	send(chunk("", true, nil))
	for i := 0; i < c.u.Completion; i++ {
		send(chunk("tok"+c.pad, false, nil))
	}
	send(chunk("", false, "stop"))
	if includeUsage {
		m := chunk("", false, nil)
		m["choices"], m["usage"] = []any{}, c.openAIUsage()
		c.event("", m)
		if c.hostile == "down" {
			c.u.Completion--
			m["usage"] = c.openAIUsage()
			c.event("", m)
		}
	}
	c.end()
	if c.hostile != "noend" {
		c.send("data: [DONE]\n\n")
	}
}

// openAIChat is POST /v1/chat/completions.
type openAIChat struct{}

func (openAIChat) fail(w http.ResponseWriter, code int, msg string) { openAIError(w, code, msg) }

func (openAIChat) answer(c *call) {
	const id = "chatcmpl-fake"
	if !c.streams(false) {
		m := map[string]any{"id": id, "object": "chat.completion", "created": 1741570283, "model": c.model(),
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "logprobs": nil,
				"message": map[string]any{"role": "assistant", "content": strings.Repeat("tok", c.u.Completion) + c.pad, "refusal": nil}}},
			"usage": nil, "system_fingerprint": "fp_fake"}
		if c.withUsage() {
			m["usage"] = c.openAIUsage()
		}
		writeJSON(c.w, http.StatusOK, m)
		return
	}
	c.openAIStream(func(text string, first bool, finish any) map[string]any {
		delta := map[string]any{}
		if first {
			delta = map[string]any{"role": "assistant", "content": ""}
		} else if text != "" {
			delta = map[string]any{"content": text}
		}
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1741570283, "model": c.model(),
			"system_fingerprint": "fp_fake", "choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	})
}

// openAICompletions is POST /v1/completions, the legacy text completions.
type openAICompletions struct{}

func (openAICompletions) fail(w http.ResponseWriter, code int, msg string) { openAIError(w, code, msg) }

func (openAICompletions) answer(c *call) {
	const id = "cmpl-fake"
	choice := func(text string, finish any) []any {
		return []any{map[string]any{"text": text, "index": 0, "logprobs": nil, "finish_reason": finish}}
	}
	if !c.streams(false) {
		m := map[string]any{"id": id, "object": "text_completion", "created": 1741570283, "model": c.model(),
			"choices": choice(strings.Repeat("tok", c.u.Completion)+c.pad, "stop"), "usage": nil}
		if c.withUsage() {
			m["usage"] = c.openAIUsage()
		}
		writeJSON(c.w, http.StatusOK, m)
		return
	}
	c.openAIStream(func(text string, _ bool, finish any) map[string]any {
		return map[string]any{"id": id, "object": "text_completion", "created": 1741570283, "model": c.model(), "choices": choice(text, finish)}
	})
}

// openAIEmbeddings is POST /v1/embeddings.
type openAIEmbeddings struct{}

func (openAIEmbeddings) fail(w http.ResponseWriter, code int, msg string) { openAIError(w, code, msg) }

func (openAIEmbeddings) answer(c *call) {
	vector := []float32{0.0023064255, -0.009327292, -0.0028842222}
	var embedding any = vector
	// The official clients ask for base64 (little-endian float32s) unless told otherwise.
	if c.req["encoding_format"] == "base64" {
		b := make([]byte, 0, 4*len(vector))
		for _, f := range vector {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
		embedding = base64.StdEncoding.EncodeToString(b)
	}
	m := map[string]any{"object": "list", "model": c.model(),
		"data": []any{map[string]any{"object": "embedding", "index": 0, "embedding": embedding}}}
	if c.withUsage() {
		m["usage"] = c.duplicated(map[string]any{"prompt_tokens": c.count(c.u.Prompt), "total_tokens": c.count(c.u.Prompt)}, "prompt_tokens")
	}
	writeJSON(c.w, http.StatusOK, m)
}

// responses is POST /v1/responses, OpenAI's Responses API.
type responses struct{}

func (responses) fail(w http.ResponseWriter, code int, msg string) { openAIError(w, code, msg) }

func (responses) answer(c *call) {
	text := strings.Repeat("tok", c.u.Completion) + c.pad
	item := map[string]any{"id": "msg_fake", "type": "message", "status": "completed", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
	resp := func(status string, output []any, usage any) map[string]any {
		return map[string]any{"id": "resp_fake", "object": "response", "created_at": 1741386163, "status": status,
			"error": nil, "incomplete_details": nil, "model": c.model(), "output": output, "usage": usage}
	}
	var usage any
	if c.withUsage() {
		u := c.u
		usage = c.duplicated(map[string]any{"input_tokens": c.count(u.Prompt), "output_tokens": c.count(u.Completion),
			"total_tokens": c.count(u.Prompt + u.Completion), "input_tokens_details": map[string]any{"cached_tokens": u.Cached},
			"output_tokens_details": map[string]any{"reasoning_tokens": u.Reasoning}}, "input_tokens")
	}
	if !c.streams(false) {
		writeJSON(c.w, http.StatusOK, resp("completed", []any{item}, usage))
		return
	}
	c.startStream("text/event-stream")
	seq := 0
	ev := func(typ string, m map[string]any) {
		m["type"], m["sequence_number"] = typ, seq
		seq++
		c.event(typ, m)
	}
	ev("response.created", map[string]any{"response": resp("in_progress", []any{}, nil)})
	ev("response.in_progress", map[string]any{"response": resp("in_progress", []any{}, nil)})
	ev("response.output_item.added", map[string]any{"output_index": 0,
		"item": map[string]any{"id": "msg_fake", "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}})
	ev("response.content_part.added", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	for i := 0; i < c.u.Completion; i++ {
		ev("response.output_text.delta", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": "tok" + c.pad})
	}
	ev("response.output_text.done", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0, "text": text})
	ev("response.content_part.done", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
	ev("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	if c.hostile != "noend" {
		ev("response.completed", map[string]any{"response": resp("completed", []any{item}, usage)})
	}
	c.end()
}
