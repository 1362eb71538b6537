package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
	"github.com/diana-gw/diana/store/slotstore"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The budget proof through the compiled module (issue 27): clients spend one token budget through
// diana.wasm, with responses whose usage varies (JSON bodies and streams in random chunks, usage
// missing, malformed, cut off, no body at all), while many requests are in flight at once. The
// tokens charged never pass the budget plus the in-flight bound, and the state the budget is kept
// in holds exactly what was charged.
//
// The budget is a fixed window of budgetLimit tokens a day: once spent it stays spent for the
// run, and its state is one count to compare with the charges (a token bucket's would move with
// the clock). The rule reserves budgetEstimate per request and charges the response's usage,
// from half to twice the estimate, or budgetFallback when it cannot be read. A request is
// admitted while the count has room for its estimate, so when the last one is admitted the count
// is at most the limit, and what comes after are the settlements of the requests then in flight,
// each at most worst − estimate above its estimate: at most budgetFlight of them.
const (
	budgetLimit    = 20_000
	budgetEstimate = 100
	budgetFallback = 300
	budgetMaxUsage = 2 * budgetEstimate
	budgetFlight   = 32  // requests in flight at most (admitted or asking, and not settled)
	budgetRequests = 480 // requests in a run: enough to spend the budget about three times
	budgetKey      = "tokens|k1"
	// budgetBound is the budget plus the in-flight bound.
	budgetBound = budgetLimit + budgetFlight*(max(budgetMaxUsage, budgetFallback)-budgetEstimate)
)

// budgetWindow is the budget's window.
const budgetWindow = 24 * time.Hour

// budgetRule is the token budget, in JSON for the filter and as YAML flow for dianad.
var budgetRule = `{"name": "tokens", "by": ["header:x-api-key"], "usage": {"body": "usage.total_tokens", ` +
	`"estimate": ` + strconv.Itoa(budgetEstimate) + `, "fallback": ` + strconv.Itoa(budgetFallback) + `}, ` +
	`"limit": {"algorithm": "fixed_window", "limit": ` + strconv.Itoa(budgetLimit) + `, "window": "` + strconv.Itoa(int(budgetWindow.Hours())) + `h"}}`

// budgetAlg is budgetRule's algorithm, to read its state.
func budgetAlg(t *testing.T) algos.Algorithm {
	alg, err := algos.NewFixedWindow(budgetLimit, budgetWindow.Microseconds())
	if err != nil {
		t.Fatal(err)
	}
	return alg
}

// oneWindow waits, if need be, until the run cannot cross into the next window (a minute of
// margin; at most a minute a day is spent waiting).
func oneWindow(t *testing.T) {
	const margin = time.Minute
	if left := time.Until(time.Now().Truncate(budgetWindow).Add(budgetWindow)); left < margin {
		t.Logf("waiting %v for the next window", left)
		time.Sleep(left + time.Second)
	}
}

// llmResponse is one simulated upstream response and what it charges: its usage, or the
// fallback when the usage cannot be read.
type llmResponse struct {
	hdrs   [][2]string
	chunks []string
	cost   int64
	unread bool
}

