// Package llmfake is a fake LLM upstream for tests and the demo: an http.Handler that answers as
// OpenAI (Chat Completions, Completions, Embeddings, Responses), Anthropic (Messages), Gemini
// (generateContent, streamGenerateContent) and Ollama (/api/chat, /api/generate) do, as one JSON
// body or streamed in each provider's own form, with the token usage an LLM gateway limits by,
// and the faults and hostile variants such an upstream may have.
//
// The answer is deterministic. The prompt counts one token per 4 bytes of the request's text
// (its messages', input's, contents' or prompt's strings; rounded up, at least 1); the
// completion is "tok" repeated N times, one token each, where N is the request's output cap
// (max_tokens, max_completion_tokens, max_output_tokens, generationConfig.maxOutputTokens,
// options.num_predict; default DefaultTokens), or X-Fake-Tokens.
//
// Request headers steer it (the demo's curl and the tests alike):
//
//	X-Fake-Tokens: N         completion tokens (overrides the request's cap)
//	X-Fake-Cached: N         of the prompt's tokens, N read from the cache
//	X-Fake-Cache-Write: N    of the prompt's tokens, N written to the cache (Anthropic)
//	X-Fake-Reasoning: N      of the completion's tokens, N reasoning (OpenAI; Gemini: on top)
//	X-Fake-Deltas: N         an Anthropic stream sends N message_delta events (server tools)
//	X-Fake-Usage: body       usage in the body or the stream (default); an OpenAI stream carries
//	                         it only with stream_options.include_usage, as OpenAI's does
//	X-Fake-Usage: header     usage in response headers X-Usage-Prompt-Tokens,
//	                         X-Usage-Completion-Tokens, X-Usage-Total-Tokens (not in the body)
//	X-Fake-Usage: none       no usage anywhere
//	X-Fake-Hostile: KIND     the usage made hostile: negative, fraction, string, duplicate,
//	                         huge (above 10^15), down (a running count that goes down), noend
//	                         (a stream without its provider's end)
//	X-Fake-Delay: 20ms       a stream waits this long before each event (a slow stream)
//	X-Fake-Cut: K            a stream is cut after K events: the connection closes with no end
//	X-Fake-Status: 503       answer this status with the provider's error body and no usage
//	X-Fake-Pad: B            pad each event (or the body) with B bytes of content, for size tests
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

// Path is OpenAI's Chat Completions path, the fake's first.
const Path = "/v1/chat/completions"

// maxRequest bounds the request body read.
const maxRequest = 8 << 20

// Handler returns the fake upstream.
func Handler() http.Handler { return http.HandlerFunc(serve) }

// provider is how one API answers: its error body, its JSON answer and its stream.
type provider interface {
	fail(w http.ResponseWriter, code int, msg string)
	answer(c *call)
}

func route(r *http.Request) (provider, string) {
	p := r.URL.Path
	switch {
	case p == "/v1/chat/completions":
		return openAIChat{}, ""
	case p == "/v1/completions":
		return openAICompletions{}, ""
	case p == "/v1/embeddings":
		return openAIEmbeddings{}, ""
	case p == "/v1/responses":
		return responses{}, ""
	case p == "/v1/messages":
		return anthropic{}, ""
	case p == "/api/chat":
		return ollama{chat: true}, ""
	case p == "/api/generate":
		return ollama{}, ""
	case strings.HasPrefix(p, "/v1beta/models/") || strings.HasPrefix(p, "/v1/models/"):
		model, method, _ := strings.Cut(p[strings.LastIndexByte(p, '/')+1:], ":")
		switch method {
		case "generateContent":
			return gemini{model: model}, ""
		case "streamGenerateContent":
			return gemini{model: model, stream: true, sse: r.URL.Query().Get("alt") == "sse"}, ""
		}
	}
	return nil, "no such path: " + p
}

// call is one request being answered.
type call struct {
	w       http.ResponseWriter
	r       *http.Request
	req     map[string]any // the request body
	u       Usage
	where   string // body, header or none
	hostile string
	deltas  int
	cut     int // events before the cut; -1: none
	delay   time.Duration
	pad     string
	events  int
	rc      *http.ResponseController
}

// Usage is what the fake counts, by class.
type Usage struct {
	Prompt, Completion            int // Prompt holds Cached and CacheWrite; Completion holds Reasoning
	Cached, CacheWrite, Reasoning int
}

func serve(w http.ResponseWriter, r *http.Request) {
	p, why := route(r)
	if p == nil {
		openAIChat{}.fail(w, http.StatusNotFound, why)
		return
	}
	if r.Method != http.MethodPost {
		p.fail(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	c := &call{w: w, r: r, cut: -1}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequest)).Decode(&c.req); err != nil {
		p.fail(w, http.StatusBadRequest, "request body: "+err.Error())
		return
	}
	if why := c.read(); why != "" {
		p.fail(w, http.StatusBadRequest, why)
		return
	}
	if s := r.Header.Get("X-Fake-Status"); s != "" {
		code, err := strconv.Atoi(s)
		if err != nil || code < 400 || code > 599 {
			p.fail(w, http.StatusBadRequest, "X-Fake-Status: want 400..599")
			return
		}
		p.fail(w, code, "X-Fake-Status asked for "+s)
		return
	}
	if c.where == "header" {
		h := w.Header()
		h.Set("X-Usage-Prompt-Tokens", strconv.Itoa(c.u.Prompt))
		h.Set("X-Usage-Completion-Tokens", strconv.Itoa(c.u.Completion))
		h.Set("X-Usage-Total-Tokens", strconv.Itoa(c.u.Prompt+c.u.Completion))
	}
	c.rc = http.NewResponseController(w)
	p.answer(c)
}

