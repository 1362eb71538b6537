// Command tinygocheck proves that shared/ (the algorithms, the config reader and the rules
// engine) compiles and runs under TinyGo, as the wasm filter needs it to:
//
//	tinygo build -o bin/tinygocheck.wasm -scheduler=none -target=wasip1 -buildmode=wasi-legacy -no-debug ./build/tinygocheck
//
// It builds every algorithm, decides a burst of requests on a fresh state of each, and exits 1 if
// a decision is implausible (the first request of a burst denied, no request of the burst denied,
// or a request a day later denied), checks a per-IP rule through the rules engine, and reads an
// LLM response's token usage (shared/usage). It runs under plain Go too: go run ./build/tinygocheck.
package main

import (
	"os"

	"github.com/diana-gw/diana/shared/algos"
)

// algorithms lists one configured limit per constructor: adding an algorithm is one line.
// Every limit admits between 1 and 19 units at once and is fully available again after a day.
func algorithms() []algos.Algorithm {
	return []algos.Algorithm{
		must(algos.NewGCRA(10, algos.Second, 5)),
		must(algos.NewBan(must(algos.NewGCRA(1, algos.Second, 2)), algos.Minute)),
		must(algos.NewFixedWindow(5, algos.Second)),
		must(algos.NewSlidingWindow(5, algos.Second)),
		must(algos.NewSlidingLog(5, algos.Second)),
		must(algos.NewConcurrency(3, 10*algos.Second)),
		must(algos.NewLeakyBucket(1, algos.Second, 5, algos.DelayAll)),
		must(algos.NewWarmUp(5, algos.Second, 3*algos.Second)),
	}
}

const burst = 20 // requests at the same instant: more than any limit above admits

func main() {
	failed := false
	for _, a := range algorithms() {
		if !check(a) {
			failed = true
		}
	}
	if !checkRules() || !checkAdaptive() || !checkUsage() {
		failed = true
	}
	if failed {
		os.Exit(1)
	}
	println("tinygocheck: ok")
}

// check decides a burst at one instant, then one request a day later, on a fresh state.
func check(a algos.Algorithm) bool {
	name := a.Script().Name
	if a.Script().Ban > 0 {
		name += "+ban"
	}
	var st algos.State
	const t0 = 1_700_000_000 * algos.Second
	allowed := 0
	var first, last algos.Decision
	for i := 0; i < burst; i++ {
		d := a.Decide(&st, algos.Request{Now: t0, Cost: 1, ID: int64(i + 1)})
		if i == 0 {
			first = d
		}
		last = d
		if d.Allowed {
			allowed++
		}
	}
	later := a.Decide(&st, algos.Request{Now: t0 + algos.Day, Cost: 1, ID: burst + 1})
	println(name, "limit", first.Limit, "allowed", allowed, "of", burst,
		"retry_after_us", last.RetryAfter, "then", later.Allowed)
	ok := first.Allowed && allowed < burst && later.Allowed
	if !ok {
		println("tinygocheck: FAIL:", name)
	}
	return ok
}

// checkAdaptive runs the adaptive limit (which a burst check cannot: its slots are given back
// by releases, not by time) through rounds of 10 ms requests under an SLO of 5 ms, then 1 ms ones:
// it must fall to min_limit, then grow, and a drop must cut it.
func checkAdaptive() bool {
	a, err := algos.NewAdaptive(algos.AdaptiveConfig{Percentile: 90, SLO: 5 * algos.Millisecond, MinLimit: 2, MaxLimit: 64,
		Interval: 100 * algos.Millisecond, Smoothing: 100, ProbeEvery: algos.Minute, ProbeSamples: 10, Backoff: 90})
	if err != nil {
		println("tinygocheck: FAIL:", err.Error())
		return false
	}
	var st algos.State
	now := int64(0)
	round := func(latency int64) {
		n := a.Limit(&st)
		for i := int64(0); i < n; i++ {
			a.Decide(&st, algos.Request{Now: now, Cost: 1})
		}
		for i := int64(0); i < n; i++ {
			a.Decide(&st, algos.Request{Now: now + latency, Cost: 1, Release: true, Latency: latency})
		}
		now += 25 * algos.Millisecond
	}
	for i := 0; i < 20; i++ {
		round(10 * algos.Millisecond)
	}
	slow := a.Limit(&st)
	for i := 0; i < 40; i++ {
		round(algos.Millisecond)
	}
	fast := a.Limit(&st)
	// A dropped request (the backend failed it) cuts the limit to 90%: 57.
	a.Decide(&st, algos.Request{Now: now, Cost: 1})
	a.Decide(&st, algos.Request{Now: now + algos.Millisecond, Cost: 1, Release: true, Latency: algos.Millisecond, Dropped: true})
	dropped := a.Limit(&st)
	println("adaptive limit", slow, "at 10 ms,", fast, "at 1 ms,", dropped, "after a drop")
	ok := slow == 2 && fast == 64 && dropped == 57
	if !ok {
		println("tinygocheck: FAIL: adaptive")
	}
	return ok
}

// must returns a, or exits when its constructor rejected the parameters.
func must[A algos.Algorithm](a A, err error) algos.Algorithm {
	if err != nil {
		println("tinygocheck: FAIL:", err.Error())
		os.Exit(1)
	}
	return a
}
