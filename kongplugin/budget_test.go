package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
)

// TestBudgetCluster proves the LLM token budget through the real plugin binary, as
// server.TestClusterUsage does through dianad: four plugin servers (four Kong nodes), each with
// four workers (connections, each with its own instance of the config), share one budget in a
// real redis-server. Each of the 16 clients sends requests one after the other: the access phase
// reserves usage_estimate, and the log phase charges the tokens the upstream's headers give, or
// usage_fallback when they are missing or unreadable.
//
// The bound (docs/llm.md, "Exactness"): the tokens charged never exceed the budget (the burst
// and the refill over the run, or the window's limit) plus, for each request admitted and not yet
// settled, its cost beyond its estimate. A client has one request in flight, whose cost is at
// most max(the largest usage, usage_fallback), so the bound is the budget plus
// clients × (max(maxUsage, fallback) − estimate). The costs are from half to three times the
// estimate and a fifth of the responses are charged the fallback, four times it: a budget charged
// only its estimates (no settlement) would be overspent more than twice over, and the test fails
// so. Then the tokens Redis holds must be exactly those charged: the fixed window's count, the
// token bucket's theoretical arrival time moved by the tokens times its emission interval.
func TestBudgetCluster(t *testing.T) {
	bin := build(t, "github.com/diana-gw/diana/kongplugin", "diana")
	const nodes, workers = 4, 4
	const clients = nodes * workers
	const estimate, fallback, minUsage, maxUsage = 50, 200, 25, 150
	const overshoot = max(maxUsage, fallback) - estimate // per request in flight, at most
	servers := make([]*pluginServer, nodes)
	for i := range servers {
		servers[i] = startServer(t, bin)
	}

	for _, c := range []struct {
		algorithm, window string
		limit, burst      int64         // burst: the token bucket's size
		run               time.Duration // the token bucket's; a fixed window runs until every client is refused
	}{
		// 20,000 tokens a second in a bucket of 40,000: an emission interval of 50 µs, and a bucket
		// emptied by the first request refills only after 2 s without a request.
		{algorithm: "token_bucket", window: "1s", limit: 20000, burst: 40000, run: 1500 * time.Millisecond},
		// A window of ten years (aligned on the epoch: the next boundary is in December 2029).
		{algorithm: "fixed_window", window: "3650d", limit: 50000},
	} {
		t.Run(c.algorithm, func(t *testing.T) {
			rs := redistest.Start(t)
			host, port, _ := net.SplitHostPort(rs.Addr)
			p, _ := strconv.Atoi(port)
			pluginID := "budget-" + c.algorithm
			cfg := map[string]any{"policy": "redis", "redis_host": host, "redis_port": p,
				// A timeout far above a round trip, and a refusal if Redis still cannot decide: a
				// decision by the fail policy would not be the budget's (and is logged, see below).
				"redis_timeout": 5000, "fail_closed": true,
				"algorithm": c.algorithm, "limit": c.limit, "window": c.window, "burst": c.burst,
				"limit_by": "header", "header_name": "X-Api-Key",
				"usage_header": "x-usage-input-tokens+x-usage-output-tokens", "usage_estimate": estimate, "usage_fallback": fallback}
			type client struct {
				w  *pluginServer
				id int32
			}
			cs := make([]client, clients)
			for i := range cs {
				s := servers[i%nodes]
				cs[i] = client{s.worker(), s.start(cfg, pluginID)}
			}
			ctx := context.Background()
			rc := rs.Client()
			state := func() []int64 { // the budget's state in Redis: its only key
				t.Helper()
				keys, err := rc.Keys(ctx, "diana:*").Result()
				if err != nil || len(keys) != 1 || !strings.Contains(keys[0], pluginID) {
					t.Fatalf("keys %q (%v), want the budget's alone", keys, err)
				}
				v, err := rc.Get(ctx, keys[0]).Result()
				if err != nil {
					t.Fatal(err)
				}
				var words []int64
				for _, f := range strings.Fields(v) {
					n, err := strconv.ParseInt(f, 10, 64)
					if err != nil {
						t.Fatalf("state %q: %v", v, err)
					}
					words = append(words, n)
				}
				return words
			}

			var spent, admitted, denied, fallbacks atomic.Int64
			start := time.Now()
			// The token bucket's state is its theoretical arrival time (TAT), which each charge
			// moves by the tokens times the emission interval, while the bucket is not full (a
			// full bucket's TAT is now, whatever time has passed). A first request, charged the
			// whole bucket, empties it; the TAT it leaves is the start of the count.
			var tat0 int64
			if c.algorithm == "token_bucket" {
				r := &kongReq{Headers: map[string]string{"x-api-key": "shared"}}
				if res := cs[0].w.event(cs[0].id, "access", r); res.Exit {
					t.Fatalf("first request: %+v", res)
				}
				r.Upstream = map[string][]string{"X-Usage-Input-Tokens": {strconv.FormatInt(c.burst, 10)}, "X-Usage-Output-Tokens": {"0"}}
				cs[0].w.event(cs[0].id, "log", r)
				spent.Add(c.burst)
				tat0 = state()[0]
			}
			var wg sync.WaitGroup
			for ci, cl := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						if c.run > 0 && time.Since(start) >= c.run || time.Since(start) > 20*time.Second {
							return
						}
						r := &kongReq{Headers: map[string]string{"x-api-key": "shared"}}
						res, err := cl.w.tryEvent(cl.id, "access", r)
						if err == nil && len(res.Logs) > 0 {
							err = fmt.Errorf("access logged %q: a decision not the budget's", res.Logs)
						}
						if err != nil {
							t.Error(err)
							return
						}
						if res.Exit {
							if res.Status != 429 {
								t.Errorf("refused with %d: %+v", res.Status, res)
								return
							}
							denied.Add(1)
							if c.run == 0 { // a fixed window never refills in this run
								return
							}
							time.Sleep(2 * time.Millisecond)
							continue
						}
						admitted.Add(1)
						h, cost, fellBack := response(ci, i, minUsage, maxUsage, fallback)
						r.Upstream = h
						res, err = cl.w.tryEvent(cl.id, "log", r)
						if err != nil {
							t.Error(err)
							return
						}
						if fellBack {
							fallbacks.Add(1)
						}
						spent.Add(cost)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			if t.Failed() {
				return
			}

			budget := c.limit
			if c.algorithm == "token_bucket" {
				budget = c.burst + c.limit*elapsed.Microseconds()/1_000_000
			}
			bound := budget + clients*overshoot
			t.Logf("%s: %d admitted (%d charged the fallback), %d refused, %d tokens spent in %v; budget %d, bound %d",
				c.algorithm, admitted.Load(), fallbacks.Load(), denied.Load(), spent.Load(), elapsed.Round(time.Millisecond), budget, bound)
			if spent.Load() > bound {
				t.Errorf("spent %d tokens, more than the budget plus the in-flight bound, %d", spent.Load(), bound)
			}
			// The run pressed on the budget: a fixed window's clients stop at their first refusal,
			// when less than an estimate was left, less the credits of the requests then in flight.
			least := c.limit - estimate - clients*(estimate-minUsage)
			if c.algorithm == "token_bucket" {
				least = c.burst + c.limit*c.run.Microseconds()/1_000_000/2
			}
			if spent.Load() < least || denied.Load() == 0 || fallbacks.Load() == 0 {
				t.Errorf("spent %d tokens with %d refusals and %d fallbacks: the run did not press on the budget (want %d at least)", spent.Load(), denied.Load(), fallbacks.Load(), least)
			}

			// Redis holds exactly the tokens charged.
			st := state()
			switch c.algorithm {
			case "fixed_window": // "window-start count"
				if len(st) != 2 || st[1] != spent.Load() {
					t.Errorf("Redis holds the window %v, want a count of the %d tokens spent", st, spent.Load())
				}
			case "token_bucket": // "tat [frac]": the emission interval is a whole 50 µs, so no fraction
				interval := int64(1_000_000) / c.limit
				if len(st) != 1 || st[0]-tat0 != (spent.Load()-c.burst)*interval {
					t.Errorf("Redis holds the TAT %v, %d µs past the first request's %d, want %d tokens × %d µs", st, st[0]-tat0, tat0, spent.Load()-c.burst, interval)
				}
			}
		})
	}
}

