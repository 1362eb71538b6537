package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/diana-gw/diana/bench"
)

// fixture returns results with every figure the page reads: each limiter's figures are v and
// 2v over two runs, and every x and ratio is x.
func fixture(x float64) *results {
	r := &results{
		Machine:  bench.Machine{CPU: "Test CPU", Cores: 2, Go: "go1.99", Load: "0.10 0.20 0.30"},
		Date:     "2001-02-03 04:05 UTC",
		ProxyCmd: "make bench-proxy", MemoryCmd: "go test memory", RedisCmd: "go test redis", RLSCmd: "go test rls", UsageCmd: "go test usage",
		Memory: benchRuns{}, Redis: benchRuns{}, RLS: benchRuns{}, Usage: benchRuns{},
	}
	one := bench.Spread{Median: 1, Min: 1, Max: 1}
	ratio := bench.Spread{Median: x, Min: x * 0.9, Max: x * 1.1}
	r.Proxy = bench.ProxyReport{Driver: "wrk -t 2 -c 32", Seconds: 3, Rounds: 7, Anchor: "plain", Targets: []bench.ProxyTarget{
		{Name: "plain", About: "the anchor", RPS: 1000, P50: 900, P99: 9000, CPU: 150, Driver: 0.2, RPSRatio: one, P99Ratio: one, CPURatio: one},
		{Name: "dianad", About: "three rules", RPS: 1000 * x, P50: 900, P99: 9000 / x, CPU: 150 / x, Driver: 0.25, RPSRatio: ratio, P99Ratio: bench.Spread{Median: 1 / x, Min: 1 / x, Max: 1 / x}, CPURatio: ratio},
	}}
	set := func(runs benchRuns, name, unit string, v float64) {
		if runs[name] == nil {
			runs[name] = map[string][]float64{}
		}
		runs[name][unit] = []float64{v, 2 * v}
	}
	for _, mode := range []string{"serial", "parallel"} {
		for _, p := range memoryPeers {
			set(r.Memory, "BenchmarkMemory/"+mode, "ns/op:"+p.key, 100)
			set(r.Memory, "BenchmarkMemory/"+mode, "allocs/op:"+p.key, 0.5)
			set(r.Memory, "BenchmarkMemory/"+mode, "x:"+p.key, x*2/3) // the median of x·2/3 and x·4/3 is x
		}
	}
	for _, g := range redisGs {
		name := fmt.Sprintf("BenchmarkRedis/g=%d", g)
		for _, p := range redisPeers {
			set(r.Redis, name, "µs/op:"+p.key, 30)
			set(r.Redis, name, "redis-µs/op:"+p.key, 10)
			set(r.Redis, name, "x:"+p.key, x*2/3)
		}
	}
	for _, c := range rlsClients {
		name := fmt.Sprintf("BenchmarkRLS/clients-%d", c)
		for _, unit := range []string{"diana-req/s", "batched-req/s", "ratelimit-req/s", "empty-req/s", "diana-cpu-µs/req", "batched-cpu-µs/req",
			"ratelimit-cpu-µs/req", "empty-cpu-µs/req", "diana-redis-cpu-µs/req", "batched-redis-cpu-µs/req", "ratelimit-redis-cpu-µs/req",
			"diana-p99-µs", "ratelimit-p99-µs", "diana/ratelimit-cpu"} {
			set(r.RLS, name, unit, 1000)
		}
		set(r.RLS, name, "diana/ratelimit-req/s", x*2/3)
		set(r.RLS, name, "batched/ratelimit-req/s", 1) // the median of 1 and 2
		set(r.RLS, name, "empty/ratelimit-req/s", 2)
	}
	r.MultiCmd, r.RLSMultiCmd, r.Multi, r.RLSMulti = "go test multi", "go test rlsmulti", benchRuns{}, benchRuns{}
	for _, g := range multiGs {
		name := fmt.Sprintf("BenchmarkMultiRule/g=%d", g)
		for _, k := range []string{"diana", "diana-1", "redis_rate"} {
			set(r.Multi, name, "µs/op:"+k, 30)
			set(r.Multi, name, "redis-µs/op:"+k, 10)
			set(r.Multi, name, "redis-calls/op:"+k, 1)
		}
		set(r.Multi, name, "x:redis_rate", x*2/3)
		set(r.Multi, name, "redis-cpu/one-rule", 2/x*2/3)
	}
	for _, c := range rlsClients {
		name := fmt.Sprintf("BenchmarkRLSMulti/clients-%d", c)
		for _, k := range []string{"diana", "check", "diana-1", "ratelimit"} {
			for _, unit := range []string{"-req/s", "-cpu-µs/req", "-redis-cpu-µs/req", "-redis-calls/req", "-p99-µs"} {
				set(r.RLSMulti, name, k+unit, 1000)
			}
		}
		set(r.RLSMulti, name, "diana/ratelimit-req/s", x*2/3)
		set(r.RLSMulti, name, "check/ratelimit-req/s", x*2/3)
		set(r.RLSMulti, name, "diana/diana-1-redis-cpu", 2/x*2/3)
	}
	for _, c := range []struct {
		key                string
		ns, mbs, b, allocs float64
	}{{"plain", 4000, 200000, 6400, 40}, {"usage", 3000000 * x, 300 / x, 9600, 70}, {"openai", 3100000 * x, 290 / x, 9700, 70},
		{"openai-responses", 3000000 * x, 300 / x, 9600, 70}, {"anthropic", 4000000 * x, 250 / x, 9600, 70},
		{"gemini", 3500000 * x, 280 / x, 9600, 70}, {"ollama", 2500000 * x, 400 / x, 9600, 70}} {
		name := "BenchmarkUsageStream/" + c.key
		set(r.Usage, name, "ns/op", c.ns)
		set(r.Usage, name, "MB/s", c.mbs)
		set(r.Usage, name, "B/op", c.b)
		set(r.Usage, name, "allocs/op", c.allocs)
	}
	rlqsFixture(r)
	return r
}

