package llmfake_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/llmfake"
	"github.com/diana-gw/diana/shared/usage"
)

// prompt is 40 bytes of content: 10 prompt tokens.
const prompt = `"messages":[{"role":"user","content":"` + "0123456789012345678901234567890123456789" + `"}]`

func TestFake(t *testing.T) {
	srv := httptest.NewServer(llmfake.Handler())
	defer srv.Close()
	total, _ := usage.ParsePaths("usage.total_tokens")
	header, _ := usage.ParseHeaders("x-usage-total-tokens")
	for _, c := range []struct {
		name    string
		body    string
		headers map[string]string
		status  int
		stream  bool
		cost    int64
		err     error // the usage reader's error class
		cut     bool  // the body ends with a transport error
		header  int64 // the usage header's value, 0: none
	}{
		{name: "json", body: `{"model":"m","max_tokens":5,` + prompt + `}`, status: 200, cost: 15},
		{name: "json default tokens", body: `{` + prompt + `}`, status: 200, cost: 10 + llmfake.DefaultTokens},
		{name: "json X-Fake-Tokens", body: `{"max_tokens":5,` + prompt + `}`, headers: map[string]string{"X-Fake-Tokens": "90"}, status: 200, cost: 100},
		{name: "json no usage", body: `{` + prompt + `}`, headers: map[string]string{"X-Fake-Usage": "none"}, status: 200, err: usage.ErrMissing},
		{name: "json usage in header", body: `{"max_tokens":5,` + prompt + `}`, headers: map[string]string{"X-Fake-Usage": "header"}, status: 200, err: usage.ErrMissing, header: 15},
		{name: "stream", body: `{"stream":true,"stream_options":{"include_usage":true},"max_tokens":7,` + prompt + `}`, status: 200, stream: true, cost: 17},
		{name: "stream without include_usage", body: `{"stream":true,"max_tokens":7,` + prompt + `}`, status: 200, stream: true, err: usage.ErrMissing},
		{name: "stream cut", body: `{"stream":true,"stream_options":{"include_usage":true},"max_tokens":7,` + prompt + `}`, headers: map[string]string{"X-Fake-Cut": "4"}, status: 200, stream: true, err: usage.ErrMissing, cut: true},
		{name: "stream cut after usage", body: `{"stream":true,"stream_options":{"include_usage":true},"max_tokens":7,` + prompt + `}`, headers: map[string]string{"X-Fake-Cut": "10"}, status: 200, stream: true, cost: 17, cut: true},
		{name: "upstream error", body: `{` + prompt + `}`, headers: map[string]string{"X-Fake-Status": "503"}, status: 503, err: usage.ErrMissing},
		{name: "bad request", body: `{`, status: 400, err: usage.ErrMissing},
		{name: "bad header", body: `{}`, headers: map[string]string{"X-Fake-Usage": "maybe"}, status: 400, err: usage.ErrMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL+llmfake.Path, strings.NewReader(c.body))
			for k, v := range c.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			stream := usage.IsStream(resp.Header.Get("Content-Type"))
			if stream != c.stream {
				t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
			r := usage.NewReader(total, stream, usage.Limits{})
			_, err = io.Copy(r, resp.Body)
			if (err != nil) != c.cut {
				t.Fatalf("reading the body: %v, want a cut: %v", err, c.cut)
			}
			n, err := r.End()
			if c.err == nil && (err != nil || n != c.cost) || c.err != nil && !errors.Is(err, c.err) {
				t.Fatalf("usage (%d, %v), want (%d, %v)", n, err, c.cost, c.err)
			}
			h, err := header.Header(resp.Header.Values)
			if c.header == 0 && !errors.Is(err, usage.ErrMissing) || c.header != 0 && h != c.header {
				t.Fatalf("usage header (%d, %v), want %d", h, err, c.header)
			}
		})
	}
}

// TestSlowStream: X-Fake-Delay holds each event, and the events arrive as they are sent.
func TestSlowStream(t *testing.T) {
	srv := httptest.NewServer(llmfake.Handler())
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+llmfake.Path, strings.NewReader(`{"stream":true,"max_tokens":3}`))
	req.Header.Set("X-Fake-Delay", "50ms")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	n, err := resp.Body.Read(buf)
	first := time.Since(start)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "data: ") {
		t.Fatalf("first read: %q, %v", buf[:n], err)
	}
	io.Copy(io.Discard, resp.Body)
	all := time.Since(start)
	// 5 events (role, 3 tokens, stop): the first after one delay, all after five.
	if first > 200*time.Millisecond || all < 250*time.Millisecond {
		t.Fatalf("first event after %v, whole stream after %v", first, all)
	}
}

func TestRoutes(t *testing.T) {
	srv := httptest.NewServer(llmfake.Handler())
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		status       int
	}{{"GET", llmfake.Path, 405}, {"POST", "/v1/other", 404}} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
}

