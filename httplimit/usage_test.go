package httplimit_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/internal/costtest"
	"github.com/diana-gw/diana/internal/llmfake"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
	"github.com/diana-gw/diana/store/memstore"
)

// tokenEnv is a limiter with one token budget in front of the fake LLM, directly (the
// middleware) or through a reverse proxy (as dianad has it), recording every settlement.
type tokenEnv struct {
	t   *testing.T
	srv *httptest.Server
	mu  sync.Mutex
	got []rules.Settled
}

// budgetRule is 10,000 tokens a minute, the estimate from max_tokens.
const budgetRule = `[{"name": "tokens", "usage": {"body": "usage.total_tokens", "estimate_body": "max_tokens"%s},
	"limit": {"algorithm": "token_bucket", "rate": 10000, "period": "1m"}}]`

func newTokenEnv(t *testing.T, usageExtra string, proxy bool, wrap ...func(http.Handler) http.Handler) *tokenEnv {
	t.Helper()
	return newRulesEnv(t, strings.Replace(budgetRule, "%s", usageExtra, 1), proxy, wrap...)
}

// newRulesEnv is newTokenEnv with the rules given; wrap wrap the upstream's handler.
func newRulesEnv(t *testing.T, rulesDoc string, proxy bool, wrap ...func(http.Handler) http.Handler) *tokenEnv {
	t.Helper()
	te := &tokenEnv{t: t}
	doc, err := conf.ParseJSON([]byte(`{"rules":` + rulesDoc + `}`))
	if err != nil {
		t.Fatal(err)
	}
	errs := &conf.Errors{Source: "test"}
	o := conf.Read(doc, errs)
	rs := rules.Decode(o)
	o.Done()
	if err := errs.Err(); err != nil {
		t.Fatal(err)
	}
	e, err := rules.New(rs, rules.Options{Local: rules.Each(memstore.New(memstore.Options{}).Decide),
		Settled: func(s rules.Settled) { te.mu.Lock(); te.got = append(te.got, s); te.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	var next http.Handler = llmfake.Handler()
	for _, w := range wrap {
		next = w(next)
	}
	if proxy {
		up := httptest.NewServer(next)
		t.Cleanup(up.Close)
		u, _ := url.Parse(up.URL)
		next = &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
	}
	te.srv = httptest.NewServer(httplimit.New(e, httplimit.Options{}).Handler(next))
	t.Cleanup(te.srv.Close)
	return te
}

// post sends a chat completion asking for max tokens (none if max < 0), with the fake's headers.
func (te *tokenEnv) post(body string, h map[string]string) *http.Response {
	te.t.Helper()
	req, _ := http.NewRequest("POST", te.srv.URL+llmfake.Path, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	res, err := te.srv.Client().Do(req)
	if err != nil {
		te.t.Fatal(err)
	}
	return res
}

// settled waits for the n-th settlement (the handler settles after the response has ended).
func (te *tokenEnv) settled(n int) rules.Settled {
	te.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		te.mu.Lock()
		if len(te.got) >= n {
			s := te.got[n-1]
			te.mu.Unlock()
			return s
		}
		te.mu.Unlock()
	}
	te.t.Fatalf("no settlement %d", n)
	return rules.Settled{}
}

// remaining is the RateLimit-Remaining of a request reserving nothing but one token.
func (te *tokenEnv) remaining() int {
	te.t.Helper()
	res := te.post(`{"max_tokens":1}`, map[string]string{"X-Fake-Status": "400"})
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	n, err := strconv.Atoi(res.Header.Get("RateLimit-Remaining"))
	if err != nil {
		te.t.Fatalf("RateLimit-Remaining %q", res.Header.Get("RateLimit-Remaining"))
	}
	return n + 1 // the peek's own token
}

// prompt is 40 bytes: 10 prompt tokens at the fake's count.
const prompt = `"messages":[{"role":"user","content":"0123456789012345678901234567890123456789"}]`

// TestUsageJSONAndStream: a JSON response and a streamed one are charged their usage, through
// the middleware and through a reverse proxy.
func TestUsageJSONAndStream(t *testing.T) {
	for _, proxy := range []bool{false, true} {
		te := newTokenEnv(t, "", proxy)
		res := te.post(`{"max_tokens":500,`+prompt+`}`, map[string]string{"X-Fake-Tokens": "90"})
		if rem := res.Header.Get("RateLimit-Remaining"); rem != "9500" {
			t.Fatalf("proxy %v: admission reserved max_tokens: remaining %s, want 9500", proxy, rem)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if s := te.settled(1); s.Cost != 100 || s.Err != nil {
			t.Fatalf("proxy %v: JSON settled %+v", proxy, s)
		}
		res = te.post(`{"stream":true,"stream_options":{"include_usage":true},"max_tokens":50,`+prompt+`}`, nil)
		if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("Content-Type %q", ct)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if s := te.settled(2); s.Cost != 60 || s.Err != nil {
			t.Fatalf("proxy %v: stream settled %+v", proxy, s)
		}
		// 10,000 − 100 − 60, give or take the refill of the test's few milliseconds.
		if rem := te.remaining(); rem < 9840 || rem > 9850 {
			t.Fatalf("proxy %v: remaining %d after 160 tokens", proxy, rem)
		}
	}
}

// TestUsageStreamPassesThrough: a stream reaches the client event by event, through the
// reverse proxy: the upstream sends its second event only once the client has read the first
// (an order, whatever the machine's load), and the usage is charged once the stream has ended.
func TestUsageStreamPassesThrough(t *testing.T) {
	read := make(chan struct{})
	te := newTokenEnv(t, "", true, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&gatedWriter{ResponseWriter: w, gate: read}, r)
		})
	})
	res := te.post(`{"stream":true,"stream_options":{"include_usage":true},"max_tokens":10}`, nil)
	defer res.Body.Close()
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(res.Body).ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(time.Minute): // a stream held back until its end never gets here
		t.Fatal("the first event did not reach the client while the upstream waited for it to")
	}
	te.mu.Lock()
	early := len(te.got)
	te.mu.Unlock()
	close(read)
	io.Copy(io.Discard, res.Body)
	if early != 0 {
		t.Fatalf("%d settlements before the stream's end", early)
	}
	if s := te.settled(1); s.Cost != 1+10 || s.Err != nil {
		t.Fatalf("settled %+v", s)
	}
}

