package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// adaptiveCfg is one adaptive rule per route with an slo of 1 s: it starts at 2 and doubles
// every interval of fast answers while the requests fill it (smoothing 100), and halves on a
// slow interval or a drop (backoff 50). probe_every, the state's TTL, is far beyond a test's
// run in the compiled module, whose clock moves 1 ms per read.
const adaptiveCfg = `{"rules": [{"name": "backend", "by": ["route"], "limit": {"algorithm": "adaptive", "slo": "1s",
	"min_limit": 2, "max_limit": 64, "interval": "100ms", "smoothing": 100, "backoff": 50, "probe_every": "1d"}}]}`

// clock is the filter's clock in Go; nil for the compiled module, whose clock moves by itself.
type clock struct{ us *int64 }

func (c clock) advance(d int64) {
	if c.us != nil {
		*c.us += d
	}
}

// runnerClock returns the VM of rn, with a clock the test moves in Go, and a count of the
// response :status reads in Go (the host calls a finished request makes).
func runnerClock(t *testing.T, rn string) (types.VMContext, clock, *int) {
	statuses := new(int)
	if rn == "wasm" {
		return wasmVM(t), clock{}, statuses
	}
	now := nowMicro()
	return &vmContext{now: func() int64 { return now }, status: func() string { *statuses++; return responseStatus() }},
		clock{&now}, statuses
}

// batch opens n requests at once, answers the admitted ones with status after latency µs, and
// returns the limit the last one reported (RateLimit-Limit) and how many were denied.
func (e *emu) batch(c clock, n int, latency int64, status string) (limit, denied int) {
	e.t.Helper()
	var ids []uint32
	for i := 0; i < n; i++ {
		id := e.InitializeHttpContext()
		e.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}}, true)
		if lr := e.GetSentLocalResponse(id); lr != nil {
			denied++
			limit = atoi(e.t, toMap(lr.Headers)["ratelimit-limit"])
			e.CompleteHttpContext(id)
			continue
		}
		ids = append(ids, id)
	}
	c.advance(latency)
	for _, id := range ids {
		e.CallOnResponseHeaders(id, [][2]string{{":status", status}}, true)
		limit = atoi(e.t, toMap(e.GetCurrentResponseHeaders(id))["ratelimit-limit"])
		e.CompleteHttpContext(id)
	}
	return limit, denied
}

func atoi(t testing.TB, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("RateLimit-Limit %q: %v", s, err)
	}
	return n
}

// The limit grows while the backend answers fast with 2xx to as many requests as it admits,
// and falls when it answers 5xx (Envoy's 503 and 504 included) or, in Go, slowly. In Go and
// compiled.
func TestAdaptiveLimitFollowsBackend(t *testing.T) {
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			vm, c, statuses := runnerClock(t, rn.name)
			e := start(t, vm, adaptiveCfg)
			if err := e.SetProperty([]string{"xds", "route_name"}, []byte("api")); err != nil {
				t.Fatal(err)
			}
			limit, admitted := 2, 0
			for i := 0; i < 200 && limit < 32; i++ {
				l, denied := e.batch(c, limit, 10*algos.Millisecond, "200")
				if denied > 0 {
					t.Fatalf("batch %d: %d of %d denied under limit %d", i, denied, limit, limit)
				}
				admitted += limit
				c.advance(40 * algos.Millisecond)
				if l < limit {
					t.Fatalf("batch %d: limit fell from %d to %d on fast 2xx answers", i, limit, l)
				}
				limit = l
			}
			if limit < 32 {
				t.Fatalf("limit %d after fast answers, want it to grow from 2 to at least 32", limit)
			}
			if rn.name == "go" && *statuses != admitted {
				t.Errorf("%d :status reads for %d admitted requests, want one each", *statuses, admitted)
			}
			high := limit
			if rn.name == "go" { // in the compiled module an interval may close, and the limit grow, during the batch
				if _, denied := e.batch(c, limit+1, 10*algos.Millisecond, "200"); denied != 1 {
					t.Errorf("%d of limit + 1 = %d requests denied, want 1", denied, limit+1)
				}
			}
			drops := map[string]int{"go": 2, "wasm": 10}[rn.name] // the compiled module's intervals pass as it reads its clock
			for i := 0; i < drops; i++ {
				c.advance(100 * algos.Millisecond) // one cut per interval
				l, _ := e.batch(c, 4, 10*algos.Millisecond, []string{"503", "504"}[i%2])
				high = max(high, l)
			}
			if limit, _ = e.batch(c, 1, 10*algos.Millisecond, "200"); limit >= high {
				t.Errorf("limit %d after 5xx answers, want below %d", limit, high)
			}
			if rn.name == "wasm" {
				return // its clock cannot make an answer slow
			}
			low := limit
			for i := 0; i < 3; i++ {
				limit, _ = e.batch(c, limit, 2*algos.Second, "200") // over the slo of 1 s
			}
			if limit >= low {
				t.Errorf("limit %d after slow answers, want below %d", limit, low)
			}
		})
	}
}

