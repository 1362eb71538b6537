package usage_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/usage"
)

// TestReadRequest reads the model and the output cap of requests in each provider's shape, and
// refuses (Err) whatever a client could steer the estimate with: a field given twice, not a whole
// number, a body past the bytes read, a body that is not JSON.
func TestReadRequest(t *testing.T) {
	for _, c := range []struct {
		name, body string
		whole      bool
		model      string
		cap        int64 // -1: none
		err        error
	}{
		{"openai", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":300}`, true, "gpt-4o", 300, nil},
		{"openai both caps", `{"model":"o3","max_tokens":300,"max_completion_tokens":500}`, true, "o3", 500, nil},
		{"openai n", `{"model":"gpt-4o","max_completion_tokens":100,"n":3}`, true, "gpt-4o", 300, nil},
		{"no cap", `{"model":"gpt-4o","messages":[]}`, true, "gpt-4o", -1, nil},
		{"responses", `{"model":"gpt-4.1","input":"hi","max_output_tokens":64}`, true, "gpt-4.1", 64, nil},
		{"anthropic", `{"max_tokens":1024,"messages":[{"role":"user","content":"Hello"}],"model":"claude-sonnet-4-5"}`, true, "claude-sonnet-4-5", 1024, nil},
		{"gemini", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":200,"candidateCount":2}}`, true, "", 400, nil},
		{"ollama", `{"model":"llama3.2","messages":[],"options":{"num_predict":128}}`, true, "llama3.2", 128, nil},
		{"ollama no cap", `{"model":"llama3.2","options":{"num_predict":-1}}`, true, "llama3.2", -1, nil},
		{"nested decoy", `{"model":"m","messages":[{"max_tokens":1}],"metadata":{"max_tokens":1}}`, true, "m", -1, nil},

		{"cap past the peek", `{"model":"m","messages":[{"role":"user","content":"hel`, false, "", -1, usage.ErrTruncated},
		{"cap read but the body goes on", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hel`, false, "", -1, usage.ErrTruncated},
		{"duplicate cap", `{"max_tokens":1,"max_tokens":900}`, true, "", -1, usage.ErrDuplicate},
		{"duplicate model", `{"model":"cheap","model":"dear","max_tokens":1}`, true, "", -1, usage.ErrDuplicate},
		{"cap with exponent", `{"max_tokens":9e2}`, true, "", -1, usage.ErrValue},
		{"cap as a string", `{"max_tokens":"900"}`, true, "", -1, usage.ErrValue},
		{"negative cap", `{"max_tokens":-1}`, true, "", -1, usage.ErrValue},
		{"model not a string", `{"model":["a"],"max_tokens":5}`, true, "", -1, usage.ErrValue},
		{"gzip", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", true, "", -1, usage.ErrSyntax},
		{"not json", `max_tokens=900`, true, "", -1, usage.ErrSyntax},
		{"two documents", `{"max_tokens":1}{"max_tokens":900}`, true, "", -1, usage.ErrSyntax},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := usage.ReadRequest(c.body, c.whole)
			switch {
			case c.err == nil && q.Err != nil:
				t.Fatalf("error %v", q.Err)
			case c.err != nil && !errors.Is(q.Err, c.err):
				t.Fatalf("error %v, want class %v", q.Err, c.err)
			case c.err != nil && q.ModelOK:
				t.Fatalf("model %q read from a request that cannot be read for sure", q.Model)
			case c.err != nil:
				return
			case q.Model != c.model || q.ModelOK != (c.model != ""):
				t.Fatalf("model %q (%v), want %q", q.Model, q.ModelOK, c.model)
			case c.cap < 0 && q.HasCap || c.cap >= 0 && (!q.HasCap || q.Cap != c.cap):
				t.Fatalf("cap %d (%v), want %d", q.Cap, q.HasCap, c.cap)
			}
		})
	}
}

// TestAskUsage edits a streamed request to ask for its stream's usage, whatever it says of
// stream_options, and leaves the others alone; the edited body is valid JSON whose
// stream_options.include_usage is true, with every other field as it was.
func TestAskUsage(t *testing.T) {
	for _, c := range []struct {
		name, body string
		asks       bool
	}{
		{"no stream_options", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`, true},
		{"empty stream_options", `{"model":"gpt-4o","stream":true,"stream_options":{}}`, true},
		{"other stream_options", `{"stream":true,"stream_options":{"include_obfuscation":false},"model":"m"}`, true},
		{"include_usage false", `{"stream":true,"stream_options":{"include_usage":false}}`, true},
		{"include_usage null", ` { "stream" : true , "stream_options" : { "include_usage" : null } } `, true},
		{"stream_options null", `{"stream":true,"stream_options":null,"n":1}`, true},
		{"asks already", `{"stream":true,"stream_options":{"include_usage":true}}`, false},
		{"not a stream", `{"stream":false}`, false},
		{"no stream", `{"model":"m"}`, false},
		{"duplicate include_usage", `{"stream":true,"stream_options":{"include_usage":false,"include_usage":false}}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := usage.ReadRequest(c.body, true)
			if q.AsksUsage() != c.asks {
				t.Fatalf("AsksUsage %v, want %v (%v)", q.AsksUsage(), c.asks, q.Err)
			}
			out, delta := q.AskUsage([]byte(c.body))
			if len(out) != len(c.body)+delta {
				t.Fatalf("length %d, want %d + %d", len(out), len(c.body), delta)
			}
			if !c.asks {
				if string(out) != c.body {
					t.Fatalf("changed %q to %q", c.body, out)
				}
				return
			}
			var got, was map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%q: %v", out, err)
			}
			json.Unmarshal([]byte(c.body), &was)
			so, _ := got["stream_options"].(map[string]any)
			if so["include_usage"] != true {
				t.Fatalf("%s: stream_options %v", out, got["stream_options"])
			}
			delete(got, "stream_options")
			wso, _ := was["stream_options"].(map[string]any)
			delete(was, "stream_options")
			for k, v := range wso {
				if k != "include_usage" && so[k] != v {
					t.Errorf("stream_options.%s: %v, was %v", k, so[k], v)
				}
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(was)
			if string(g) != string(w) {
				t.Errorf("the rest changed: %s, was %s", g, w)
			}
			if again := usage.ReadRequest(string(out), true); !again.IncludeUsage || again.AsksUsage() {
				t.Errorf("%s read again: include_usage %v", out, again.IncludeUsage)
			}
		})
	}
	// A body longer than the bytes read: the edit lies in them.
	long := `{"stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", 100)
	q := usage.ReadRequest(long, false)
	if !q.AsksUsage() {
		t.Fatalf("a streamed request past the peek does not ask: %v", q.Err)
	}
	if out, _ := q.AskUsage([]byte(long)); !strings.HasPrefix(string(out), `{"stream_options":{"include_usage":true},"stream":true`) {
		t.Fatalf("edited to %.80s", out)
	}
}

// FuzzReadRequest: no panic; a cap or a model only from a body read whole that encoding/json
// reads; an edit only of a streamed request, to valid JSON asking for the usage.
func FuzzReadRequest(f *testing.F) {
	f.Add(`{"model":"gpt-4o","stream":true,"max_tokens":5}`, true)
	f.Add(`{"stream":true,"stream_options":{"include_usage":false}}`, true)
	f.Add(`{"max_tokens":1,"max_tokens":900}`, false)
	f.Fuzz(func(t *testing.T, body string, whole bool) {
		q := usage.ReadRequest(body, whole)
		if q.Err == nil && !whole {
			t.Fatalf("%q read for sure from a part", body)
		}
		if q.Err == nil && whole && !json.Valid([]byte(body)) && strings.TrimSpace(body) != "" {
			t.Fatalf("%q read though encoding/json refuses it", body)
		}
		if q.Cap < 0 || q.Cap > usage.MaxValue {
			t.Fatalf("cap %d", q.Cap)
		}
		out, delta := q.AskUsage([]byte(body))
		if len(out) != len(body)+delta {
			t.Fatalf("length %d, want %d%+d", len(out), len(body), delta)
		}
		if q.AsksUsage() && whole && q.Err == nil {
			again := usage.ReadRequest(string(out), true)
			if again.Err != nil || !again.IncludeUsage {
				t.Fatalf("%q edited to %q: %v, include_usage %v", body, out, again.Err, again.IncludeUsage)
			}
		}
	})
}
