package redisstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// The counts and durations of TestDiffExtremes: from 1 to MaxCount and from 1 µs to MaxSpan,
// with Kong's day and year and a prime count, whose emission interval is no simple fraction.
var (
	extremeCounts = []int64{1, 7, 100_000, 999_999_999_989, 1_000_000_000_000, algos.MaxCount}
	extremeSpans  = []int64{1, algos.Millisecond, algos.Second, algos.Day, algos.Year, algos.MaxSpan}
)

// TestDiffExtremes replays every algorithm, with every count and duration of the grid its
// constructor accepts, through its Go transition and its Lua twin on a real redis-server. Time
// steps and costs are drawn log-uniformly, so that a trace meets both the tiny intervals of a
// rate of 10^15 per second and the years of a long window. Every combination a constructor
// refuses is refused for a reason it names; the grid checks that none that should work is.
func TestDiffExtremes(t *testing.T) {
	var cases []diffCase
	add := func(name string, alg algos.Algorithm, err error, span, count int64, waits bool) {
		if err != nil {
			return
		}
		c := diffCase{name: name, alg: alg, steps: 600, maxGap: min(2*span, 60*algos.Day), maxCost: count + count/4 + 1,
			partial: true, backwards: true, logScale: true}
		if waits {
			c.maxWait = span
		}
		cases = append(cases, c)
	}
	accepted := map[string]int{}
	for _, n := range extremeCounts {
		for _, w := range extremeSpans {
			tag := fmt.Sprintf("%d per %d µs", n, w)
			a, err := algos.NewFixedWindow(n, w)
			add("fixed_window "+tag, a, err, w, n, true)
			b, err := algos.NewSlidingWindow(n, w)
			add("sliding_window "+tag, b, err, w, n, false)
			for _, burst := range []int64{1, n} {
				g, err := algos.NewGCRA(n, w, burst)
				add(fmt.Sprintf("token_bucket %s, burst %d", tag, burst), g, err, w, burst, true)
				l, err := algos.NewLeakyBucket(n, w, burst-1, burst/2)
				add(fmt.Sprintf("leaky_bucket %s, burst %d", tag, burst-1), l, err, w, burst, false)
			}
			for _, warm := range []int64{algos.Second, algos.Year} {
				u, err := algos.NewWarmUp(n, w, warm)
				add(fmt.Sprintf("warm_up %s, warm-up %d µs", tag, warm), u, err, w, min(n, 1000), true)
			}
			if n <= algos.MaxLogLimit {
				s, err := algos.NewSlidingLog(n, w)
				add("sliding_log "+tag, s, err, w, n, true)
			}
		}
	}
	for _, c := range cases {
		accepted[c.alg.Script().Name]++
	}
	// Every combination of a count up to MaxCount and a span up to MaxSpan works for the window
	// algorithms; the buckets refuse only a refill longer than MaxSpan.
	if want := len(extremeCounts) * len(extremeSpans); accepted["fixed_window"] != want || accepted["sliding_window"] != want {
		t.Fatalf("accepted %v, want every one of the %d combinations for the windows", accepted, want)
	}
	for _, name := range []string{"token_bucket", "leaky_bucket", "warm_up", "sliding_log"} {
		if accepted[name] < 10 {
			t.Fatalf("%s: only %d combinations accepted", name, accepted[name])
		}
	}
	t.Logf("combinations replayed: %v", accepted)
	runDiff(t, cases)
}

// TestDiffExtremesRefused: the combinations left out above are refused only where a state could
// not hold them: a bucket refilling in more than MaxSpan, a warm-up storing more than MaxCount.
func TestDiffExtremesRefused(t *testing.T) {
	for _, n := range extremeCounts {
		for _, w := range extremeSpans {
			if _, err := algos.NewGCRA(n, w, n); err != nil {
				t.Errorf("gcra %d per %d µs with a burst of %d: %v", n, w, n, err)
			}
			if _, err := algos.NewLeakyBucket(n, w, n-1, 0); err != nil {
				t.Errorf("leaky_bucket %d per %d µs with a burst of %d: %v", n, w, n-1, err)
			}
		}
	}
	if _, err := algos.NewGCRA(1, algos.Year, 11); err == nil {
		t.Error("a bucket refilling in 11 years was accepted")
	}
}

// logGap draws a step log-uniformly in [0, max]: as many steps of about a µs as of about max.
func logGap(rng *rand.Rand, max int64) int64 {
	if max <= 0 || rng.IntN(8) == 0 {
		return 0
	}
	bits := 1
	for max>>bits > 0 {
		bits++
	}
	return min(max, rng.Int64N(int64(1)<<rng.IntN(bits)+1))
}
