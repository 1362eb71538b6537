// Package llmfake is a fake LLM upstream for tests and the demo: an http.Handler that answers
// OpenAI-shaped chat completions (POST /v1/chat/completions) as one JSON body or as a
// text/event-stream, with the token usage an LLM gateway limits by, and the faults such an
// upstream has: slow streams, streams cut mid-way, usage missing.
//
// The answer is deterministic. The prompt counts one token per 4 bytes of the messages'
// contents (rounded up, at least 1); the completion is "tok" repeated N times, one token each,
// where N is the request's max_tokens (default DefaultTokens), or X-Fake-Tokens.
//
// Request headers steer it (the demo's curl and the tests alike):
//
//	X-Fake-Tokens: N        completion tokens (overrides max_tokens)
//	X-Fake-Usage: body      usage in the body or the last event (default); for a stream only
//	                        with stream_options.include_usage, as OpenAI does
//	X-Fake-Usage: header    usage in response headers X-Usage-Prompt-Tokens,
//	                        X-Usage-Completion-Tokens, X-Usage-Total-Tokens (not in the body)
//	X-Fake-Usage: none      no usage anywhere
//	X-Fake-Delay: 20ms      a stream waits this long before each event (a slow stream)
//	X-Fake-Cut: K           a stream is cut after K events: the connection closes with no end
//	X-Fake-Status: 503      answer this status with an OpenAI-shaped error and no usage
//	X-Fake-Pad: B           pad each event (or the body) with B bytes of content, for size tests
//
// Any other path or method gets 404 or 405.
package llmfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultTokens is the completion's length when the request names none.
const DefaultTokens = 16

// Path is the one path the handler answers.
const Path = "/v1/chat/completions"

// maxRequest bounds the request body read.
const maxRequest = 1 << 20

// Request is the part of an OpenAI chat completion request the fake reads.
type Request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	MaxTokens     int    `json:"max_tokens"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
}

// Usage is OpenAI's usage object.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// PromptTokens is the fake's count of a request's prompt tokens.
func PromptTokens(req *Request) int {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Content)
	}
	return max(1, (n+3)/4)
}

// Handler returns the fake upstream.
func Handler() http.Handler { return http.HandlerFunc(serve) }

func serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		fail(w, http.StatusNotFound, "not_found", "no such path: "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		fail(w, http.StatusMethodNotAllowed, "invalid_request_error", "use POST")
		return
	}
	var req Request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequest)).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request_error", "request body: "+err.Error())
		return
	}
	h := r.Header
	if s := h.Get("X-Fake-Status"); s != "" {
		code, err := strconv.Atoi(s)
		if err != nil || code < 400 || code > 599 {
			fail(w, http.StatusBadRequest, "invalid_request_error", "X-Fake-Status: want 400..599")
			return
		}
		fail(w, code, "server_error", "X-Fake-Status asked for "+s)
		return
	}
	tokens := req.MaxTokens
	if tokens <= 0 {
		tokens = DefaultTokens
	}
	num := func(name string, v *int) bool {
		if s := h.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				fail(w, http.StatusBadRequest, "invalid_request_error", name+": want a whole number")
				return false
			}
			*v = n
		}
		return true
	}
	cut, pad := -1, 0
	if !num("X-Fake-Tokens", &tokens) || !num("X-Fake-Cut", &cut) || !num("X-Fake-Pad", &pad) {
		return
	}
	var delay time.Duration
	if s := h.Get("X-Fake-Delay"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > time.Minute {
			fail(w, http.StatusBadRequest, "invalid_request_error", "X-Fake-Delay: want a duration up to 1m")
			return
		}
		delay = d
	}
	where := h.Get("X-Fake-Usage")
	switch where {
	case "":
		where = "body"
	case "body", "header", "none":
	default:
		fail(w, http.StatusBadRequest, "invalid_request_error", "X-Fake-Usage: want body, header or none")
		return
	}
	u := Usage{PromptTokens: PromptTokens(&req), CompletionTokens: tokens}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if where == "header" {
		w.Header().Set("X-Usage-Prompt-Tokens", strconv.Itoa(u.PromptTokens))
		w.Header().Set("X-Usage-Completion-Tokens", strconv.Itoa(u.CompletionTokens))
		w.Header().Set("X-Usage-Total-Tokens", strconv.Itoa(u.TotalTokens))
	}
	model := req.Model
	if model == "" {
		model = "fake-1"
	}
	padding := strings.Repeat("x", pad)
	if !req.Stream {
		var usage *Usage
		if where == "body" {
			usage = &u
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion", "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": strings.Repeat("tok", tokens) + padding}}},
			"usage": usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	events := 0
	send := func(v any) {
		if cut >= 0 && events >= cut {
			panic(http.ErrAbortHandler) // closes the connection with the stream unfinished
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				panic(http.ErrAbortHandler)
			}
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		rc.Flush()
		events++
	}
	includeUsage := where == "body" && req.StreamOptions.IncludeUsage
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if includeUsage {
			c["usage"] = nil
		}
		return c
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for i := 0; i < tokens; i++ {
		send(chunk(map[string]any{"content": "tok" + padding}, nil))
	}
	send(chunk(map[string]any{}, "stop"))
	if includeUsage {
		send(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
			"choices": []any{}, "usage": u})
	}
	if cut >= 0 && events >= cut {
		panic(http.ErrAbortHandler)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// fail answers an OpenAI-shaped error.
func fail(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": typ}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
