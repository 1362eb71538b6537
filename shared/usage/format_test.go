package usage_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/usage"
)

// formatVector is a response in a provider's shape, the format it is read in ("auto:PATH" for
// usage.FormatAuto with the request's path), and the tokens by class, the model, or the class of
// error it gives.
type formatVector struct {
	name        string
	format      string
	contentType string
	body        string
	tokens      usage.Tokens // input, cached_input, cache_write, output, reasoning
	model       string
	err         error
}

// The responses, as the providers' API references show them.
const (
	openAIJSON = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"The image shows a wooden boardwalk.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},` +
		`"completion_tokens_details":{"reasoning_tokens":10,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}`
	openAIChunk = `data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"
	openAIUsage = `data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[],` +
		`"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0}}}` + "\n\n"
	openAIDone      = "data: [DONE]\n\n"
	openAIEmbedding = `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0023064255,-0.009327292,-0.0028842222]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`

	responsesJSON = `{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","created_at":1741386163,"status":"completed","error":null,` +
		`"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b","status":"completed","role":"assistant",` +
		`"content":[{"type":"output_text","text":"In a peaceful grove beneath a silver moon...","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,` +
		`"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled",` +
		`"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":6},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":7},"total_tokens":123},"user":null,"metadata":{}}`
	responsesStream = "event: response.created\n" +
		`data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1741290958,"status":"in_progress","model":"gpt-4.1-2025-04-14","output":[],"usage":null}}` + "\n\n" +
		"event: response.output_text.delta\n" +
		`data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}` + "\n\n" +
		"event: response.completed\n" +
		`data: {"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","created_at":1741290958,"status":"completed","model":"gpt-4.1-2025-04-14",` +
		`"output":[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there!","annotations":[]}]}],` +
		`"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":0},"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48}}}` + "\n\n"

	anthropicJSON = `{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hello!"}],` +
		`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,` +
		`"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":6,"service_tier":"standard"}}`
	anthropicStart = "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929",` +
		`"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":10,"cache_read_input_tokens":300,"output_tokens":1}}}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
		"event: ping\n" + `data: {"type": "ping"}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}` + "\n\n" +
		"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n"
	anthropicDelta = "event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}` + "\n\n"
	anthropicStop  = "event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"

	geminiJSON = `{"candidates":[{"content":{"parts":[{"text":"AI learns patterns from data."}],"role":"model"},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":12,"totalTokenCount":55,"promptTokensDetails":[{"modality":"TEXT","tokenCount":8}],"thoughtsTokenCount":35},` +
		`"modelVersion":"gemini-2.5-flash","responseId":"4JQeaJ_ZOPnTz7IPj6aMwAI"}`
	geminiChunk1 = `{"candidates": [{"content": {"parts": [{"text": "The"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"cachedContentTokenCount": 4,"totalTokenCount": 8},"modelVersion": "gemini-2.0-flash"}`
	geminiChunk2 = `{"candidates": [{"content": {"parts": [{"text": " sky is blue"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 8,"cachedContentTokenCount": 4,"candidatesTokenCount": 5,"totalTokenCount": 13},"modelVersion": "gemini-2.0-flash"}`

	ollamaLine1 = `{"model":"llama3.2","created_at":"2023-08-04T08:52:19.385406455-07:00","message":{"role":"assistant","content":"The"},"done":false}` + "\n"
	ollamaLast  = `{"model":"llama3.2","created_at":"2023-08-04T19:22:45.499127Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop",` +
		`"total_duration":4883583458,"load_duration":1334875,"prompt_eval_count":26,"prompt_eval_duration":342546000,"eval_count":282,"eval_duration":4535599000}` + "\n"
)

const (
	sse    = "text/event-stream"
	ndjson = "application/x-ndjson"
	jsonCT = "application/json"
)

func tk(in, cached, write, out, reasoning int64) usage.Tokens {
	return usage.Tokens{usage.Input: in, usage.CachedInput: cached, usage.CacheWrite: write, usage.Output: out, usage.Reasoning: reasoning}
}

