package algos

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestSlidingWindowSub: 10 per 10 s in 5 sub-windows of 2 s. A full sub-window leaves the window
// in steps, its weight decaying over the sub-window in which it is the oldest.
func TestSlidingWindowSub(t *testing.T) {
	s, err := NewSlidingWindowSub(10, 10*Second, 5)
	if err != nil {
		t.Fatal(err)
	}
	if sc := s.Script(); sc.Name != "sliding_window" || sc.Words != 3 {
		t.Fatalf("script %+v", sc)
	}
	sec, ms := Second, Millisecond
	replay(t, s, 10, []step{
		{9 * sec, 10, true, 0, 11 * sec, 0},             // sub-window 4, [8 s, 10 s): until 20 s
		{10 * sec, 1, false, 0, 10 * sec, 8200 * ms},    // at 18.2 s the window covers 0.9 of it: 9 + 1
		{18200 * ms, 1, true, 0, 11800 * ms, 0},         // ⌈10·0.9⌉ + 0 + 1
		{18200 * ms, 1, false, 0, 11800 * ms, 200 * ms}, // at 18.4 s: 8 + 1 + 1
		{20 * sec, 1, true, 8, 12 * sec, 0},             // sub-window 4 has left: 1 + 1
		{15 * sec, 1, true, 7, 17 * sec, 0},             // a clock gone back counts in sub-window 10
		{15 * sec, 0, true, 7, 17 * sec, 0},             // a peek
		{15 * sec, 11, false, 7, 17 * sec, Never},       // more than the limit
		{45 * sec, 10, true, 0, 11 * sec, 0},            // every sub-window has left
		{50 * sec, 0, true, 0, 6 * sec, 0},
	})
}

// TestSlidingWindowSubOne: with one sub-window, every decision and state is SlidingWindow's.
func TestSlidingWindowSubOne(t *testing.T) {
	for _, c := range []struct{ limit, window int64 }{{7, 3 * Second}, {1, 1}, {3, Day}, {MaxCount, MaxSpan}, {10, 7}} {
		sw, _ := NewSlidingWindow(c.limit, c.window)
		sub, err := NewSlidingWindowSub(c.limit, c.window, 1)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(c.limit), uint64(c.window)))
		var a, b State
		now := int64(1_700_000_000_123_456)
		for i := range 20000 {
			now += rng.Int64N(c.window/2 + 2)
			if rng.IntN(50) == 0 {
				now -= rng.Int64N(c.window + 1)
			}
			r := Request{Now: now, Cost: rng.Int64N(min(c.limit, 4) + 2), Partial: rng.IntN(4) == 0, DryRun: rng.IntN(5) == 0}
			if da, db := sw.Decide(&a, r), sub.Decide(&b, r); da != db || a.W != b.W || len(b.Log) != 0 {
				t.Fatalf("%d per %d µs, step %d %+v:\n  sliding_window %+v %v\n  sub-windows    %+v %v", c.limit, c.window, i, r, da, a.W, db, b.W)
			}
		}
	}
}

// TestSlidingWindowSubRetryExact: RetryAfter is the first µs at which the request fits, and
// ResetAfter the first at which a fresh state would decide the same.
func TestSlidingWindowSubRetryExact(t *testing.T) {
	for _, n := range []int64{2, 3, 7, 60} {
		s, _ := NewSlidingWindowSub(7, 3*Second+1, n)
		var st State
		now := int64(1_700_000_000_123_456)
		for i := range 3000 {
			r := Request{Now: now, Cost: int64(i%4) + 1}
			d := s.Decide(&st, r)
			if !d.Allowed {
				if d.RetryAfter <= 0 {
					t.Fatalf("N %d step %d: %+v", n, i, d)
				}
				for _, at := range []int64{now + d.RetryAfter - 1, now + d.RetryAfter} {
					trial := st
					trial.Log = append([]int64(nil), st.Log...)
					got := s.Decide(&trial, Request{Now: at, Cost: r.Cost}).Allowed
					if want := at == now+d.RetryAfter; got != want {
						t.Fatalf("N %d step %d: retry %d, but at +%d allowed=%v", n, i, d.RetryAfter, at-now, got)
					}
				}
			}
			if d.ResetAfter > 0 {
				peek := func(at int64) int64 {
					trial := st
					trial.Log = append([]int64(nil), st.Log...)
					return s.Decide(&trial, Request{Now: at}).Remaining
				}
				if peek(now+d.ResetAfter) != 7 || peek(now+d.ResetAfter-1) == 7 {
					t.Fatalf("N %d step %d: reset %d is not when the estimate reaches 0", n, i, d.ResetAfter)
				}
			}
			now += int64(i*7919) % (2 * Second)
		}
	}
}

