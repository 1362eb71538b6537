package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// BenchmarkUsageStream measures what reading a token usage costs per request: the middleware
// in front of a handler streaming a 1 MiB response, under a per-key token budget whose cost comes
// from the response, beside the same middleware and stream under a per-key limit of a static
// cost, its anchor ("plain"). "usage" reads a field path (usage.total_tokens) of OpenAI-shaped
// chunks; each of the others reads one provider's stream in its format (format: auto, by the
// request's path): OpenAI Chat chunks, Responses events, Anthropic events (message_start, deltas,
// message_delta, message_stop), Gemini's alt=sse chunks with running totals in every one, Ollama's
// JSON lines. All write to a writer that keeps nothing: the figures are the process's own work
// per request, without the network. SetBytes makes MB/s the stream's throughput through the
// metering; B/op shows that the body is not kept.
func BenchmarkUsageStream(b *testing.B) {
	for _, c := range usageStreams() {
		b.Run(c.name, func(b *testing.B) {
			doc, err := conf.ParseJSON([]byte(`{"rules": [` + c.rule + `]}`))
			if err != nil {
				b.Fatal(err)
			}
			errs := &conf.Errors{Source: "bench"}
			o := conf.Read(doc, errs)
			rs := rules.Decode(o)
			o.Done()
			if err := errs.Err(); err != nil {
				b.Fatal(err)
			}
			var charged int64
			e, err := rules.New(rs, rules.Options{Local: rules.Each(memstore.New(memstore.Options{}).Decide),
				Settled: func(s rules.Settled) {
					if s.Err != nil {
						b.Fatal(s.Err)
					}
					charged += s.Cost
				}})
			if err != nil {
				b.Fatal(err)
			}
			stream := []byte(c.stream)
			upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", c.contentType)
				for p := stream; len(p) > 0; p = p[min(len(p), 32<<10):] { // as the reverse proxy copies
					w.Write(p[:min(len(p), 32<<10)])
				}
			})
			h := httplimit.New(e, httplimit.Options{}).Handler(upstream)
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", c.path, strings.NewReader(c.body))
				r.Header.Set("X-Api-Key", "k1")
				h.ServeHTTP(nowhere{header: http.Header{}}, r)
			}
			if c.tokens > 0 && charged != int64(b.N)*c.tokens {
				b.Fatalf("charged %d tokens for %d requests of %d", charged, b.N, c.tokens)
			}
		})
	}
}

// usageStream is a 1 MiB response of one shape, and the rule that reads it.
type usageStream struct {
	name, rule, path, body, contentType, stream string
	tokens                                      int64 // what a response costs; 0: a static cost
}

// usageStreams builds the streams: n events of about 200 bytes each make a MiB, the usage as the
// provider sends it.
func usageStreams() []usageStream {
	const text = "tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok "
	repeat := func(event string, end string) (string, int) {
		n := (1 << 20) / len(event)
		return strings.Repeat(event, n) + end, n
	}
	const budget = `"limit": {"algorithm": "token_bucket", "rate": 1000000000000, "period": "1s"}`
	format := `{"name": "tokens", "by": ["header:X-Api-Key"], "usage": {"format": "auto", "bytes_per_token": 0}, ` + budget + `}`
	chat := `{"model":"m","max_tokens":4096,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	var out []usageStream

	openai, n := repeat(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"`+text+`"},"finish_reason":null}],"usage":null}`+"\n\n", "")
	openai += `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(n+10) + "}}\n\ndata: [DONE]\n\n"
	out = append(out,
		usageStream{"plain", `{"name": "per-key", "by": ["header:X-Api-Key"], "limit": {"algorithm": "token_bucket", "rate": 1000000000, "period": "1s"}}`,
			"/v1/chat/completions", chat, "text/event-stream", openai, 0},
		usageStream{"usage", `{"name": "tokens", "by": ["header:X-Api-Key"], "usage": {"body": "usage.total_tokens", "estimate_body": "max_tokens"}, ` + budget + `}`,
			"/v1/chat/completions", chat, "text/event-stream", openai, int64(n + 10)},
		usageStream{"openai", format, "/v1/chat/completions", chat, "text/event-stream", openai, int64(n + 10)})

	responses, n := repeat(`event: response.output_text.delta`+"\n"+`data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"`+text+`"}`+"\n\n",
		"event: response.completed\n"+`data: {"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","model":"m","usage":{"input_tokens":10,"output_tokens":N,"total_tokens":N10}}}`+"\n\n")
	responses = strings.NewReplacer(`"output_tokens":N,`, `"output_tokens":`+strconv.Itoa(n)+`,`, "N10", strconv.Itoa(n+10)).Replace(responses)
	out = append(out, usageStream{"openai-responses", format, "/v1/responses", `{"model":"m","max_output_tokens":4096,"stream":true,"input":"hi"}`,
		"text/event-stream", responses, int64(n + 10)})

	anthropic, n := repeat(`event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+text+`"}}`+"\n\n", "")
	anthropic = "event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}` + "\n\n" +
		anthropic + "event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":` + strconv.Itoa(n) + `}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	out = append(out, usageStream{"anthropic", format, "/v1/messages", `{"model":"m","max_tokens":4096,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		"text/event-stream", anthropic, int64(n + 10)})

	// Gemini: a running total in every chunk, the last with its finishReason.
	const chunk = `data: {"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":%d,"totalTokenCount":%d},"modelVersion":"m"}` + "\r\n\r\n"
	var g strings.Builder
	n = (1 << 20) / len(chunk)
	for i := 1; i <= n; i++ {
		c := strings.Replace(strings.Replace(chunk, "%d", strconv.Itoa(i), 1), "%d", strconv.Itoa(i+10), 1)
		if i == n {
			c = strings.Replace(c, `"index":0}`, `"index":0,"finishReason":"STOP"}`, 1)
		}
		g.WriteString(c)
	}
	out = append(out, usageStream{"gemini", format, "/v1beta/models/m:streamGenerateContent?alt=sse",
		`{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":4096}}`, "text/event-stream", g.String(), int64(n + 10)})

	ollama, n := repeat(`{"model":"m","created_at":"2023-08-04T08:52:19.385406455-07:00","message":{"role":"assistant","content":"`+text+`"},"done":false}`+"\n", "")
	ollama += `{"model":"m","created_at":"2023-08-04T19:22:45.499127Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":10,"eval_count":` + strconv.Itoa(n) + "}\n"
	out = append(out, usageStream{"ollama", format, "/api/chat", `{"model":"m","options":{"num_predict":4096},"messages":[{"role":"user","content":"hi"}]}`,
		"application/x-ndjson", ollama, int64(n + 10)})
	return out
}

// nowhere is a ResponseWriter that keeps nothing.
type nowhere struct{ header http.Header }

func (w nowhere) Header() http.Header         { return w.header }
func (w nowhere) Write(p []byte) (int, error) { return len(p), nil }
func (w nowhere) WriteHeader(int)             {}