// gatedWriter holds a handler's writes after its first until gate closes.
type gatedWriter struct {
	http.ResponseWriter
	gate   <-chan struct{}
	writes int
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	if g.writes++; g.writes == 2 {
		<-g.gate
	}
	return g.ResponseWriter.Write(p)
}

func (g *gatedWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// TestUsageAskedStreamPassesThrough: a stream whose usage the middleware asked for (the client
// did not) still reaches the client event by event: the first event comes while the stream goes
// on (nothing is settled yet), and the client's stream has no usage; the usage is charged.
func TestUsageAskedStreamPassesThrough(t *testing.T) {
	te := newRulesEnv(t, `[{"name": "tokens", "usage": {"format": "openai", "bytes_per_token": 0},
		"limit": {"algorithm": "token_bucket", "rate": 10000, "period": "1m"}}]`, true)
	res := te.post(`{"stream":true,"max_tokens":10}`, map[string]string{"X-Fake-Delay": "20ms"})
	defer res.Body.Close()
	rd := bufio.NewReader(res.Body)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	te.mu.Lock()
	early := len(te.got)
	te.mu.Unlock()
	rest, _ := io.ReadAll(rd)
	if early != 0 {
		t.Fatalf("the first event came after the stream was settled: %d settlements", early)
	}
	if strings.Contains(line+string(rest), `"usage"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the client's stream: %q", line+string(rest))
	}
	if s := te.settled(1); s.Cost != 1+10 || s.Err != nil {
		t.Fatalf("settled %+v", s)
	}
}

// TestUsageMissing: a response without a usable usage is charged the fallback (or the
// estimate), with the reason.
func TestUsageMissing(t *testing.T) {
	streamed := `{"stream":true,"stream_options":{"include_usage":true},"max_tokens":300,` + prompt + `}`
	for _, c := range []struct {
		name, extra, body string
		headers           map[string]string
		cost              int64
		class             error
	}{
		{"no usage", "", `{"max_tokens":300}`, map[string]string{"X-Fake-Usage": "none"}, 300, usage.ErrMissing},
		{"upstream error", "", `{"max_tokens":300}`, map[string]string{"X-Fake-Status": "503"}, 300, usage.ErrMissing},
		{"stream cut", "", streamed, map[string]string{"X-Fake-Cut": "5"}, 300, usage.ErrMissing},
		{"stream without usage", "", `{"stream":true,"max_tokens":300}`, nil, 300, usage.ErrMissing},
		{"fallback", `, "fallback": 4000`, `{"max_tokens":300}`, map[string]string{"X-Fake-Usage": "none"}, 4000, usage.ErrMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			te := newTokenEnv(t, c.extra, true)
			res := te.post(c.body, c.headers)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			s := te.settled(1)
			if s.Cost != c.cost || !errors.Is(s.Err, c.class) {
				t.Fatalf("settled %+v, want %d for %v", s, c.cost, c.class)
			}
		})
	}
}

// TestUsageHeader: the cost from a response header.
func TestUsageHeader(t *testing.T) {
	te := newTokenEnv(t, "", false)
	doc := `[{"name": "tokens", "usage": {"header": "x-usage-total-tokens"}, "limit": {"algorithm": "fixed_window", "limit": 1000, "window": "1m"}}]`
	e := engine(t, doc, nil)
	var got []rules.Settled
	e2, _ := rules.New(e.Rules(), rules.Options{Local: rules.Each(memstore.New(memstore.Options{}).Decide), Settled: func(s rules.Settled) { got = append(got, s) }})
	srv := httptest.NewServer(httplimit.New(e2, httplimit.Options{}).Handler(llmfake.Handler()))
	defer srv.Close()
	te.srv = srv
	for _, u := range []string{"header", "body"} {
		res := te.post(`{"max_tokens":7,`+prompt+`}`, map[string]string{"X-Fake-Usage": u})
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	// The response without the header is charged the fallback, by default the request's worst
	// case: the limit, as the request names no output cap the rule reads.
	if len(got) != 2 || got[0].Cost != 17 || got[0].Err != nil || got[1].Cost != 1000 || !errors.Is(got[1].Err, usage.ErrMissing) {
		t.Fatalf("settled %+v", got)
	}
}

// TestUsagePeekKeepsBody: the request body the rule peeked at reaches the handler whole, and
// Accept-Encoding does not (a compressed body would hide its usage). The body goes on past the
// bytes read, so its max_tokens cannot be read for sure (another may follow): the request
// reserves the worst case, the whole budget.
func TestUsagePeekKeepsBody(t *testing.T) {
	e := engine(t, strings.Replace(budgetRule, "%s", "", 1), nil)
	var body, enc string
	srv := httptest.NewServer(httplimit.New(e, httplimit.Options{}).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body, enc = string(b), r.Header.Get("Accept-Encoding")
	})))
	defer srv.Close()
	big := `{"max_tokens":5,"pad":"` + strings.Repeat("x", 3*rules.MaxPeek) + `"}`
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(big))
	req.Header.Set("Accept-Encoding", "gzip")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if body != big || enc != "" || res.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("body of %d bytes (want %d), Accept-Encoding %q, remaining %s", len(body), len(big), enc, res.Header.Get("RateLimit-Remaining"))
	}
}

// TestUsagePeekedBodyAfterHeader: a body read whole by the peek reads to its end without error
// after the response's header is out, when net/http has closed the request's own body. A reverse
// proxy's transport reads it so, once more to find its end, while the upstream's answer streams:
// an error there closed the upstream connection and cut the stream (about 1 in 100 through a
// proxy before).
func TestUsagePeekedBodyAfterHeader(t *testing.T) {
	e := engine(t, strings.Replace(budgetRule, "%s", "", 1), nil)
	sent := `{"max_tokens":5,` + prompt + `}`
	type read struct {
		body string
		err  error
	}
	got := make(chan read, 1)
	srv := httptest.NewServer(httplimit.New(e, httplimit.Options{}).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		b, err := io.ReadAll(r.Body)
		got <- read{string(b), err}
	})))
	defer srv.Close()
	res, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(sent))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if r := <-got; r.body != sent || r.err != nil {
		t.Fatalf("the handler read %q, %v; want %q", r.body, r.err, sent)
	}
}

// TestUsageMemory: a 64 MiB stream through the middleware allocates a bounded amount, whatever
// its size: the body is metered as it passes, never kept.
func TestUsageMemory(t *testing.T) {
	e := engine(t, strings.Replace(budgetRule, "%s", "", 1), nil)
	event := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("tok ", 200) + "\"}}],\"usage\":null}\n\n")
	h := httplimit.New(e, httplimit.Options{}).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for n := 0; n < 64<<20; n += len(event) {
			w.Write(event)
		}
		io.WriteString(w, "data: {\"usage\":{\"total_tokens\":9}}\n\n")
	}))
	costtest.Check(t, "64 MiB stream", 256<<10, time.Minute, func() {
		req := httptest.NewRequest("POST", "/", strings.NewReader(`{"max_tokens":5}`))
		h.ServeHTTP(discard{header: http.Header{}}, req)
	})
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ header http.Header }

func (d discard) Header() http.Header         { return d.header }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

// TestUsagePerModel: a token budget per model of the request body, through the middleware,
// which peeks at the body for the rule's dimension.
func TestUsagePerModel(t *testing.T) {
	e := engine(t, `[{"name": "per-model", "by": ["body:model"], "usage": {"body": "usage.total_tokens", "estimate": 10},
		"limit": {"algorithm": "token_bucket", "rate": 100, "period": "1h"}}]`, nil)
	srv := httptest.NewServer(httplimit.New(e, httplimit.Options{}).Handler(llmfake.Handler()))
	defer srv.Close()
	post := func(model string, tokens string) *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+llmfake.Path, strings.NewReader(`{"model":"`+model+`"}`))
		req.Header.Set("X-Fake-Tokens", tokens)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	post("big", "200") // 201 tokens: the model "big" is 101 below zero
	if res := post("big", "1"); res.StatusCode != 429 {
		t.Fatalf("big after 201 tokens: %d", res.StatusCode)
	}
	if res := post("small", "1"); res.StatusCode != 200 || res.Header.Get("RateLimit-Remaining") != "90" {
		t.Fatalf("small: %d, remaining %s", res.StatusCode, res.Header.Get("RateLimit-Remaining"))
	}
}

// TestUsageTrailers: a usage header sent as a trailer (announced in Trailer, or with
// http.TrailerPrefix) is charged once the handler returns, directly and through a reverse proxy
// (an HTTP/1.1 chunked stream); the same field as a header and a trailer is given twice and
// charged the fallback; the client still gets the stream and the trailers.
func TestUsageTrailers(t *testing.T) {
	const name = "X-Usage-Total-Tokens"
	doc := `[{"name": "tokens", "usage": {"header": "x-usage-total-tokens", "fallback": 500}, "limit": {"algorithm": "fixed_window", "limit": 100000, "window": "1m"}}]`
	stream := func(w http.ResponseWriter) { // a first chunk sent at once: a chunked response
		io.WriteString(w, "a streamed ")
		http.NewResponseController(w).Flush()
		io.WriteString(w, "answer")
	}
	cases := []struct {
		name    string
		handler func(w http.ResponseWriter)
		cost    int64
		err     error
		trailer string // what the client reads as the trailer
	}{
		{"announced trailer", func(w http.ResponseWriter) {
			w.Header().Set("Trailer", name)
			stream(w)
			w.Header().Set(name, "42")
		}, 42, nil, "42"},
		{"prefixed trailer", func(w http.ResponseWriter) {
			stream(w)
			w.Header().Set(http.TrailerPrefix+name, "43")
		}, 43, nil, "43"},
		{"header and trailer", func(w http.ResponseWriter) {
			w.Header().Set(name, "10")
			stream(w)
			w.Header().Set(http.TrailerPrefix+name, "44")
		}, 500, usage.ErrDuplicate, "44"},
		{"header only", func(w http.ResponseWriter) {
			w.Header().Set(name, "45")
			stream(w)
		}, 45, nil, ""},
		{"neither", stream, 500, usage.ErrMissing, ""},
	}
	for _, proxy := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s, proxy %v", c.name, proxy), func(t *testing.T) {
				var got []rules.Settled
				var mu sync.Mutex
				e, err := rules.New(engine(t, doc, nil).Rules(), rules.Options{Local: rules.Each(memstore.New(memstore.Options{}).Decide),
					Settled: func(s rules.Settled) { mu.Lock(); got = append(got, s); mu.Unlock() }})
				if err != nil {
					t.Fatal(err)
				}
				var next http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { c.handler(w) })
				if proxy {
					up := httptest.NewServer(next)
					defer up.Close()
					u, _ := url.Parse(up.URL)
					next = &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
				}
				srv := httptest.NewServer(httplimit.New(e, httplimit.Options{}).Handler(next))
				defer srv.Close()
				res, err := srv.Client().Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if string(body) != "a streamed answer" || res.Trailer.Get(name) != c.trailer {
					t.Errorf("client got %q, trailer %q; want the answer and %q", body, res.Trailer.Get(name), c.trailer)
				}
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
					mu.Lock()
					n := len(got)
					mu.Unlock()
					if n > 0 || time.Now().After(deadline) {
						break
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if len(got) != 1 || got[0].Cost != c.cost || (c.err == nil) != (got[0].Err == nil) || (c.err != nil && !errors.Is(got[0].Err, c.err)) {
					t.Fatalf("settled %+v, want cost %d, error %v", got, c.cost, c.err)
				}
			})
		}
	}
}
