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
// in front of a handler streaming a 1 MiB text/event-stream response (OpenAI-shaped chunks, the
// usage in the last event), under a per-key token budget whose cost comes from the response
// (usage), beside the same middleware and stream under a per-key limit of a static cost, its
// anchor. Both write to a writer that keeps nothing: the figures are the process's own work per
// request, without the network. SetBytes makes MB/s the stream's throughput through the
// metering; B/op shows that the body is not kept.
func BenchmarkUsageStream(b *testing.B) {
	chunk := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("tok ", 40) + `"},"finish_reason":null}],"usage":null}` + "\n\n"
	n := (1 << 20) / len(chunk)
	last := `data: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(n+10) + "}}\n\ndata: [DONE]\n\n"
	stream := []byte(strings.Repeat(chunk, n) + last)
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for p := stream; len(p) > 0; p = p[min(len(p), 32<<10):] { // as the reverse proxy copies
			w.Write(p[:min(len(p), 32<<10)])
		}
	})
	for _, c := range []struct{ name, rule string }{
		{"plain", `{"name": "per-key", "by": ["header:X-Api-Key"], "limit": {"algorithm": "token_bucket", "rate": 1000000000, "period": "1s"}}`},
		{"usage", `{"name": "tokens", "by": ["header:X-Api-Key"], "usage": {"body": "usage.total_tokens", "estimate_body": "max_tokens"},
			"limit": {"algorithm": "token_bucket", "rate": 1000000000000, "period": "1s"}}`},
	} {
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
			h := httplimit.New(e, httplimit.Options{}).Handler(upstream)
			body := `{"model":"m","max_tokens":4096,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
				r.Header.Set("X-Api-Key", "k1")
				h.ServeHTTP(nowhere{header: http.Header{}}, r)
			}
			if c.name == "usage" && charged != int64(b.N)*int64(n+10) {
				b.Fatalf("charged %d tokens for %d requests of %d", charged, b.N, n+10)
			}
		})
	}
}

// nowhere is a ResponseWriter that keeps nothing.
type nowhere struct{ header http.Header }

func (w nowhere) Header() http.Header         { return w.header }
func (w nowhere) Write(p []byte) (int, error) { return len(p), nil }
func (w nowhere) WriteHeader(int)             {}
