package algos

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// windowBound is the most units a sliding window in n sub-windows (SlidingWindowSub; n = 1:
// SlidingWindow) admits in a half-open interval of d ≤ window µs, as its doc comment proves.
func windowBound(limit, window, n, d int64) int64 {
	x := n*d - (n-1)*window
	if x <= 0 {
		return limit
	}
	return limit + limit*(x-1)/window
}

// slidingAlg builds the sliding window in n sub-windows as rules do: n = 1 is SlidingWindow.
func slidingAlg(limit, window, n int64) Algorithm {
	if n == 1 {
		return must(NewSlidingWindow(limit, window))
	}
	return must(NewSlidingWindowSub(limit, window, n))
}

func must[A any](a A, err error) A {
	if err != nil {
		panic(err)
	}
	return a
}

// admitted replays arrivals (times in order, one unit each) and returns the log of the units
// admitted.
func admitted(a Algorithm, times []int64) []int64 {
	var st State
	var log []int64
	for _, t := range times {
		if a.Decide(&st, Request{Now: t, Cost: 1}).Allowed {
			log = append(log, t)
		}
	}
	return log
}

// most returns the most entries of log (sorted) in a half-open interval of d µs.
func most(log []int64, d int64) int64 {
	best, lo := 0, 0
	for hi, t := range log {
		for log[lo] <= t-d {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return int64(best)
}

// TestSlidingWindowBound checks the proven bound against the exact count of admissions, on
// random and adversarial arrivals, for SlidingWindow and for sub-windows: no interval of d µs
// holds more than windowBound, and the adversarial traces reach it.
func TestSlidingWindowBound(t *testing.T) {
	const limit, window = 100, Second
	for _, n := range []int64{1, 2, 3, 10, 60} {
		a := slidingAlg(limit, window, n)
		ds := []int64{1, window / 10, window / 2, 603 * Millisecond, window * (n - 1) / n, window*(n-1)/n + 1, window - window/(3*n), window}
		check := func(name string, times []int64) []int64 {
			log := admitted(a, times)
			for _, d := range ds {
				if d < 1 {
					continue // n = 1: (n − 1)/n of a window is empty
				}
				if got, bound := most(log, d), windowBound(limit, window, n, d); got > bound {
					t.Fatalf("N %d, %s: %d units in %d µs, above the bound %d", n, name, got, d, bound)
				}
			}
			return log
		}
		// Random: bursts and quiet stretches, clients at many rates.
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		for trace := range 40 {
			var times []int64
			now := int64(1_700_000_000) * Second
			for range 3000 {
				switch rng.IntN(4) {
				case 0:
					now += rng.Int64N(window)
				case 1:
					now += rng.Int64N(window / 100)
				default:
					now += rng.Int64N(window/(10*limit) + 1)
				}
				times = append(times, now)
			}
			check("random trace "+itoa(int64(trace)), times)
		}
		// Adversarial: limit units in the last µs of a sub-window, then a burst at every µs-spaced
		// offset of the next window, from where its sub-windows start to where they end.
		sub := (window + n - 1) / n // ⌈window/n⌉: the first µs of sub-window 1
		for _, gap := range []int64{window - 1, window - 2, 603*Millisecond - 1, window / 2, window - sub, window - sub + 1, window + 1} {
			var times []int64
			for range limit {
				times = append(times, sub-1)
			}
			for range limit {
				times = append(times, sub-1+gap)
			}
			check("bursts "+itoa(gap)+" µs apart", times)
		}
		// The bound is reached: limit units in the last µs of sub-window 0, then limit − 1 in the
		// last µs before they leave the window.
		var times []int64
		for range 2 * limit {
			times = append(times, sub-1+window-1)
		}
		for i := range limit {
			times[i] = sub - 1
		}
		log := check("the bound", times)
		if got := most(log, window); got != 2*limit-1 || got != windowBound(limit, window, n, window) {
			t.Errorf("N %d: %d units in a window, want the bound %d", n, got, 2*limit-1)
		}
		// Any (n − 1)/n of a window holds at most limit, whatever the order of the bursts.
		if n > 1 {
			d := window * (n - 1) / n
			if got := most(log, d); got > limit {
				t.Errorf("N %d: %d units in %d µs", n, got, d)
			}
		}
	}
	// The weighted estimate's burst at a boundary: 100 per second admits 100 units at 0.999999 s
	// and 60 more 602.999 ms later, 160 in 603 ms (the bound).
	log := admitted(slidingAlg(limit, window, 1), slices.Concat(repeat(window-1, limit), repeat(window-1+603*Millisecond-1, limit)))
	if got := most(log, 603*Millisecond); got != 160 || windowBound(limit, window, 1, 603*Millisecond) != 160 {
		t.Errorf("100 + %d in 603 ms, want 100 + 60", got-100)
	}
	// With 10 sub-windows the same bursts give 100 + 0.
	log = admitted(slidingAlg(limit, window, 10), slices.Concat(repeat(window-1, limit), repeat(window-1+603*Millisecond-1, limit)))
	if got := most(log, 603*Millisecond); got != limit {
		t.Errorf("10 sub-windows: 100 + %d in 603 ms, want 100 + 0", got-100)
	}
}

func repeat(t int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = t
	}
	return out
}