// newResponse draws a response: most carry a usage (a JSON body or a stream's usage event, from
// half to twice the estimate), the others none the filter can read.
func newResponse(r *rand.Rand) llmResponse {
	json := [][2]string{{"content-type", "application/json"}}
	sse := [][2]string{{"content-type", "text/event-stream"}}
	total := budgetEstimate/2 + r.IntN(budgetMaxUsage-budgetEstimate/2+1)
	n := strconv.Itoa(total)
	usage := `"usage":{"prompt_tokens":9,"completion_tokens":` + strconv.Itoa(total-9) + `,"total_tokens":` + n + `}`
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"Bonjour\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\" à vous\"}}],\"usage\":null}\n\n"
	var resp llmResponse
	switch k := r.IntN(100); {
	case k < 40:
		resp = llmResponse{hdrs: json, chunks: split(r, `{"id":"c1","choices":[{"message":{"content":"Bonjour"}}],`+usage+`}`), cost: int64(total)}
	case k < 75:
		resp = llmResponse{hdrs: sse, chunks: split(r, stream+"data: {\"choices\":[],"+usage+"}\n\ndata: [DONE]\n\n"), cost: int64(total)}
	case k < 83: // an upstream error
		resp = llmResponse{hdrs: json, chunks: split(r, `{"error":{"message":"overloaded"}}`), unread: true}
	case k < 90: // a hostile or broken usage
		bad := []string{`-5`, `12.5`, `"7"`, `1e3`, `5,"total_tokens":6`, `99999999999999999`}
		resp = llmResponse{hdrs: json, chunks: split(r, `{"usage":{"total_tokens":`+bad[r.IntN(len(bad))]+`}}`), unread: true}
	case k < 95: // a stream cut before its usage event
		resp = llmResponse{hdrs: sse, chunks: split(r, stream), unread: true}
	default: // no body at all
		resp = llmResponse{hdrs: json, unread: true}
	}
	if resp.unread {
		resp.cost = budgetFallback
	}
	return resp
}

// split cuts s into one to four chunks at random places.
func split(r *rand.Rand, s string) []string {
	var out []string
	for range r.IntN(4) {
		i := r.IntN(len(s) + 1)
		out, s = append(out, s[:i]), s[i:]
	}
	return append(out, s)
}

// flight is a request in flight.
type flight struct {
	id   uint32
	vm   int
	wait int // rounds until its response
	resp llmResponse
}

// spend is what a run charged.
type spend struct {
	admitted, denied, unread int
	charged                  int64
	peak                     int // requests in flight at once, at most
}

func (s spend) String() string {
	return strconv.Itoa(s.admitted) + " admitted, " + strconv.Itoa(s.denied) + " denied, " +
		strconv.Itoa(s.unread) + " charged the fallback, up to " + strconv.Itoa(s.peak) + " in flight; " +
		strconv.FormatInt(s.charged, 10) + " tokens charged"
}

// check fails the test unless the run kept to the bound and pressed on the budget.
func (s spend) check(t *testing.T) {
	t.Helper()
	t.Logf("%v; budget %d, bound %d", s, budgetLimit, budgetBound)
	if s.charged > budgetBound {
		t.Fatalf("%d tokens charged, more than the budget plus the in-flight bound, %d", s.charged, budgetBound)
	}
	if least := int64(budgetLimit - budgetFlight*budgetEstimate); s.charged < least || s.denied == 0 {
		t.Fatalf("%d tokens charged with %d denials: the run did not spend the budget (%d at least)", s.charged, s.denied, least)
	}
}

// fleet runs each HTTP context on one of several VMs, the one pick names when it is created:
// several Envoys (or workers) behind one emulator, each module with its own memory. A callout
// goes back to the module that made it (the SDK's wasm runner keeps the module with it). The
// emulator's shared data, which in cluster mode holds only the hash key, is common to them.
type fleet struct {
	types.DefaultVMContext
	vms  []types.VMContext
	pick int
}

func (f *fleet) OnVMStart(n int) types.OnVMStartStatus {
	for _, vm := range f.vms {
		if !vm.OnVMStart(n) {
			return false
		}
	}
	return true
}

func (f *fleet) NewPluginContext(id uint32) types.PluginContext {
	fp := &fleetPlugin{f: f}
	for _, vm := range f.vms {
		fp.ps = append(fp.ps, vm.NewPluginContext(id))
	}
	return fp
}

type fleetPlugin struct {
	types.DefaultPluginContext
	f  *fleet
	ps []types.PluginContext
}

func (p *fleetPlugin) OnPluginStart(n int) types.OnPluginStartStatus {
	for _, pc := range p.ps {
		if !pc.OnPluginStart(n) {
			return false
		}
	}
	return true
}

