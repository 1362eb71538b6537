package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/llmfake"
	"github.com/diana-gw/diana/internal/redistest"
)

// clientCall is what testdata/llmclients/calls.mjs prints of one call.
type clientCall struct {
	Client    string          `json:"client"` // openai or anthropic
	Name      string          `json:"name"`
	Prompt    string          `json:"prompt"`
	MaxTokens int64           `json:"max_tokens"`
	Yield     json.RawMessage `json:"yield"` // the response object, or a stream's events
}

// tokens is what the fake counts for the call (internal/llmfake's package doc): a token per 4
// bytes of the prompt, rounded up, and the output cap.
func (c clientCall) tokens() int64 { return int64(max(1, (len(c.Prompt)+3)/4)) + c.MaxTokens }

// TestOfficialClients: the official npm clients, openai and @anthropic-ai/sdk (the versions
// testdata/llmclients' package-lock.json pins, installed by build/llmclients.sh), make the same
// calls (testdata/llmclients/calls.mjs: OpenAI Chat Completions, Completions, Embeddings and
// Responses, Anthropic Messages, JSON and streamed, and the stream helpers' final messages)
// straight to the fake LLM and through dianad, whose format: auto budget per API key (both clients
// send theirs as Authorization: Bearer KEY) is kept in a real redis-server. Through dianad each
// call yields exactly what it yields direct: in particular the OpenAI streams that did not ask for
// their usage (dianad asked for it) have no usage chunk and no "usage" field. The fake receives
// the clients' bodies unchanged but for that ask. Redis holds exactly the tokens the fake
// counted, and no response was charged a fallback.
//
// Nothing is skipped: without node and npm the test fails (make deps installs npm).
func TestOfficialClients(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to run the official LLM clients (Debian package nodejs): %v", err)
	}
	dir := llmClients(t)
	rs := redistest.Start(t)
	// The request bodies the fake receives, in order.
	var mu sync.Mutex
	var bodies []string
	fake := llmfake.Handler()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		fake.ServeHTTP(w, r)
	}))
	defer up.Close()
	ts := startFile(t, header+`upstreams:
  - name: llm
    url: "`+up.URL+`"
redis:
  addrs: ["`+rs.Addr+`"]
  timeout: `+exactTimeout+`
rules:
  - name: budget
    mode: cluster
    by: ["header:Authorization"]
    usage: {format: auto}
    limit: {algorithm: fixed_window, limit: 1000000, window: `+forever+`}
`)
	const key = "sk-diana-test"
	direct := runClients(t, node, dir, up.URL, key)
	proxied := runClients(t, node, dir, ts.proxy, key)

	if len(direct) != len(proxied) || len(bodies) != 2*len(direct) {
		t.Fatalf("%d calls direct, %d through dianad, %d requests", len(direct), len(proxied), len(bodies))
	}
	// The OpenAI streams that did not ask for their usage.
	noUsage := map[string]bool{"chat stream": true, "chat.completions.stream finalChatCompletion": true, "completions stream": true}
	var want int64
	for i, d := range direct {
		p := proxied[i]
		if d.Name != p.Name {
			t.Fatalf("call %d: %q direct, %q through dianad", i, d.Name, p.Name)
		}
		if !bytes.Equal(d.Yield, p.Yield) {
			t.Errorf("%s: through dianad the client yields other than direct:\n%s", d.Name, firstDiff(d.Yield, p.Yield))
		}
		want += p.tokens()
		// The upstream gets the client's body, but for the usage dianad asks for.
		sent, got := bodies[i], bodies[len(direct)+i]
		if noUsage[d.Name] && strings.HasPrefix(sent, "{") {
			sent = `{"stream_options":{"include_usage":true},` + sent[1:]
		}
		if got != sent {
			t.Errorf("%s: the upstream got %.300s, want %.300s", d.Name, got, sent)
		}
		// The fake counts as the test does: the usage the client read, where there is one, says so.
		var u struct {
			Usage *struct {
				Total  int64 `json:"total_tokens"`
				Input  int64 `json:"input_tokens"`
				Output int64 `json:"output_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(d.Yield, &u) == nil && u.Usage != nil {
			got := u.Usage.Total
			if d.Client == "anthropic" {
				got = u.Usage.Input + u.Usage.Output
			}
			if got != d.tokens() {
				t.Errorf("%s: the response's usage says %d tokens, the fake's rule %d", d.Name, got, d.tokens())
			}
		}
		// The test means something only if the OpenAI streams that did not ask for their usage
		// have none and the one that asked has it.
		switch {
		case noUsage[d.Name]:
			if bytes.Contains(d.Yield, []byte(`"usage"`)) {
				t.Errorf("%s: a stream that did not ask for its usage has one: %.300s", d.Name, d.Yield)
			}
		case d.Name == "embeddings": // the client decodes the base64 it asked for
			if !bytes.Contains(d.Yield, []byte(`"embedding":[0.00`)) {
				t.Errorf("%s: the client read no vector: %.300s", d.Name, d.Yield)
			}
		case d.Name == "chat stream with usage":
			var chunks []struct {
				Choices []any
				Usage   *struct {
					Total int64 `json:"total_tokens"`
				}
			}
			json.Unmarshal(d.Yield, &chunks)
			if n := len(chunks); n == 0 || len(chunks[n-1].Choices) != 0 || chunks[n-1].Usage == nil || chunks[n-1].Usage.Total != d.tokens() {
				t.Errorf("%s: no usage chunk of %d tokens last: %.300s", d.Name, d.tokens(), d.Yield)
			}
		}
	}

	rc := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rc.Close()
	// A response is settled once dianad has passed its end on: just after the client read it.
	var n int64
	for deadline := time.Now().Add(waitFor); ; time.Sleep(20 * time.Millisecond) {
		if n, _, err = redisUnits(context.Background(), ts, rc, "budget", "budget|Bearer "+key); err != nil {
			t.Fatal(err)
		}
		if n >= want || time.Now().After(deadline) {
			break
		}
	}
	if n != want {
		t.Errorf("Redis holds %d tokens, the fake counted %d", n, want)
	}
	if got := metric(t, ts, `diana_usage_tokens_total{rule="budget"}`); got != float64(want) {
		t.Errorf("diana_usage_tokens_total is %v, want %d", got, want)
	}
	unread := regexp.MustCompile(`(?m)^diana_usage_unread_total\{.*\} (\S+)$`)
	for _, m := range unread.FindAllStringSubmatch(get(t, ts.admin+"/metrics", "").body, -1) {
		if m[1] != "0" {
			t.Errorf("a response was charged a fallback: %s", m[0])
		}
	}
}

// llmClients installs the npm clients (build/llmclients.sh, cached by lockfile) and returns a
// directory holding calls.mjs beside them, where node resolves its imports.
func llmClients(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../build/llmclients.sh").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("build/llmclients.sh (installs the npm clients): %v", err)
	}
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("testdata", "llmclients", "calls.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "calls.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(strings.TrimSpace(string(out)), "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runClients runs calls.mjs against base with the API key and returns what each call yielded.
func runClients(t *testing.T, node, dir, base, key string) []clientCall {
	t.Helper()
	cmd := exec.Command(node, "calls.mjs", base, key)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")} // no OPENAI_*, ANTHROPIC_* or NODE_OPTIONS of the caller's
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node calls.mjs %s: %v\n%s", base, err, stderr.Bytes())
	}
	var calls []clientCall
	if err := json.Unmarshal(out, &calls); err != nil {
		t.Fatalf("node calls.mjs %s: %v: %.500s", base, err, out)
	}
	return calls
}

// firstDiff shows where a and b first differ, with some context.
func firstDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-200)
	cut := func(s []byte) string { return string(s[from:min(len(s), i+200)]) }
	return "at byte " + strconv.Itoa(i) + "\n direct: …" + cut(a) + "…\n dianad: …" + cut(b) + "…"
}
