package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/llmfake"
	"github.com/diana-gw/diana/internal/redistest"
)

// providerCall is a request in one provider's shape, asking for at most cap output tokens with a
// prompt of about promptBytes of text.
type providerCall struct {
	name, path string
	body       func(cap, promptBytes int) string
}

var providerCalls = []providerCall{
	{"openai", "/v1/chat/completions", func(c, p int) string {
		return `{"model":"gpt-4o","max_tokens":` + strconv.Itoa(c) + `,"messages":[{"role":"user","content":"` + strings.Repeat("a", p) + `"}]}`
	}},
	{"openai stream asking usage", "/v1/chat/completions", func(c, p int) string {
		return `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":` + strconv.Itoa(c) + `,"messages":[{"role":"user","content":"` + strings.Repeat("a", p) + `"}]}`
	}},
	{"openai stream not asking", "/v1/chat/completions", func(c, p int) string {
		return `{"model":"gpt-4o","stream":true,"max_tokens":` + strconv.Itoa(c) + `,"messages":[{"role":"user","content":"` + strings.Repeat("a", p) + `"}]}`
	}},
	{"responses", "/v1/responses", func(c, p int) string {
		return `{"model":"gpt-4.1","max_output_tokens":` + strconv.Itoa(c) + `,"input":"` + strings.Repeat("a", p) + `"}`
	}},
	{"responses stream", "/v1/responses", func(c, p int) string {
		return `{"model":"gpt-4.1","stream":true,"max_output_tokens":` + strconv.Itoa(c) + `,"input":"` + strings.Repeat("a", p) + `"}`
	}},
	{"anthropic", "/v1/messages", func(c, p int) string {
		return `{"max_tokens":` + strconv.Itoa(c) + `,"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"` + strings.Repeat("a", p) + `"}]}`
	}},
	{"anthropic stream", "/v1/messages", func(c, p int) string {
		return `{"max_tokens":` + strconv.Itoa(c) + `,"model":"claude-sonnet-4-5","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("a", p) + `"}]}`
	}},
	{"gemini", "/v1beta/models/gemini-2.5-flash:generateContent", func(c, p int) string {
		return `{"contents":[{"parts":[{"text":"` + strings.Repeat("a", p) + `"}]}],"generationConfig":{"maxOutputTokens":` + strconv.Itoa(c) + `}}`
	}},
	{"gemini stream", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", func(c, p int) string {
		return `{"contents":[{"parts":[{"text":"` + strings.Repeat("a", p) + `"}]}],"generationConfig":{"maxOutputTokens":` + strconv.Itoa(c) + `}}`
	}},
	{"ollama stream", "/api/chat", func(c, p int) string {
		return `{"model":"llama3.2","options":{"num_predict":` + strconv.Itoa(c) + `},"messages":[{"role":"user","content":"` + strings.Repeat("a", p) + `"}]}`
	}},
}

// TestClusterBudgetProviders: four dianad nodes on one redis-server hold one budget per API key,
// format auto, across the shapes providers send: OpenAI Chat (streams asking for their usage and
// streams that do not), Responses, Anthropic (cumulative message_delta events, several of them),
// Gemini (running totals) and Ollama. Each key's fixed window of 20,000 tokens is spent by 4
// clients on 4 nodes until it refuses them: every key is charged exactly the tokens the upstream
// counted, never more than its budget (every reservation is the request's own bound: its input,
// by its size, and its output cap, which the upstream keeps to), and at least 90% of it; no
// response is charged a fallback; a client that did not ask for its stream's usage gets no usage
// chunk.
func TestClusterBudgetProviders(t *testing.T) {
	rs := redistest.Start(t)
	up := httptest.NewServer(llmfake.Handler())
	defer up.Close()
	yaml := header + `upstreams:
  - name: llm
    url: "` + up.URL + `"
redis:
  addrs: ["` + rs.Addr + `"]
  timeout: ` + exactTimeout + `
rules:
  - name: budget
    mode: cluster
    by: ["header:X-Api-Key"]
    usage: {format: auto, estimate: 200}
    limit: {algorithm: fixed_window, limit: 20000, window: 1h}
`
	nodes := []*testServer{startFile(t, yaml), startFile(t, yaml), startFile(t, yaml), startFile(t, yaml)}
	const keys, perKey = 4, 4
	truth := make([]int64, keys) // the tokens the upstream counted, by key
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range keys * perKey {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, node := c%keys, nodes[c%len(nodes)]
			rnd := rand.New(rand.NewPCG(uint64(c), 7))
			for denials, start := 0, time.Now(); denials < 20 && time.Since(start) < 20*time.Second; {
				pc := providerCalls[rnd.IntN(len(providerCalls))]
				cap, completion, text := 50+rnd.IntN(250), 0, 40+rnd.IntN(400)
				completion = 1 + rnd.IntN(cap) // the upstream keeps to the cap
				req, _ := http.NewRequest("POST", node.proxy+pc.path, strings.NewReader(pc.body(cap, text)))
				req.Header.Set("X-Api-Key", "key"+strconv.Itoa(key))
				req.Header.Set("X-Fake-Tokens", strconv.Itoa(completion))
				req.Header.Set("X-Fake-Deltas", strconv.Itoa(1+rnd.IntN(3)))
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					denials = 0
					mu.Lock()
					truth[key] += int64((text+3)/4 + completion)
					mu.Unlock()
					if pc.name == "openai stream not asking" && bytes.Contains(b, []byte(`"usage"`)) {
						t.Errorf("a client that did not ask for the usage got it: %.300s", b)
					}
				case 429:
					denials++
				default:
					t.Errorf("%s: status %d: %.300s", pc.name, resp.StatusCode, b)
					return
				}
			}
		}()
	}
	wg.Wait()
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rc.Close()
	for k := range keys {
		n, _, err := redisUnits(context.Background(), nodes[0], rc, "budget", "budget|key"+strconv.Itoa(k))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("key%d: %d tokens charged, the upstream counted %d, of a budget of 20000", k, n, truth[k])
		switch {
		case n != truth[k]:
			t.Errorf("key%d: Redis holds %d tokens, the upstream counted %d", k, n, truth[k])
		case n > 20000:
			t.Errorf("key%d: %d tokens spent, above the budget", k, n)
		case n < 18000:
			t.Errorf("key%d: only %d tokens of 20000 spent", k, n)
		}
	}
	for _, n := range nodes {
		for _, reason := range []string{"missing", "value", "duplicate", "syntax", "depth", "too_large", "truncated", "other"} {
			if got := metric(t, n, `diana_usage_unread_total{reason="`+reason+`",rule="budget"}`); got != 0 {
				t.Errorf("%v responses charged a fallback (%s)", got, reason)
			}
		}
	}
}