func TestSlidingWindowSubPartial(t *testing.T) {
	s, _ := NewSlidingWindowSub(10, 10*Second, 2)
	var st State
	for i, c := range []struct {
		at, cost, granted, retry int64
	}{
		{0, 4, 4, 0},
		{0, 10, 6, 0},
		{0, 1, 0, 10*Second + Second/2}, // at 10.5 s the window covers 0.9 of sub-window 0: 9 + 1
		{12500 * Millisecond, 10, 5, 0},
		{12500 * Millisecond, 0, 0, 0}, // a peek
	} {
		d := s.Decide(&st, Request{Now: c.at, Cost: c.cost, Partial: true, MaxWait: Hour})
		if d.Granted != c.granted || d.Allowed != (c.granted > 0 || c.cost == 0) || d.RetryAfter != c.retry || d.Delay != 0 {
			t.Errorf("request %d: got %+v, want granted %d retry %d", i, d, c.granted, c.retry)
		}
	}
	if len(st.Log) != 0 {
		t.Errorf("2 sub-windows fit in W, yet Log holds %v", st.Log)
	}
}

func TestSlidingWindowSubParams(t *testing.T) {
	for _, c := range []struct {
		limit, window, n int64
		param            string
	}{
		{0, Second, 2, "limit"},
		{MaxCount + 1, Second, 2, "limit"},
		{1, 0, 2, "window"},
		{1, MaxSpan + 1, 2, "window"},
		{1, Second, 0, "subwindows"},
		{1, Second, -1, "subwindows"},
		{1, Second, MaxSubWindows + 1, "subwindows"},
		{1, 5, 6, "subwindows"}, // sub-windows shorter than 1 µs
	} {
		_, err := NewSlidingWindowSub(c.limit, c.window, c.n)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != c.param || !errors.Is(err, ErrParam) {
			t.Errorf("NewSlidingWindowSub(%d, %d, %d) = %v, want an error about %s", c.limit, c.window, c.n, err, c.param)
		}
	}
	for _, c := range []struct{ limit, window, n int64 }{{MaxCount, MaxSpan, MaxSubWindows}, {MaxCount, MaxSubWindows, MaxSubWindows}, {1, 1, 1}} {
		if _, err := NewSlidingWindowSub(c.limit, c.window, c.n); err != nil {
			t.Errorf("NewSlidingWindowSub(%d, %d, %d) refused: %v", c.limit, c.window, c.n, err)
		}
	}
}

// BenchmarkSlidingWindowSub: the cost of a decision by sub-windows, SlidingWindow the anchor.
func BenchmarkSlidingWindowSub(b *testing.B) {
	for _, n := range []int64{1, 2, 10, 60} {
		a := slidingAlg(1000, Minute, n)
		b.Run("subwindows="+itoa(n), func(b *testing.B) {
			var st State
			now := int64(1_700_000_000) * Second
			for b.Loop() {
				now += 7919
				a.Decide(&st, Request{Now: now, Cost: 1})
			}
		})
	}
}

// TestSlidingWindowSubBatching: batched units are spent within the sub-window of their grant.
func TestSlidingWindowSubBatching(t *testing.T) {
	s, _ := NewSlidingWindowSub(10, Second, 10) // sub-windows of 100 ms
	l, err := s.Batching(0)
	if err != nil || l.MaxAge != 10*Millisecond {
		t.Fatalf("%+v, %v: want MaxAge a tenth of a sub-window", l, err)
	}
	base := int64(1_700_000_000) * Second
	for _, c := range []struct{ at, elapsed, life, left int64 }{
		{95 * Millisecond, 0, 5 * Millisecond, 5 * Millisecond},                          // the sub-window ends at 100 ms
		{50 * Millisecond, 0, 10 * Millisecond, 10 * Millisecond},                        // MaxAge first
		{95 * Millisecond, 196 * Millisecond, 5 * Millisecond, 9 * Millisecond},          // asked at 291 ms: 9 ms to 300 ms
		{95 * Millisecond, 3*Second + 10*Millisecond, 5 * Millisecond, 10 * Millisecond}, // at 3.105 s
	} {
		var st State
		d := s.Decide(&st, Request{Now: base + c.at, Cost: 5, Partial: true})
		if got := l.Life(d); got != c.life {
			t.Errorf("grant at %d µs: Life %d, want %d", c.at, got, c.life)
		}
		if got := l.Left(d, c.elapsed); got != c.left {
			t.Errorf("grant at %d µs, %d µs later: Left %d, want %d", c.at, c.elapsed, got, c.left)
		}
	}
	if _, err := must(NewSlidingWindowSub(10, Second, 7)).Batching(0); err == nil {
		t.Error("sub-windows of 142857.14 µs batched")
	}
}