// The page states each figure with its anchor, the commands and the machine, and each target of
// issue 19 as met or not from the figures: all met when Diana is 2× its anchors, none at 0.5×.
func TestPage(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want []string
	}{
		{2, []string{"at 16 clients 2.00 × (met; batched 1.50 ×; the ceiling 3.00 ×); at 64 clients 2.00 × (met; batched 1.50 ×; the ceiling 3.00 ×)", "requests/s 2.00 × (met), p99 0.50 × (met)", "serial, x = 2.00 against the closest peer, x/time/rate + `sync.Map` (met)",
			"at one, x = 2.00 against the closest, redis_rate (met); at 16, x = 2.00 against redis_rate (met); at 64, x = 2.00 against redis_rate (met). Against INCRBY + EXPIRE, two plain commands that no library wraps, x = 2.00, 2.00 and 2.00",
			"at 16 clients dianad 2.00 × (met), check 2.00 × (met); at 64 clients dianad 2.00 × (met), check 2.00 × (met); Redis CPU per request at most 1.3 × the one-rule request's, at most 1.00 × through dianad (met); in process, x against redis_rate × 3 2.00 at 1 goroutine, 2.00 at 16, 2.00 at 64",
			"| 16 | 2.00 [1.33–2.67] | 45.0 µs, 45.0 µs, 45.0 µs | 15.0 µs, 15.0 µs, 15.0 µs | 1.00 [0.67–1.33] | 1.50, 1.50, 1.50 |",
			"| 64 | 1,500, 1,500, 1,500, 1,500 | 2.00 [1.33–2.67] | 2.00 [1.33–2.67] | 1,500 µs, 1,500 µs, 1,500 µs |"}},
		{0.5, []string{"at 16 clients 0.50 × (not met; batched 1.50 ×; the ceiling 3.00 ×)", "requests/s 0.50 × (not met), p99 2.00 × (not met)", "parallel, x = 0.50 against the closest peer, x/time/rate + `sync.Map` (not met)", "at 64, x = 0.50 against redis_rate (not met)",
			"at 16 clients dianad 0.50 × (not met), check 0.50 × (not met)", "at most 4.00 × through dianad (not met)"}},
	} {
		md, charts, err := page(fixture(tc.x))
		if err != nil {
			t.Fatal(err)
		}
		want := append(tc.want,
			"Test CPU, 2 cores, go1.99, load average 0.10 0.20 0.30", "2001-02-03 04:05 UTC",
			"Measured by `make bench-proxy`", "Measured by `go test memory`", "Measured by `go test redis`", "Measured by `go test rls`",
			"| dianad: three rules | "+num(1000*tc.x)+" | 900 µs |", "wrk -t 2 -c 32", "| serial: time per decision | 150 ns |",
			"| 64 | 45.0 µs (15.0 µs) |", "| 16 | 1,500, 1,500, 1,500, 1,500 |",
			"### Auto-pipelining: go-redis's against the coalescer", "[autopipeline.md](autopipeline.md)",
			"### The RLS messages without reflection, and fewer allocations (issue 26)",
			"Measured by `go test usage`", "| plain: a static cost | 6.00 µs [4.00 µs–8.00 µs] | 300,000 MB/s | 9,600 B | 60 |",
			"| usage: a field path of the stream (body) | "+duration(4.5e6*tc.x)+" ["+duration(3e6*tc.x)+"–"+duration(6e6*tc.x)+"] | "+num(450/tc.x)+" MB/s | 14,400 B | 105 |",
			"costs "+duration(4.5e6*tc.x-6000)+" per request more than the static cost (the medians' difference), 4,800 bytes and 45 allocations more")
		flat := strings.Join(strings.Fields(md), " ") // the prose is wrapped
		for _, w := range want {
			if !strings.Contains(flat, w) {
				t.Errorf("x = %v: the page lacks %q", tc.x, w)
			}
		}
		if t.Failed() {
			t.Logf("the page:\n%s", md)
		}
		names, _, err := quotes(md)
		if err != nil || strings.Join(names, " ") != "proxy memory redis rls multi rlqs rlqs-vs-rls usage" {
			t.Errorf("quotes %v, %v: want proxy, memory, redis, rls, multi, rlqs, rlqs-vs-rls and usage", names, err)
		}
		if len(charts) != 3 {
			t.Errorf("%d charts, want 3", len(charts))
		}
	}
}