// A request that ends without response headers (a reset stream) gives its slot back; so does
// one denied by another rule, or answered by a local reply after the adaptive rule admitted it.
func TestAdaptiveReleases(t *testing.T) {
	const cfg = `{"rules": [
		{"name": "one", "limit": {"algorithm": "adaptive", "slo": "1s", "min_limit": 1, "max_limit": 1}},
		{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}}]}`
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), cfg).from("192.0.2.1:1")
			id := e.InitializeHttpContext()
			e.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}}, true)
			if e.GetSentLocalResponse(id) != nil {
				t.Fatal("first request denied")
			}
			if r := e.from("192.0.2.2:1").request("/"); r.status != 429 || r.headers["ratelimit-limit"] != "1" {
				t.Fatalf("second request in flight: %d %v, want 429 by the adaptive limit of 1", r.status, r.headers)
			}
			e.CompleteHttpContext(id) // reset: no response headers
			for i := 0; i < 2; i++ {
				if r := e.from("192.0.2.3:1").request("/"); r.status != 0 || r.headers["ratelimit-remaining"] != "0" {
					t.Fatalf("request %d after the reset: %d %v, want admitted, the only one in flight", i, r.status, r.headers)
				}
			}
			if r := e.request("/"); r.status != 429 || r.headers["ratelimit-limit"] != "2" {
				t.Fatalf("third request of a client: %d %v, want 429 by per-ip", r.status, r.headers)
			}
			if r := e.from("192.0.2.4:1").request("/"); r.status != 0 {
				t.Fatalf("a request after one per-ip denied: %d, want admitted (nothing kept in flight)", r.status)
			}
		})
	}
}

// In cluster mode a request the adaptive rule admitted, then refused because dianad failed
// (on_failure closed), gives its slot back at once.
func TestAdaptiveClusterReply(t *testing.T) {
	const cfg = `{"rules": [{"name": "one", "limit": {"algorithm": "adaptive", "slo": "1s", "min_limit": 1, "max_limit": 1}}],
		"cluster": {"name": "dianad", "on_failure": "closed"}}`
	e := start(t, &vmContext{now: nowMicro}, cfg)
	for i := 0; i < 3; i++ { // the streams stay open: the reply itself gives the slot back
		id := e.InitializeHttpContext()
		if a := e.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}}, true); a != types.ActionPause {
			t.Fatalf("request %d: not paused for the callout", i)
		}
		calls := e.GetCalloutAttributesFromContext(id)
		if len(calls) != 1 {
			t.Fatalf("request %d: %d callouts, want 1 (not denied by a kept slot)", i, len(calls))
		}
		e.CallOnHttpCallResponse(calls[0].CalloutID, [][2]string{{":status", "500"}}, nil, nil)
		if lr := e.GetSentLocalResponse(id); lr == nil || lr.StatusCode != 503 {
			t.Fatalf("request %d: %+v, want a 503 (on_failure closed)", i, lr)
		}
	}
}

// A filter without adaptive rules makes no new host call: it never reads the response's
// :status, and writes no adaptive state.
func TestNoAdaptiveNoStatusRead(t *testing.T) {
	statuses := 0
	d := &casData{}
	vm := &vmContext{data: d, now: nowMicro, status: func() string { statuses++; return responseStatus() }}
	e := start(t, vm, `{"rules": [{"name": "ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 1, "burst": 3}}]}`)
	for i := 0; i < 5; i++ {
		e.request("/")
	}
	if statuses != 0 {
		t.Errorf("%d :status reads, want 0", statuses)
	}
	for k := range d.keys {
		if strings.HasPrefix(k, "diana/a/") {
			t.Errorf("adaptive key %q written", k)
		}
	}
}

// The compiled module with an adaptive rule beside a per-IP one: its linear memory stops growing
// once warm, through admissions, denials and resets (every 10th stream ends without a response),
// and no slot stays taken.
func TestCompiledMemoryAdaptive(t *testing.T) {
	const warm, total, clients = 5_000, 30_000, 1_000
	const cfg = `{"rules": [{"name": "backend", "limit": {"algorithm": "adaptive", "slo": "1s", "min_limit": 4, "max_limit": 4}},
		{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 3, "window": "1h"}}]}`
	vm := wasmVM(t)
	e := start(t, vm, cfg)
	mod := guestModule(t, vm)
	del := mod.ExportedFunction("proxy_on_delete")
	if del == nil {
		t.Fatal("diana.wasm exports no proxy_on_delete")
	}
	hit := func(i int) {
		e.SetProperty([]string{"source", "address"}, []byte("10.2."+strconv.Itoa(i/256%256)+"."+strconv.Itoa(i%256)+":1"))
		id := e.InitializeHttpContext()
		a := e.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/p"}, {":authority", "example.com"}}, true)
		if a == types.ActionContinue && i%10 != 0 {
			e.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
		}
		e.CompleteHttpContext(id)
		if _, err := del.Call(t.Context(), uint64(id)); err != nil {
			t.Fatalf("proxy_on_delete: %v", err)
		}
	}
	for i := 0; i < warm; i++ {
		hit(i % clients)
	}
	before := mod.Memory().Size()
	for i := warm; i < total; i++ {
		hit(i % clients)
	}
	after := mod.Memory().Size()
	t.Logf("diana.wasm linear memory with an adaptive rule after %d requests: %d bytes; after %d: %d bytes", warm, before, total, after)
	if after != before {
		t.Errorf("linear memory grew from %d to %d bytes over %d requests", before, after, total-warm)
	}
	if a := e.counter(metricAllowed); a != 3*clients {
		t.Errorf("allowed %d, want %d (3 per client)", a, 3*clients)
	}
	// The rule closest to its limit reports: per-ip (3, 2 left) unless adaptive (4) kept a slot.
	if r := e.from("10.3.0.1:1").request("/"); r.status != 0 || r.headers["ratelimit-limit"] != "3" || r.headers["ratelimit-remaining"] != "2" {
		t.Errorf("a new client: %d %v, want admitted with per-ip's limit 3, remaining 2: no adaptive slot kept", r.status, r.headers)
	}
}