var formatVectors = []formatVector{
	{"openai json", "openai", jsonCT, openAIJSON, tk(93, 1024, 0, 36, 10), "gpt-4o-2024-08-06", nil},
	{"openai stream", "openai", sse, openAIChunk + openAIChunk + openAIUsage + openAIDone, tk(9, 0, 0, 12, 0), "gpt-4o-mini", nil},
	{"openai stream crlf", "openai", sse, strings.ReplaceAll(openAIChunk+openAIUsage+openAIDone, "\n", "\r\n"), tk(9, 0, 0, 12, 0), "gpt-4o-mini", nil},
	{"openai embeddings", "openai", jsonCT, openAIEmbedding, tk(8, 0, 0, 0, 0), "text-embedding-3-small", nil},
	{"openai total above the parts", "openai", jsonCT, `{"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":12}}`, tk(5, 0, 0, 7, 0), "", nil},
	{"openai total only", "openai", jsonCT, `{"usage":{"total_tokens":12}}`, tk(12, 0, 0, 0, 0), "", nil},
	{"openai null details", "openai", jsonCT, `{"usage":{"prompt_tokens":5,"completion_tokens":5,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":null}}}`, tk(5, 0, 0, 5, 0), "", nil},
	{"openai running totals", "openai", sse, strings.Repeat(strings.Replace(openAIUsage, `"completion_tokens":12`, `"completion_tokens":3`, 1), 2) + openAIUsage + openAIDone, tk(9, 0, 0, 12, 0), "gpt-4o-mini", nil},

	{"openai stream without usage", "openai", sse, openAIChunk + openAIChunk + openAIDone, usage.Tokens{}, "", usage.ErrMissing},
	{"openai stream cut before [DONE]", "openai", sse, openAIChunk + openAIUsage, tk(9, 0, 0, 12, 0), "gpt-4o-mini", usage.ErrTruncated},
	{"openai stream cut mid-event", "openai", sse, openAIChunk + openAIUsage[:40], usage.Tokens{}, "", usage.ErrMissing},
	{"openai cached above prompt", "openai", jsonCT, `{"usage":{"prompt_tokens":5,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":6}}}`, usage.Tokens{}, "", usage.ErrValue},
	{"openai reasoning above completion", "openai", jsonCT, `{"usage":{"prompt_tokens":5,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":6}}}`, usage.Tokens{}, "", usage.ErrValue},
	{"openai count going down", "openai", sse, openAIUsage + strings.Replace(openAIUsage, `"completion_tokens":12`, `"completion_tokens":3`, 1) + openAIDone, usage.Tokens{}, "", usage.ErrValue},
	{"openai negative", "openai", jsonCT, `{"usage":{"prompt_tokens":-5,"completion_tokens":5}}`, usage.Tokens{}, "", usage.ErrValue},
	{"openai fraction", "openai", jsonCT, `{"usage":{"prompt_tokens":5.5,"completion_tokens":5}}`, usage.Tokens{}, "", usage.ErrValue},
	{"openai string count", "openai", jsonCT, `{"usage":{"prompt_tokens":"5","completion_tokens":5}}`, usage.Tokens{}, "", usage.ErrValue},
	{"openai duplicate key", "openai", jsonCT, `{"usage":{"prompt_tokens":5,"prompt_tokens":500,"completion_tokens":5}}`, usage.Tokens{}, "", usage.ErrDuplicate},
	{"openai above 10^15", "openai", jsonCT, `{"usage":{"prompt_tokens":10000000000000000,"completion_tokens":5}}`, usage.Tokens{}, "", usage.ErrValue},
	{"openai error body", "openai", jsonCT, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, usage.Tokens{}, "", usage.ErrMissing},
	{"openai not json", "openai", jsonCT, `<html>bad gateway</html>`, usage.Tokens{}, "", usage.ErrSyntax},

	{"responses json", "openai-responses", jsonCT, responsesJSON, tk(30, 6, 0, 80, 7), "gpt-4.1-2025-04-14", nil},
	{"responses stream", "openai-responses", sse, responsesStream, tk(37, 0, 0, 11, 0), "gpt-4.1-2025-04-14", nil},
	{"responses incomplete", "openai-responses", sse, strings.ReplaceAll(responsesStream, "response.completed", "response.incomplete"), tk(37, 0, 0, 11, 0), "gpt-4.1-2025-04-14", nil},
	{"responses cut", "openai-responses", sse, responsesStream[:strings.Index(responsesStream, "event: response.completed")], usage.Tokens{}, "", usage.ErrMissing},

	{"anthropic json", "anthropic", jsonCT, anthropicJSON, tk(12, 2000, 100, 6, 0), "claude-sonnet-4-5-20250929", nil},
	{"anthropic stream", "anthropic", sse, anthropicStart + anthropicDelta + anthropicStop, tk(25, 300, 10, 15, 0), "claude-sonnet-4-5-20250929", nil},
	{"anthropic one-hour cache", "anthropic", jsonCT, strings.Replace(anthropicJSON, `"ephemeral_1h_input_tokens":0`, `"ephemeral_1h_input_tokens":40`, 1),
		usage.Tokens{usage.Input: 12, usage.CachedInput: 2000, usage.CacheWrite: 60, usage.CacheWrite1h: 40, usage.Output: 6}, "claude-sonnet-4-5-20250929", nil},
	{"anthropic one-hour cache above the writes", "anthropic", jsonCT, strings.Replace(anthropicJSON, `"ephemeral_1h_input_tokens":0`, `"ephemeral_1h_input_tokens":101`, 1), usage.Tokens{}, "", usage.ErrValue},
	{"anthropic deltas with input", "anthropic", sse, anthropicStart +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":{"input_tokens":25,"cache_read_input_tokens":300,"output_tokens":40,"server_tool_use":{"web_search_requests":1}}}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":1025,"output_tokens":90}}` + "\n\n" +
		anthropicStop, tk(1025, 300, 10, 90, 0), "claude-sonnet-4-5-20250929", nil},
	{"anthropic cut before message_stop", "anthropic", sse, anthropicStart + anthropicDelta, tk(25, 300, 10, 15, 0), "claude-sonnet-4-5-20250929", usage.ErrTruncated},
	{"anthropic cut after message_start", "anthropic", sse, anthropicStart, tk(25, 300, 10, 1, 0), "claude-sonnet-4-5-20250929", usage.ErrTruncated},
	{"anthropic count going down", "anthropic", sse, anthropicStart + strings.Replace(anthropicDelta, `"output_tokens":15`, `"output_tokens":0`, 1) + anthropicStop, usage.Tokens{}, "", usage.ErrValue},
	{"anthropic error event", "anthropic", sse, anthropicStart + "event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n", tk(25, 300, 10, 1, 0), "claude-sonnet-4-5-20250929", usage.ErrTruncated},

	{"gemini json", "gemini", jsonCT, geminiJSON, tk(8, 0, 0, 12, 35), "gemini-2.5-flash", nil},
	{"gemini sse", "gemini", sse, "data: " + geminiChunk1 + "\r\n\r\ndata: " + geminiChunk2 + "\r\n\r\n", tk(4, 4, 0, 5, 0), "gemini-2.0-flash", nil},
	{"gemini json array", "gemini", jsonCT, "[" + geminiChunk1 + ",\r\n" + geminiChunk2 + "]", tk(4, 4, 0, 5, 0), "gemini-2.0-flash", nil},
	{"gemini sse cut", "gemini", sse, "data: " + geminiChunk1 + "\r\n\r\n", tk(4, 4, 0, 0, 0), "gemini-2.0-flash", usage.ErrTruncated},
	{"gemini json array cut", "gemini", jsonCT, "[" + geminiChunk1 + ",\r\n" + geminiChunk2, usage.Tokens{}, "", usage.ErrTruncated},
	{"gemini blocked prompt", "gemini", sse, `data: {"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7},"modelVersion":"gemini-2.0-flash"}` + "\n\n", tk(7, 0, 0, 0, 0), "gemini-2.0-flash", nil},

	{"ollama json", "ollama", jsonCT, ollamaLast, tk(26, 0, 0, 282, 0), "llama3.2", nil},
	{"ollama stream", "ollama", ndjson, ollamaLine1 + ollamaLine1 + ollamaLast, tk(26, 0, 0, 282, 0), "llama3.2", nil},
	{"ollama stream, last line without LF", "ollama", ndjson, ollamaLine1 + strings.TrimSuffix(ollamaLast, "\n"), tk(26, 0, 0, 282, 0), "llama3.2", nil},
	{"ollama cached prompt", "ollama", ndjson, ollamaLine1 + strings.Replace(ollamaLast, `"prompt_eval_count":26,`, "", 1), tk(0, 0, 0, 282, 0), "llama3.2", nil},
	{"ollama cut", "ollama", ndjson, ollamaLine1 + ollamaLine1, usage.Tokens{}, "", usage.ErrMissing},

	// auto with a path that names the provider, and with one that does not: the marks choose.
	{"auto openai by path", "auto:/v1/chat/completions", sse, openAIChunk + openAIUsage + openAIDone, tk(9, 0, 0, 12, 0), "gpt-4o-mini", nil},
	{"auto azure path", "auto:/openai/deployments/gpt4o/chat/completions", jsonCT, openAIJSON, tk(93, 1024, 0, 36, 10), "gpt-4o-2024-08-06", nil},
	{"auto anthropic by path", "auto:/v1/messages", sse, anthropicStart + anthropicDelta + anthropicStop, tk(25, 300, 10, 15, 0), "claude-sonnet-4-5-20250929", nil},
	{"auto responses by path", "auto:/v1/responses", jsonCT, responsesJSON, tk(30, 6, 0, 80, 7), "gpt-4.1-2025-04-14", nil},
	{"auto gemini by path", "auto:/v1beta/models/gemini-2.5-flash:streamGenerateContent", sse, "data: " + geminiChunk1 + "\n\ndata: " + geminiChunk2 + "\n\n", tk(4, 4, 0, 5, 0), "gemini-2.0-flash", nil},
	{"auto ollama by path", "auto:/api/chat", ndjson, ollamaLine1 + ollamaLast, tk(26, 0, 0, 282, 0), "llama3.2", nil},
	{"auto openai by marks", "auto:/llm", sse, openAIChunk + openAIUsage + openAIDone, tk(9, 0, 0, 12, 0), "gpt-4o-mini", nil},
	{"auto anthropic json by marks", "auto:/llm", jsonCT, anthropicJSON, tk(12, 2000, 100, 6, 0), "claude-sonnet-4-5-20250929", nil},
	{"auto responses json by marks", "auto:/llm", jsonCT, responsesJSON, tk(30, 6, 0, 80, 7), "gpt-4.1-2025-04-14", nil},
	{"auto anthropic stream by marks", "auto:/llm", sse, anthropicStart + anthropicDelta + anthropicStop, tk(25, 300, 10, 15, 0), "claude-sonnet-4-5-20250929", nil},
	{"auto responses stream by marks", "auto:/llm", sse, responsesStream, tk(37, 0, 0, 11, 0), "gpt-4.1-2025-04-14", nil},
	{"auto gemini by marks", "auto:/llm", jsonCT, geminiJSON, tk(8, 0, 0, 12, 35), "gemini-2.5-flash", nil},
	{"auto ollama by marks", "auto:/llm", ndjson, ollamaLine1 + ollamaLast, tk(26, 0, 0, 282, 0), "llama3.2", nil},
	{"auto nothing", "auto:/llm", jsonCT, `{"result":"ok"}`, usage.Tokens{}, "", usage.ErrMissing},
	{"auto hostile pick", "auto:/llm", jsonCT, `{"type":"message","usage":{"input_tokens":-1,"output_tokens":5}}`, usage.Tokens{}, "", usage.ErrValue},
}