// TestEstimateAttack: a client cannot choose its own estimate. A fixed window of 1000 tokens per
// key reads each request's max_tokens; requests asking for 900 tokens with the field past the bytes
// dianad reads, given twice (the smaller first), or in a gzip body, are each reserved the worst
// case (the whole window), so of 10 sent at once one is admitted; streams that leave out their
// usage, the field past the bytes read, are charged the fallback. The window never holds more than
// 1000 tokens; docs/llm.md states the bound.
func TestEstimateAttack(t *testing.T) {
	rs := redistest.Start(t)
	up := httptest.NewServer(llmfake.Handler())
	defer up.Close()
	ts := startFile(t, header+`upstreams:
  - name: llm
    url: "`+up.URL+`"
redis:
  addrs: ["`+rs.Addr+`"]
  timeout: `+exactTimeout+`
rules:
  - name: w
    mode: cluster
    match: {headers: {X-Api-Key: "*"}}
    by: ["header:X-Api-Key"]
    usage: {format: openai}
    limit: {algorithm: fixed_window, limit: 1000, window: 1h}
  - name: e
    mode: cluster
    match: {headers: {X-Key-E: "*"}}
    by: ["header:X-Key-E"]
    usage: {body: usage.total_tokens, estimate_body: max_tokens, estimate: 1}
    limit: {algorithm: fixed_window, limit: 1000, window: 1h}
`)
	pad := `"metadata":{"note":"` + strings.Repeat("x", 1<<20) + `"}` // a megabyte the upstream counts no token of
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.Bytes()
	}
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rc.Close()
	for i, c := range []struct {
		name, body string
		gzip       bool
	}{
		{"past the bytes read", `{"model":"m",` + pad + `,"max_tokens":900}`, false},
		{"duplicated", `{"model":"m","max_tokens":1,"max_tokens":900}`, false},
		{"gzip", `{"model":"m","max_tokens":900}`, true},
		{"not a whole number", `{"model":"m","max_tokens":9e2}`, false},
	} {
		for _, rule := range []string{"w", "e"} {
			t.Run(c.name+"/"+rule, func(t *testing.T) {
				key := fmt.Sprintf("attack%d", i)
				hdr := map[string]string{"X-Api-Key": key}
				if rule == "e" {
					hdr = map[string]string{"X-Key-E": key}
				}
				var ok, refused int
				var mu sync.Mutex
				var wg sync.WaitGroup
				for range 10 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						body := []byte(c.body)
						req, _ := http.NewRequest("POST", ts.proxy+"/v1/chat/completions", bytes.NewReader(body))
						if c.gzip {
							req, _ = http.NewRequest("POST", ts.proxy+"/v1/chat/completions", bytes.NewReader(gz(c.body)))
							req.Header.Set("Content-Encoding", "gzip")
						}
						for k, v := range hdr {
							req.Header.Set(k, v)
						}
						req.Header.Set("X-Fake-Tokens", "900")
						req.Header.Set("X-Fake-Delay", "50ms") // in flight together
						resp, err := client.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						mu.Lock()
						defer mu.Unlock()
						switch resp.StatusCode {
						case 429:
							refused++
						default: // 200, or the fake's 400 for a body it cannot read (gzip): admitted all the same
							ok++
						}
					}()
				}
				wg.Wait()
				n, _, err := redisUnits(context.Background(), ts, rc, rule, rule+"|"+key)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d admitted, %d refused; the window holds %d", ok, refused, n)
				if ok != 1 || n > 1000 {
					t.Fatalf("%d of 10 admitted, the window holds %d of 1000", ok, n)
				}
			})
		}
	}
}
