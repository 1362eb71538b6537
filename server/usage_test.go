package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diana-gw/diana/examples"
	"github.com/diana-gw/diana/internal/llmfake"
	"github.com/diana-gw/diana/internal/redistest"
)

// usagePost sends a chat completion through the proxy with extra headers; a cut stream is no
// error here (its body ends early).
func usagePost(t *testing.T, url, body string, h map[string]string) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// TestProxyUsage: dianad charges a token budget the usage of the responses it proxies, from the
// built-in fake LLM (demo:llm) and from a real upstream streaming it; a response without usage is
// charged the estimate, counted and logged.
func TestProxyUsage(t *testing.T) {
	up := httptest.NewServer(llmfake.Handler())
	defer up.Close()
	ts := startFile(t, header+`upstreams:
  - name: real
    url: "`+up.URL+`"
    match: {headers: {X-Upstream: real}}
  - name: llm
    url: "demo:llm"
rules:
  - name: tokens
    by: ["header:X-Api-Key"]
    usage: {body: usage.total_tokens, estimate_body: max_tokens}
    limit: {algorithm: token_bucket, rate: 1000, period: 1h}
`)
	url := ts.proxy + llmfake.Path
	key := map[string]string{"X-Api-Key": "k1", "X-Fake-Tokens": "40"}
	r := usagePost(t, url, `{"max_tokens":100,"messages":[{"content":"0123456789012345678901234567890123456789"}]}`, key)
	if r.status != 200 || r.header.Get("RateLimit-Remaining") != "900" || !strings.Contains(r.body, `"total_tokens":50`) {
		t.Fatalf("demo:llm: %d %s %s", r.status, r.header.Get("RateLimit-Remaining"), r.body)
	}
	eventually(t, "50 tokens settled", func() bool { return metric(t, ts, `diana_usage_tokens_total{rule="tokens"}`) == 50 })

	real := map[string]string{"X-Api-Key": "k1", "X-Upstream": "real"}
	stream := `{"stream":true,"stream_options":{"include_usage":true},"max_tokens":30}`
	r = usagePost(t, url, stream, real)
	if r.status != 200 || !strings.HasSuffix(r.body, "data: [DONE]\n\n") || r.header.Get("RateLimit-Remaining") != "920" {
		t.Fatalf("stream: %d %s %q", r.status, r.header.Get("RateLimit-Remaining"), r.body)
	}
	eventually(t, "31 more tokens settled", func() bool { return metric(t, ts, `diana_usage_tokens_total{rule="tokens"}`) == 81 })

	real["X-Fake-Cut"] = "3"
	usagePost(t, url, stream, real)
	eventually(t, "a cut stream charged its estimate", func() bool {
		return metric(t, ts, `diana_usage_unread_total{reason="missing",rule="tokens"}`) == 1 &&
			metric(t, ts, `diana_usage_tokens_total{rule="tokens"}`) == 111
	})
	// 1000 − 50 − 31 − 30, give or take the refill of the test's moments.
	r = usagePost(t, url, `{"max_tokens":1}`, map[string]string{"X-Api-Key": "k1", "X-Fake-Status": "400"})
	if rem := r.header.Get("RateLimit-Remaining"); rem != "888" && rem != "889" {
		t.Fatalf("remaining %s after 111 tokens and a peek", rem)
	}
}