// readFormat reads v's body in chunks of size (0: whole).
func readFormat(v formatVector, size int) (usage.Usage, error) {
	r := newFormatReader(v)
	if size == 0 {
		size = max(len(v.body), 1)
	}
	for i := 0; i < len(v.body); i += size {
		r.Write([]byte(v.body[i:min(i+size, len(v.body))]))
	}
	return r.Usage()
}

func newFormatReader(v formatVector) *usage.Reader {
	var f *usage.Format
	if path, ok := strings.CutPrefix(v.format, "auto:"); ok {
		f = usage.FormatForPath(path)
	} else {
		f = usage.FormatNamed(v.format)
	}
	return usage.NewFormatReader(f, usage.FramingOf(v.contentType), usage.Limits{})
}

// TestFormats reads every vector whole, byte by byte and split at every position: the same
// tokens, model and class of error each way. A stream cut short gives what it counted (Partial).
func TestFormats(t *testing.T) {
	for _, v := range formatVectors {
		t.Run(v.name, func(t *testing.T) {
			u, err := readFormat(v, 0)
			if err != nil {
				t.Logf("%v", err)
				u, _ = usage.Partial(err)
			}
			switch {
			case v.err == nil && err != nil:
				t.Fatalf("got error %v, want %v", err, v.tokens)
			case v.err != nil && !errors.Is(err, v.err):
				t.Fatalf("got (%v, %v), want an error of class %v", u, err, v.err)
			case u.Tokens != v.tokens || v.model != "" && u.Model != v.model:
				t.Fatalf("got %v of model %q, want %v of %q", u.Tokens, u.Model, v.tokens, v.model)
			}
			same := func(how string, u2 usage.Usage, err2 error) {
				if err2 != nil {
					u2, _ = usage.Partial(err2)
				}
				if u2.Tokens != u.Tokens || usage.Class(err2) != usage.Class(err) {
					t.Fatalf("%s: got (%v, %v), whole (%v, %v)", how, u2.Tokens, err2, u.Tokens, err)
				}
			}
			u2, err2 := readFormat(v, 1)
			same("byte by byte", u2, err2)
			for i := 0; i <= len(v.body); i += max(1, len(v.body)/200) {
				r := newFormatReader(v)
				r.Write([]byte(v.body[:i]))
				r.Write([]byte(v.body[i:]))
				u2, err2 := r.Usage()
				same("split at "+itoa(i), u2, err2)
			}
		})
	}
}