// A figure missing from the runs is an error naming it, never an empty cell.
func TestPageMissingFigure(t *testing.T) {
	r := fixture(1)
	delete(r.Redis["BenchmarkRedis/g=16"], "x:ulule")
	if _, _, err := page(r); err == nil || !strings.Contains(err.Error(), "BenchmarkRedis/g=16: no x:ulule") {
		t.Errorf("error %v, want one naming BenchmarkRedis/g=16 and x:ulule", err)
	}
	r = fixture(1)
	delete(r.Usage["BenchmarkUsageStream/usage"], "B/op")
	if _, _, err := page(r); err == nil || !strings.Contains(err.Error(), "BenchmarkUsageStream/usage: no B/op") {
		t.Errorf("error %v, want one naming BenchmarkUsageStream/usage and B/op", err)
	}
	r = fixture(1)
	delete(r.RLSMulti["BenchmarkRLSMulti/clients-64"], "check-p99-µs")
	if _, _, err := page(r); err == nil || !strings.Contains(err.Error(), "BenchmarkRLSMulti/clients-64: no check-p99-µs") {
		t.Errorf("error %v, want one naming BenchmarkRLSMulti/clients-64 and check-p99-µs", err)
	}
	r = fixture(1)
	r.Proxy.Targets = r.Proxy.Targets[:1]
	if _, _, err := page(r); err == nil || !strings.Contains(err.Error(), "dianad") {
		t.Errorf("error %v, want one naming dianad", err)
	}
}

func TestWrap(t *testing.T) {
	in := "- **Machine:** one two three four\nshort\n| a long table row stays whole |\nalpha beta gamma delta epsilon\nMeasured by `a long command line`:"
	want := "- **Machine:** one\n  two three four\nshort\n| a long table row stays whole |\nalpha beta gamma\ndelta epsilon\nMeasured by `a long command line`:"
	if got := wrap(in, 18); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