// TestExampleConfigTokens: `make run`'s config has a token budget on the fake LLM's route: the
// RateLimit headers count tokens, and a response's usage is charged.
func TestExampleConfigTokens(t *testing.T) {
	cfg, err := Parse([]byte(examples.DianaYAML), "diana.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	ts := startConfig(t, cfg, "")
	// 500 output tokens and the body's 61 bytes: 16 input tokens.
	r := usagePost(t, ts.proxy+llmfake.Path, `{"max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`, map[string]string{"X-Api-Key": "k1"})
	if r.status != 200 || r.header.Get("RateLimit-Limit") != "2000" || r.header.Get("RateLimit-Remaining") != "1484" {
		t.Fatalf("%d, RateLimit-Limit %s, -Remaining %s", r.status, r.header.Get("RateLimit-Limit"), r.header.Get("RateLimit-Remaining"))
	}
	eventually(t, "501 tokens charged", func() bool { return metric(t, ts, `diana_usage_tokens_total{rule="tokens-per-key"}`) == 501 })
}

// TestCheckUsage: the decision API never sees a response, so a usage rule charges each checked
// request its fallback at once, counted and logged as unread.
func TestCheckUsage(t *testing.T) {
	ts := startFile(t, header+`rules:
  - name: tokens
    usage: {body: usage.total_tokens, estimate: 10, fallback: 300}
    limit: {algorithm: token_bucket, rate: 1000, period: 1h}
`)
	r := usagePost(t, ts.admin+"/v1/check", `{"client_ip":"192.0.2.1","path":"/"}`, nil)
	if r.status != 200 || !strings.Contains(r.body, `"allowed":true`) {
		t.Fatalf("check: %d %s", r.status, r.body)
	}
	if got := metric(t, ts, `diana_usage_unread_total{reason="missing",rule="tokens"}`); got != 1 {
		t.Fatalf("unread %v", got)
	}
	if got := metric(t, ts, `diana_usage_tokens_total{rule="tokens"}`); got != 300 {
		t.Fatalf("charged %v, want the fallback 300", got)
	}
}

// TestClusterUsage: 16 clients over 4 dianad nodes deciding in one real redis-server spend a
// token budget through the proxy, each response's tokens (from half to twice the request's
// max_tokens) charged when it ends: the tokens spent never exceed the budget (the burst and the
// refill over the run) plus the in-flight bound (one request per client, its overshoot at most
// 100 tokens), and the run spends most of the budget.
func TestClusterUsage(t *testing.T) {
	rs := redistest.Start(t)
	yaml := strings.Replace(clusterConfig(exactTimeout, "1s", `  - name: tokens
    mode: cluster
    by: ["header:X-Api-Key"]
    usage: {body: usage.total_tokens, estimate_body: max_tokens}
    limit: {algorithm: token_bucket, rate: 4000, period: 1s, burst: 2000}
`, rs.Addr), `url: "demo:"`, `url: "demo:llm"`, 1)
	nodes := []*testServer{startFile(t, yaml), startFile(t, yaml), startFile(t, yaml), startFile(t, yaml)}
	const clients, maxTokens = 16, 100
	var spent, admitted, denied atomic.Int64
	start := time.Now()
	const run = 2 * time.Second
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := nodes[c%len(nodes)]
			for i := 0; time.Since(start) < run; i++ {
				est := 1 + (c*7+i*13)%maxTokens
				completion := est/2 + (c*31+i*17)%(2*est-est/2) // from half to twice the estimate, less the prompt's token
				body := `{"max_tokens":` + strconv.Itoa(est) + `}`
				req, _ := http.NewRequest("POST", node.proxy+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("X-Api-Key", "shared")
				req.Header.Set("X-Fake-Tokens", strconv.Itoa(completion))
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					admitted.Add(1)
					var doc struct {
						Usage struct {
							TotalTokens int64 `json:"total_tokens"`
						}
					}
					if err := json.Unmarshal(b, &doc); err != nil {
						t.Error(err)
						return
					}
					spent.Add(doc.Usage.TotalTokens)
				case 429:
					denied.Add(1)
					time.Sleep(2 * time.Millisecond)
				default:
					t.Errorf("status %d: %s", resp.StatusCode, b)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := 2000 + 4000*elapsed.Microseconds()/1_000_000 + clients*maxTokens
	t.Logf("%d admitted, %d denied, %d tokens spent in %v; bound %d", admitted.Load(), denied.Load(), spent.Load(), elapsed, bound)
	if spent.Load() > bound {
		t.Fatalf("spent %d tokens, more than the budget plus the in-flight bound, %d", spent.Load(), bound)
	}
	if least := int64(2000 + 4000*run.Microseconds()/1_000_000/2); spent.Load() < least || denied.Load() == 0 {
		t.Fatalf("spent %d tokens with %d denials: the run did not press on the budget (want %d at least)", spent.Load(), denied.Load(), least)
	}
	for _, n := range nodes {
		if got := metric(t, n, `diana_backend_errors_total{rule="tokens"}`); got != 0 {
			t.Fatalf("%v decisions came from the fail policy", got)
		}
	}
}