// response returns the headers of the upstream's response to client c's i-th admitted request
// and the cost the plugin must charge for it, and whether that is the fallback. Most carry a usage from minUsage to maxUsage,
// split over the input and output headers; a fifth are charged the fallback: a header missing,
// a value not a whole number, negative, above 10^15 or given twice, or no response from the
// service at all (nil).
func response(c, i int, minUsage, maxUsage, fallback int64) (h map[string][]string, cost int64, fellBack bool) {
	n := int64(c*31 + i*17)
	usage := minUsage + n%(maxUsage-minUsage+1)
	in, out := strconv.FormatInt(usage/3, 10), strconv.FormatInt(usage-usage/3, 10)
	h = map[string][]string{"Content-Type": {"application/json"}, "X-Usage-Input-Tokens": {in}, "X-Usage-Output-Tokens": {out}}
	switch (c*7 + i*3) % 10 {
	case 3:
		bad := [][]string{{"12.5"}, {"-7"}, {"lots"}, {"1000000000000001"}, {out, out}, {"1e2"}}
		h["X-Usage-Output-Tokens"] = bad[(c+i)%len(bad)]
		return h, fallback, true
	case 6:
		delete(h, "X-Usage-Input-Tokens")
		return h, fallback, true
	case 9:
		return nil, fallback, true
	}
	return h, usage, false
}