func (p *fleetPlugin) OnTick() {
	for _, pc := range p.ps {
		pc.OnTick()
	}
}

func (p *fleetPlugin) NewHttpContext(id uint32) types.HttpContext {
	return p.ps[p.f.pick].NewHttpContext(id)
}

// budgetHeaders are a request's headers: every client spends the one key's budget.
var budgetHeaders = [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "llm"}, {"x-api-key", "k1"}}

// TestBudgetCluster: 4 diana.wasm VMs in cluster mode, each deciding through its own dianad, the
// 4 dianad on one real redis-server, spend one token budget with up to budgetFlight requests in
// flight. Each round the filters start requests and end those whose response came (each response
// in flight for 0 to 2 rounds); their checks and settlements go to dianad at once, concurrently
// (a settlement to another node than its check: the ticket is the reservation), and the answers
// come back. The tokens charged stay within the budget plus the in-flight bound, and Redis, and
// dianad's diana_usage_tokens_total, hold exactly what was charged.
func TestBudgetCluster(t *testing.T) {
	const vms = 4
	rs := redistest.Start(t)
	var admins []string
	for range vms {
		admins = append(admins, runDianad(t, `version: 1
listen: "127.0.0.1:0"
admin:
  listen: "127.0.0.1:0"
  token: s3cret
upstreams:
  - name: demo
    url: "demo:"
redis:
  addrs: ["`+rs.Addr+`"]
  timeout: 5s
rules:
  - `+strings.Replace(budgetRule, `{"name": "tokens",`, `{"name": "tokens", "mode": "cluster",`, 1)+`
`))
	}
	client := relayClient(t)
	f := &fleet{}
	for range vms {
		f.vms = append(f.vms, wasmVM(t))
	}
	// The emulator logs every callout; thousands of lines would only slow the run.
	prev := log.Writer()
	log.SetOutput(io.Discard)
	t.Cleanup(func() { log.SetOutput(prev) })
	e := start(t, f, `{"cluster": {"name": "dianad", "token": "s3cret", "timeout": "10s"}}`)
	oneWindow(t)

	rng := rand.New(rand.NewPCG(27, 6))
	var (
		s       spend
		flights []*flight // admitted, waiting for their response
		issued  int
	)
	settled := len(e.GetCalloutAttributesFromContext(proxytest.PluginContextID))
	for round := 0; issued < budgetRequests || len(flights) > 0; round++ {
		if round > 4*budgetRequests {
			t.Fatalf("round %d: requests still in flight", round)
		}
		var calls []relayed
		asking := map[uint32]*flight{} // by callout id
		for issued < budgetRequests && len(flights)+len(asking) < budgetFlight {
			fl := &flight{vm: issued % vms, resp: newResponse(rng)}
			issued++
			f.pick = fl.vm
			fl.id = e.InitializeHttpContext()
			if a := e.CallOnRequestHeaders(fl.id, budgetHeaders, true); a != types.ActionPause {
				t.Fatalf("request not paused for its check: %v", a)
			}
			c := e.GetCalloutAttributesFromContext(fl.id)
			if len(c) != 1 {
				t.Fatalf("%d check callouts, want 1", len(c))
			}
			asking[c[0].CalloutID] = fl
			calls = append(calls, relayed{call: detach(c[0]), admin: admins[fl.vm]})
		}
		s.peak = max(s.peak, len(flights)+len(asking))
		waiting := flights[:0]
		for _, fl := range flights {
			if fl.wait > 0 {
				fl.wait--
				waiting = append(waiting, fl)
				continue
			}
			e.respond(fl.id, fl.resp.hdrs, nil, fl.resp.chunks...)
			e.CompleteHttpContext(fl.id)
			all := e.GetCalloutAttributesFromContext(proxytest.PluginContextID)
			if len(all) != settled+1 {
				t.Fatalf("%d settlements at the end of a stream, want 1", len(all)-settled)
			}
			calls = append(calls, relayed{call: detach(all[settled]), admin: admins[(fl.vm+1)%vms]})
			settled++
			s.charged += fl.resp.cost
			if fl.resp.unread {
				s.unread++
			}
		}
		flights = waiting
		relayAll(t, client, calls)
		// The emulator numbers a callout by the callouts it has not seen answered: answered from
		// the last, each keeps its number until it is.
		slices.SortFunc(calls, func(a, b relayed) int { return int(b.call.CalloutID) - int(a.call.CalloutID) })
		for _, c := range calls {
			e.CallOnHttpCallResponse(c.call.CalloutID, [][2]string{{":status", c.status}}, nil, c.body)
			fl := asking[c.call.CalloutID]
			switch {
			case fl == nil && c.status != "204":
				t.Fatalf("a settlement answered %s: %s", c.status, c.body)
			case fl == nil:
			case e.GetSentLocalResponse(fl.id) != nil:
				if lr := e.GetSentLocalResponse(fl.id); lr.StatusCode != 429 {
					t.Fatalf("a request answered %d: %s", lr.StatusCode, lr.Data)
				}
				s.denied++
				e.CompleteHttpContext(fl.id)
			case c.status != "200":
				t.Fatalf("a check answered %s: %s", c.status, c.body)
			default:
				s.admitted++
				fl.wait = rng.IntN(3)
				flights = append(flights, fl)
			}
		}
	}
	s.check(t)
	for _, m := range []string{metricBackendError, metricSettleFailed} {
		if n := e.counter(m); n != 0 {
			t.Fatalf("%s = %d", m, n)
		}
	}
	st, err := redisstore.New(rs.Client(), redisstore.Options{}).State(context.Background(), budgetKey, budgetAlg(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.W[1] != s.charged {
		t.Fatalf("Redis counts %d tokens, %d were charged", st.W[1], s.charged)
	}
	var tokens, unread float64
	for _, a := range admins {
		m := scrape(t, client, a)
		tokens += m(`diana_usage_tokens_total{`)
		unread += m(`diana_usage_unread_total{`)
	}
	if int64(tokens) != s.charged || int(unread) != s.unread {
		t.Fatalf("dianad counted %v tokens and %v unread, the run charged %d and %d unread", tokens, unread, s.charged, s.unread)
	}
}

// relayed is a callout relayed to dianad, and its answer.
type relayed struct {
	call   proxytest.HttpCalloutAttribute
	admin  string
	status string
	body   []byte
}

// detach copies a callout out of the module's memory, where the emulator leaves its strings and
// the module reuses them once the call is made.
func detach(c proxytest.HttpCalloutAttribute) proxytest.HttpCalloutAttribute {
	hdrs := make([][2]string, len(c.Headers))
	for i, kv := range c.Headers {
		hdrs[i] = [2]string{strings.Clone(kv[0]), strings.Clone(kv[1])}
	}
	c.Headers, c.Body, c.Trailers = hdrs, bytes.Clone(c.Body), nil
	return c
}

// relayClient returns a client that keeps a connection per request in flight to each dianad,
// and closes them before the dianad started before it shut down (which would otherwise wait for
// the connections dialled and never used).
func relayClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: budgetFlight}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// relayAll sends the callouts to dianad concurrently, as Envoy would, and waits for the answers.
func relayAll(t *testing.T, client *http.Client, calls []relayed) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(calls))
	for i := range calls {
		wg.Go(func() {
			c := &calls[i]
			h := toMapAll(c.call.Headers)
			req, err := http.NewRequest(h[":method"], c.admin+h[":path"], bytes.NewReader(c.call.Body))
			if err != nil {
				errs[i] = err
				return
			}
			for k, v := range h {
				if !strings.HasPrefix(k, ":") {
					req.Header.Set(k, v)
				}
			}
			resp, err := client.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			c.status = strconv.Itoa(resp.StatusCode)
			c.body, errs[i] = io.ReadAll(resp.Body)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// scrape reads dianad's metrics; the function it returns sums the series that begin with a
// prefix.
func scrape(t *testing.T, client *http.Client, admin string) func(prefix string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return func(prefix string) float64 {
		var sum float64
		for _, m := range regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(prefix)+`\S* (\S+)$`).FindAllSubmatch(b, -1) {
			v, err := strconv.ParseFloat(string(m[1]), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", prefix, err)
			}
			sum += v
		}
		return sum
	}
}

// TestBudgetLocal: one diana.wasm VM in local mode spends the budget in shared data with up to
// budgetFlight requests in flight: a request starts at each step, and each response ends 0 to
// 2 × budgetFlight steps after its request. The same bound holds, and the state in shared data
// counts exactly what was charged.
func TestBudgetLocal(t *testing.T) {
	e := start(t, wasmVM(t), `{"rules": [`+budgetRule+`]}`)
	rng := rand.New(rand.NewPCG(27, 7))
	var (
		s       spend
		flights []*flight
	)
	for issued := 0; issued < budgetRequests || len(flights) > 0; {
		if issued < budgetRequests && len(flights) < budgetFlight {
			fl := &flight{resp: newResponse(rng), wait: rng.IntN(2 * budgetFlight)}
			issued++
			fl.id = e.InitializeHttpContext()
			e.CallOnRequestHeaders(fl.id, budgetHeaders, true)
			if lr := e.GetSentLocalResponse(fl.id); lr != nil {
				if lr.StatusCode != 429 {
					t.Fatalf("a request answered %d: %s", lr.StatusCode, lr.Data)
				}
				s.denied++
				e.CompleteHttpContext(fl.id)
			} else {
				s.admitted++
				flights = append(flights, fl)
			}
		}
		s.peak = max(s.peak, len(flights))
		waiting := flights[:0]
		for _, fl := range flights {
			if fl.wait--; fl.wait >= 0 {
				waiting = append(waiting, fl)
				continue
			}
			e.respond(fl.id, fl.resp.hdrs, nil, fl.resp.chunks...)
			e.CompleteHttpContext(fl.id)
			s.charged += fl.resp.cost
			if fl.resp.unread {
				s.unread++
			}
		}
		flights = waiting
	}
	s.check(t)
	if n := e.counter(metricUsageUnread); n != uint64(s.unread) {
		t.Fatalf("usage_unread %d, want %d", n, s.unread)
	}
	if n := localCount(t); n != s.charged {
		t.Fatalf("shared data counts %d tokens, %d were charged", n, s.charged)
	}
}

// localCount reads the budget's count in the filter's shared data, as the filter's store reads
// it (the default slots), through an algorithm that only looks. The module's clock is its
// runtime's (wazero's, which starts at 2022-01-01 and does not follow the wall clock: the run
// stays in one window), not the test's, so the entry is read as of a time before it expires.
func localCount(t *testing.T) int64 {
	key, err := slotstore.LoadKey(hostData{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &slotstore.Store{Data: hostData{}, Key: key, Slots: 512, Entries: 16, Retries: 1,
		Now: func() int64 { return 1 }}
	look := &looker{Algorithm: budgetAlg(t)}
	op := rules.Op{Key: budgetKey, Alg: look, Req: algos.Request{DryRun: true}}
	s.Decide(context.Background(), []*rules.Op{&op})
	if op.Err != nil || !look.seen {
		t.Fatalf("reading the state: %v (seen %v)", op.Err, look.seen)
	}
	return look.st.W[1]
}

// looker is an algorithm that keeps the state it is shown and changes nothing.
type looker struct {
	algos.Algorithm
	st   algos.State
	seen bool
}

func (l *looker) Decide(st *algos.State, _ algos.Request) algos.Decision {
	l.st, l.seen = *st, true
	return algos.Decision{}
}
