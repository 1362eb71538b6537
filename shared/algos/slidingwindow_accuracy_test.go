package algos

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

var accuracyClients = flag.Int("accuracy.clients", 20_000, "clients in TestSlidingWindowAccuracy's trace")

// accuracy counts the requests of a trace and those decided wrongly, by definition.
type accuracy struct {
	requests                  int64
	meterWrong                int64    // (a) every request counted: over the limit by the estimate, not by the exact count, or the reverse
	meterDiff                 float64  // (a) the sum over requests of |estimate − exact count| / exact count
	meterFP, meterFN          int64    // (a) clients limited though never over the limit, and over it but never limited
	wrongAllowed, wrongDenied int64    // (b) against the exact count of the units it admitted
	independentWrong          int64    // (c) against an exact limiter run on the same arrivals
	admitted, exact           int64    // units admitted, by it and by the exact limiter
	classReq, classWrong      [3]int64 // (b) by the client's rate: < 50% of the limit, 50–150%, > 150%
}

// TestSlidingWindowAccuracy measures how often the sliding window decides differently from the
// exact count, on a trace like the one Cloudflare measured theirs on: many clients, each sending
// Poisson arrivals at its own rate, the rates Pareto-distributed (α = 1.16, the 80/20 rule; the
// smallest a twentieth of the limit, the largest capped at 20 times it), 100 requests per
// minute, 5 minutes. It prints the figures docs/configuration.md quotes:
//
//	go test ./shared/algos -run TestSlidingWindowAccuracy -v
//
// and checks what they show: sub-windows decide wrongly less often than the weighted estimate.
func TestSlidingWindowAccuracy(t *testing.T) {
	const limit, window, span = 100, Minute, 5 * Minute
	variants := []int64{1, 10, 60}
	acc := make([]accuracy, len(variants))
	exactAlg := must(NewSlidingLog(limit, window))
	var times []int64
	for c := range *accuracyClients {
		rng := rand.New(rand.NewPCG(uint64(c), 2017))
		rate := min(20, 0.05*math.Pow(1-rng.Float64(), -1/1.16)) // in limits per window
		class := 1
		switch {
		case rate < 0.5:
			class = 0
		case rate > 1.5:
			class = 2
		}
		times = times[:0]
		mean := float64(window) / (rate * limit) // µs between arrivals
		for now := int64(1_700_000_000)*Second + rng.Int64N(window); ; {
			now += 1 + int64(rng.ExpFloat64()*mean)
			if now >= 1_700_000_000*Second+span {
				break
			}
			times = append(times, now)
		}
		for i, n := range variants {
			measure(&acc[i], class, slidingAlg(limit, window, n), exactAlg, limit, window, times)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d clients, %d requests\n", *accuracyClients, acc[0].requests)
	fmt.Fprintf(&b, "| subwindows | (a) wrong | mean rate difference | clients limited, never over | clients over, never limited |\n")
	for i, n := range variants {
		a := acc[i]
		fmt.Fprintf(&b, "| %d | %.4f%% | %.2f%% | %d | %d |\n", n, 100*float64(a.meterWrong)/float64(a.requests), 100*a.meterDiff/float64(a.requests), a.meterFP, a.meterFN)
	}
	fmt.Fprintf(&b, "| subwindows | (b) wrong: allowed + denied | (c) vs an exact limiter | admitted vs exact | (b) < 50%% | 50–150%% | > 150%% |\n")
	for i, n := range variants {
		a := acc[i]
		pct := func(x, of int64) string { return fmt.Sprintf("%.4f%%", 100*float64(x)/float64(max(of, 1))) }
		fmt.Fprintf(&b, "| %d | %s = %s + %s | %s | %+.3f%% | %s | %s | %s |\n", n,
			pct(a.wrongAllowed+a.wrongDenied, a.requests), pct(a.wrongAllowed, a.requests), pct(a.wrongDenied, a.requests),
			pct(a.independentWrong, a.requests), 100*float64(a.admitted-a.exact)/float64(a.exact),
			pct(a.classWrong[0], a.classReq[0]), pct(a.classWrong[1], a.classReq[1]), pct(a.classWrong[2], a.classReq[2]))
	}
	t.Log("\n" + b.String())
	for i := 1; i < len(variants); i++ {
		if w, prev := acc[i].wrongAllowed+acc[i].wrongDenied, acc[i-1].wrongAllowed+acc[i-1].wrongDenied; w >= prev {
			t.Errorf("%d sub-windows decided %d requests wrongly, no fewer than %d sub-windows' %d", variants[i], w, variants[i-1], prev)
		}
	}
}

// measure replays one client's arrivals (one unit each) through a, through a meter of the same
// estimate that counts every request, and through the exact limiter, adding to acc.
func measure(acc *accuracy, class int, a, exactAlg Algorithm, limit, window int64, times []int64) {
	var st, meter, ex State
	meterAlg := must(NewSlidingWindowSub(MaxCount, window, 1))
	if sub, ok := a.(*SlidingWindowSub); ok {
		meterAlg = must(NewSlidingWindowSub(MaxCount, window, sub.n))
	}
	var log []int64 // the units a admitted
	var limited, over bool
	lo, all := 0, 0 // the first of log, and of times, still inside the window
	for i, t := range times {
		acc.requests++
		acc.classReq[class]++
		// (a) The meter: every request counted; over when the estimate with it exceeds the limit.
		used := MaxCount - meterAlg.Decide(&meter, Request{Now: t}).Remaining
		meterAlg.Decide(&meter, Request{Now: t, Cost: 1})
		for times[all] <= t-window {
			all++
		}
		real := int64(i-all) + 1
		if (used+1 > limit) != (real > limit) {
			acc.meterWrong++
		}
		acc.meterDiff += math.Abs(float64(used+1-real)) / float64(real)
		limited, over = limited || used+1 > limit, over || real > limit
		// (b) The limiter against the exact count of what it admitted.
		for lo < len(log) && log[lo] <= t-window {
			lo++
		}
		want := int64(len(log)-lo)+1 <= limit
		got := a.Decide(&st, Request{Now: t, Cost: 1}).Allowed
		switch {
		case got && !want:
			acc.wrongAllowed++
		case want && !got:
			acc.wrongDenied++
		}
		if got != want {
			acc.classWrong[class]++
		}
		if got {
			log = append(log, t)
			acc.admitted++
		}
		// (c) An exact limiter run on the same arrivals.
		exact := exactAlg.Decide(&ex, Request{Now: t, Cost: 1}).Allowed
		if exact {
			acc.exact++
		}
		if exact != got {
			acc.independentWrong++
		}
	}
	if limited && !over {
		acc.meterFP++
	}
	if over && !limited {
		acc.meterFN++
	}
}