// TestLogAfterRestart: Kong restarts a plugin server that died, and the requests the dead one
// admitted still reach their log phase, carrying the id that kong.ctx.shared keeps for their
// reservation or lease. The new process must not take such an id for one of its own requests:
// it would settle its own request with the other's response, or give back the lease of a request
// still running.
func TestLogAfterRestart(t *testing.T) {
	bin := build(t, "github.com/diana-gw/diana/kongplugin", "diana")
	remaining := func(res kongResult) string {
		if v := res.Headers["Ratelimit-Remaining"]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	for _, c := range []struct {
		name string
		cfg  map[string]any
		// check runs a third request while the new process's own request is in flight,
		// after the dead process's request and its own have had their log phase (settled,
		// when settle is set) or the dead one's alone (not).
		settle bool
		check  func(kongResult) string
	}{
		{"usage", map[string]any{"algorithm": "fixed_window", "limit": 10000, "window": "3650d",
			"usage_header": "x-usage-total-tokens", "usage_estimate": 50}, true,
			func(res kongResult) string {
				if got := remaining(res); res.Exit || got != "9940" { // 10000 − 10 − 50
					return fmt.Sprintf("remaining %q, want 9940: the new request charged 10 tokens", got)
				}
				return ""
			}},
		{"concurrency", map[string]any{"algorithm": "concurrency", "limit": 1}, false,
			func(res kongResult) string {
				if !res.Exit || res.Status != 429 {
					return fmt.Sprintf("%+v, want refused: the one slot is the running request's", res)
				}
				return ""
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := t.TempDir()
			s := startServerIn(t, prefix, bin)
			old := &kongReq{IP: "192.0.2.80"}
			if res := s.access(s.start(c.cfg, "restart-"+c.name), old); res.Exit {
				t.Fatalf("first request: %+v", res)
			}
			s.kill()
			s = startServerIn(t, prefix, bin)
			id := s.start(c.cfg, "restart-"+c.name)
			r := &kongReq{IP: "192.0.2.80"}
			if res := s.access(id, r); res.Exit {
				t.Fatalf("the new process's first request: %+v", res)
			}
			old.Upstream = map[string][]string{"X-Usage-Total-Tokens": {"5000"}}
			s.event(id, "log", old) // the dead process's: nothing of it is here
			if c.settle {
				r.Upstream = map[string][]string{"X-Usage-Total-Tokens": {"10"}}
				s.event(id, "log", r)
			}
			if msg := c.check(s.access(id, &kongReq{IP: "192.0.2.80"})); msg != "" {
				t.Error(msg)
			}
		})
	}
}