// TestFormats: every provider the fake speaks, JSON and streamed, is read by shared/usage's
// format of its path (FormatAuto) as the tokens the fake counted, by class; each hostile variant
// gives the error class it stands for.
func TestFormats(t *testing.T) {
	srv := httptest.NewServer(llmfake.Handler())
	defer srv.Close()
	// 40 bytes of text: 10 prompt tokens; 5 completion tokens.
	const text = "0123456789012345678901234567890123456789"
	msgs := `"messages":[{"role":"user","content":"` + text + `"}]`
	type call struct{ path, body string }
	calls := map[string]call{
		"openai":             {"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":5,` + msgs + `}`},
		"openai stream":      {"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},` + msgs + `}`},
		"completions":        {"/v1/completions", `{"model":"gpt-3.5-turbo-instruct","max_tokens":5,"prompt":"` + text + `"}`},
		"completions stream": {"/v1/completions", `{"model":"gpt-3.5-turbo-instruct","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"prompt":"` + text + `"}`},
		"responses":          {"/v1/responses", `{"model":"gpt-4.1","max_output_tokens":5,"input":"` + text + `"}`},
		"responses stream":   {"/v1/responses", `{"model":"gpt-4.1","max_output_tokens":5,"stream":true,"input":"` + text + `"}`},
		"anthropic":          {"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":5,` + msgs + `}`},
		"anthropic stream":   {"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":5,"stream":true,` + msgs + `}`},
		"gemini":             {"/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"parts":[{"text":"` + text + `"}]}],"generationConfig":{"maxOutputTokens":5}}`},
		"gemini sse":         {"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[{"parts":[{"text":"` + text + `"}]}],"generationConfig":{"maxOutputTokens":5}}`},
		"gemini array":       {"/v1beta/models/gemini-2.5-flash:streamGenerateContent", `{"contents":[{"parts":[{"text":"` + text + `"}]}],"generationConfig":{"maxOutputTokens":5}}`},
		"ollama":             {"/api/chat", `{"model":"llama3.2","stream":false,"options":{"num_predict":5},` + msgs + `}`},
		"ollama stream":      {"/api/chat", `{"model":"llama3.2","options":{"num_predict":5},` + msgs + `}`},
		"ollama generate":    {"/api/generate", `{"model":"llama3.2","options":{"num_predict":5},"prompt":"` + text + `"}`},
	}
	read := func(t *testing.T, c call, headers map[string]string) (usage.Usage, error) {
		req, _ := http.NewRequest("POST", srv.URL+c.path, strings.NewReader(c.body))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		path, _, _ := strings.Cut(c.path, "?")
		r := usage.NewFormatReader(usage.FormatForPath(path), usage.FramingOf(resp.Header.Get("Content-Type")), usage.Limits{})
		io.Copy(r, resp.Body)
		return r.Usage()
	}
	for name, c := range calls {
		t.Run(name, func(t *testing.T) {
			u, err := read(t, c, map[string]string{"X-Fake-Cached": "4", "X-Fake-Reasoning": "2"})
			// 10 prompt tokens and 4 cached; 5 completion tokens, 2 of them reasoning.
			want := usage.Tokens{usage.Input: 10, usage.CachedInput: 4, usage.Output: 3, usage.Reasoning: 2}
			switch {
			case strings.HasPrefix(name, "gemini"): // thoughts come on top of the candidates
				want[usage.Output] = 5
			case strings.HasPrefix(name, "anthropic"): // no reasoning count of its own
				want[usage.Output], want[usage.Reasoning] = 5, 0
			case strings.HasPrefix(name, "ollama"): // no cache nor reasoning counts
				want = usage.Tokens{usage.Input: 14, usage.Output: 5}
			}
			if err != nil || u.Tokens != want {
				t.Fatalf("%v (%v), want %v", u.Tokens, err, want)
			}
			for hostile, class := range map[string]error{"negative": usage.ErrValue, "fraction": usage.ErrValue, "string": usage.ErrValue,
				"huge": usage.ErrValue, "duplicate": usage.ErrDuplicate} {
				if _, err := read(t, c, map[string]string{"X-Fake-Hostile": hostile}); !errors.Is(err, class) {
					t.Errorf("%s: %v, want %v", hostile, err, class)
				}
			}
			if _, err := read(t, c, map[string]string{"X-Fake-Usage": "none"}); !errors.Is(err, usage.ErrMissing) {
				t.Errorf("no usage: %v", err)
			}
			if !strings.Contains(name, "stream") && !strings.Contains(name, "sse") && !strings.Contains(name, "array") {
				return
			}
			if _, err := read(t, c, map[string]string{"X-Fake-Hostile": "noend"}); err == nil {
				t.Errorf("a stream without its end read whole")
			}
			if _, err := read(t, c, map[string]string{"X-Fake-Cut": "3"}); err == nil {
				t.Errorf("a stream cut after 3 events read whole")
			}
		})
	}
	// Running totals that go down, where a provider sends several.
	for _, name := range []string{"openai stream", "anthropic stream", "gemini sse"} {
		if _, err := read(t, calls[name], map[string]string{"X-Fake-Hostile": "down", "X-Fake-Deltas": "2"}); !errors.Is(err, usage.ErrValue) {
			t.Errorf("%s going down: %v", name, err)
		}
	}
}

// TestEmbeddingsBase64: embeddings asked for in base64, as the official OpenAI clients ask by
// default, are the float vector's little-endian float32s.
func TestEmbeddingsBase64(t *testing.T) {
	srv := httptest.NewServer(llmfake.Handler())
	defer srv.Close()
	embedding := func(format string) json.RawMessage {
		resp, err := http.Post(srv.URL+"/v1/embeddings", "application/json", strings.NewReader(`{"model":"m","input":"hi"`+format+`}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Data []struct{ Embedding json.RawMessage }
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Data) != 1 {
			t.Fatalf("%v: %+v", err, body)
		}
		return body.Data[0].Embedding
	}
	var floats []float32
	if err := json.Unmarshal(embedding(""), &floats); err != nil || len(floats) == 0 {
		t.Fatalf("float embedding %v: %v", floats, err)
	}
	var s string
	json.Unmarshal(embedding(`,"encoding_format":"base64"`), &s)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 4*len(floats) {
		t.Fatalf("base64 embedding %q: %d bytes (%v), want %d", s, len(b), err, 4*len(floats))
	}
	for i, f := range floats {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); got != f {
			t.Errorf("base64 embedding [%d] = %v, the float one %v", i, got, f)
		}
	}
}