// read reads the request's counts and the X-Fake headers; it returns what is wrong with them.
func (c *call) read() string {
	h := c.r.Header
	c.u.Prompt = max(1, (len(texts(c.req))+3)/4)
	c.u.Completion = DefaultTokens
	for _, k := range [][]string{{"max_tokens"}, {"max_completion_tokens"}, {"max_output_tokens"},
		{"generationConfig", "maxOutputTokens"}, {"options", "num_predict"}} {
		if n, ok := number(c.req, k...); ok && n > 0 {
			c.u.Completion = n
		}
	}
	num := func(name string, v *int) string {
		if s := h.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return name + ": want a whole number"
			}
			*v = n
		}
		return ""
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"X-Fake-Tokens", &c.u.Completion}, {"X-Fake-Cached", &c.u.Cached}, {"X-Fake-Cache-Write", &c.u.CacheWrite},
		{"X-Fake-Reasoning", &c.u.Reasoning}, {"X-Fake-Deltas", &c.deltas}, {"X-Fake-Cut", &c.cut}} {
		if why := num(f.name, f.v); why != "" {
			return why
		}
	}
	pad := 0
	if why := num("X-Fake-Pad", &pad); why != "" {
		return why
	}
	c.pad = strings.Repeat("x", pad)
	c.u.Prompt += c.u.Cached + c.u.CacheWrite
	c.u.Reasoning = min(c.u.Reasoning, c.u.Completion)
	c.deltas = max(c.deltas, 1)
	if s := h.Get("X-Fake-Delay"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > time.Minute {
			return "X-Fake-Delay: want a duration up to 1m"
		}
		c.delay = d
	}
	switch c.where = h.Get("X-Fake-Usage"); c.where {
	case "":
		c.where = "body"
	case "body", "header", "none":
	default:
		return "X-Fake-Usage: want body, header or none"
	}
	switch c.hostile = h.Get("X-Fake-Hostile"); c.hostile {
	case "", "negative", "fraction", "string", "duplicate", "huge", "down", "noend":
	default:
		return "X-Fake-Hostile: want negative, fraction, string, duplicate, huge, down or noend"
	}
	return ""
}

// texts returns the request's text: every string under its messages, input, contents, prompt,
// system and instructions, joined.
func texts(req map[string]any) string {
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			b.WriteString(v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				if k != "role" && k != "type" {
					walk(e)
				}
			}
		}
	}
	for _, k := range []string{"messages", "input", "contents", "prompt", "system", "instructions", "systemInstruction"} {
		walk(req[k])
	}
	return b.String()
}

// number returns the whole number at path in v.
func number(v map[string]any, path ...string) (int, bool) {
	var cur any = v
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false
		}
		cur = m[k]
	}
	f, ok := cur.(float64)
	return int(f), ok && f == float64(int(f))
}

// model returns the request's model, or the fake's.
func (c *call) model() string {
	if m, ok := c.req["model"].(string); ok && m != "" {
		return m
	}
	return "fake-1"
}

// streams reports whether the request asks for a stream ("stream": true; Ollama streams unless
// told not to).
func (c *call) streams(byDefault bool) bool {
	s, ok := c.req["stream"].(bool)
	if !ok {
		return byDefault
	}
	return s
}

// count returns n as the usage writes it, made hostile when asked: a JSON value.
func (c *call) count(n int) any {
	switch c.hostile {
	case "negative":
		return -n - 1
	case "fraction":
		return json.Number(strconv.Itoa(n) + ".5")
	case "string":
		return strconv.Itoa(n)
	case "huge":
		return json.Number("10000000000000000")
	}
	return n
}

// withUsage reports whether the body carries usage.
func (c *call) withUsage() bool { return c.where == "body" }

// startStream writes the headers of a stream of this content type.
func (c *call) startStream(contentType string) {
	c.w.Header().Set("Content-Type", contentType)
	c.w.Header().Set("Cache-Control", "no-cache")
	c.w.WriteHeader(http.StatusOK)
}

// send writes an event (its whole text), after the delay, cutting the stream when told.
func (c *call) send(text string) {
	if c.cut >= 0 && c.events >= c.cut {
		panic(http.ErrAbortHandler) // closes the connection with the stream unfinished
	}
	if c.delay > 0 {
		select {
		case <-time.After(c.delay):
		case <-c.r.Context().Done():
			panic(http.ErrAbortHandler)
		}
	}
	fmt.Fprint(c.w, text)
	c.rc.Flush()
	c.events++
}

// event writes a server-sent event: an event: line when name is not "", and v's JSON as data.
func (c *call) event(name string, v any) {
	s := ""
	if name != "" {
		s = "event: " + name + "\n"
	}
	c.send(s + "data: " + marshal(v) + "\n\n")
}

// end ends a stream; a cut counted past its last event still cuts it.
func (c *call) end() {
	if c.cut >= 0 && c.events >= c.cut {
		panic(http.ErrAbortHandler)
	}
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append([]byte(marshal(v)), '\n'))
}

// marshal writes v as JSON; a duplicate made hostile is a raw message.
func marshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// duplicated returns obj's JSON with its key repeated at the end, as 1 (a hostile upstream's
// second word on it), or obj when not asked.
func (c *call) duplicated(obj map[string]any, key string) any {
	if c.hostile != "duplicate" {
		return obj
	}
	b, _ := json.Marshal(obj)
	return json.RawMessage(string(b[:len(b)-1]) + `,"` + key + `":1}`)
}