func itoa(n int) string {
	s := ""
	for ; n > 9; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return string(rune('0'+n)) + s
}

func TestFormatForPath(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/chat/completions": "openai", "/openai/deployments/x/chat/completions": "openai", "/v1/completions": "openai",
		"/v1/embeddings": "openai", "/api/v1/chat/completions": "openai", "/v1/responses": "openai-responses",
		"/v1/messages": "anthropic", "/v1beta/models/gemini-2.5-pro:generateContent": "gemini",
		"/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent": "gemini",
		"/api/chat": "ollama", "/api/generate": "ollama", "/api/embed": "ollama", "/ollama/api/chat": "ollama",
		"/v1/models": "", "/": "", "/v1beta/models/gemini-2.5-pro:countTokens": "", "/v1/messages/count_tokens": "",
	} {
		got := ""
		if f := usage.FormatForPath(path); f != nil {
			got = f.Name
		}
		if got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// FuzzFormats reads any body in every format and framing: no panic, the same answer whole and in
// two chunks, and every count in [0, MaxValue].
func FuzzFormats(f *testing.F) {
	for _, v := range formatVectors {
		if len(v.body) < 4096 {
			f.Add([]byte(v.body), uint16(len(v.body)/2))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, split uint16) {
		at := min(int(split), len(body))
		for _, name := range usage.FormatNames {
			for _, ct := range []string{jsonCT, sse, ndjson} {
				v := formatVector{format: name, contentType: ct}
				if name == usage.FormatAuto {
					v.format = "auto:/x"
				}
				r := newFormatReader(v)
				r.Write(body)
				u, err := r.Usage()
				r2 := newFormatReader(v)
				r2.Write(body[:at])
				r2.Write(body[at:])
				u2, err2 := r2.Usage()
				if u != u2 || usage.Class(err) != usage.Class(err2) {
					t.Fatalf("%s %s: whole (%v, %v), split at %d (%v, %v)", name, ct, u, err, at, u2, err2)
				}
				if err != nil && usage.Class(err) == "other" {
					t.Fatalf("%s %s: error of no class: %v", name, ct, err)
				}
				for _, n := range u.Tokens {
					if n < 0 || n > usage.MaxValue {
						t.Fatalf("%s %s: tokens %v", name, ct, u.Tokens)
					}
				}
			}
		}
	})
}
