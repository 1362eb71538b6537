package algos

import (
	"errors"
	"testing"
)

// TestSlidingWindow: 10 per 10 s. A window filled in its last second weighs fully at the
// boundary: after elapsed µs of the next window only about 10·elapsed/10 s more are admitted
// (TestSlidingWindowBound has the burst this still allows).
func TestSlidingWindow(t *testing.T) {
	s, err := NewSlidingWindow(10, 10*Second)
	if err != nil {
		t.Fatal(err)
	}
	if name := s.Script().Name; name != "sliding_window" {
		t.Fatalf("script %q", name)
	}
	sec := Second
	replay(t, s, 10, []step{
		{9 * sec, 10, true, 0, 11 * sec, 0},
		{10 * sec, 1, false, 0, 10 * sec, 1 * sec}, // prev = 10 weighs 10 at the boundary: no burst
		{11 * sec, 1, true, 0, 19 * sec, 0},        // 10·9/10 + 0 + 1 ≤ 10
		{11 * sec, 1, false, 0, 19 * sec, 1 * sec},
		{15 * sec, 1, true, 3, 15 * sec, 0}, // 10·5/10 + 1 + 1 = 7
		{15 * sec, 3, true, 0, 15 * sec, 0}, // 5 in the first half of the window, as 10·5/10
		{15 * sec, 1, false, 0, 15 * sec, 1 * sec},
		{15 * sec, 0, true, 0, 15 * sec, 0},        // a peek
		{15 * sec, 11, false, 0, 15 * sec, Never},  // more than the limit
		{15 * sec, 6, false, 0, 15 * sec, 7 * sec}, // cur = 5 must become prev: at 22 s 5·8/10 + 6 = 10
		{20 * sec, 1, true, 4, 20 * sec, 0},        // 5·10/10 + 0 + 1
		{20*sec + 1, 0, true, 4, 20*sec - 1, 0},
		{45 * sec, 10, true, 0, 15 * sec, 0}, // two idle windows later: both counts reset
		{50 * sec, 1, false, 0, 10 * sec, 1 * sec},
		{50 * sec, 0, true, 0, 10 * sec, 0},
		{65 * sec, 0, true, 10, 0, 0}, // an idle window: free, nothing to reset
	})
}

// TestSlidingWindowRetryExact: RetryAfter is the first µs at which the request fits.
func TestSlidingWindowRetryExact(t *testing.T) {
	s, _ := NewSlidingWindow(7, 3*Second)
	var st State
	now := int64(1_700_000_000_123_456)
	for i := range 2000 {
		r := Request{Now: now, Cost: int64(i%4) + 1}
		d := s.Decide(&st, r)
		if !d.Allowed {
			if d.RetryAfter <= 0 {
				t.Fatalf("step %d: %+v", i, d)
			}
			for _, at := range []int64{now + d.RetryAfter - 1, now + d.RetryAfter} {
				trial := st
				got := s.Decide(&trial, Request{Now: at, Cost: r.Cost}).Allowed
				if want := at == now+d.RetryAfter; got != want {
					t.Fatalf("step %d: retry %d, but at +%d allowed=%v", i, d.RetryAfter, at-now, got)
				}
			}
		}
		now += int64(i*7919) % (2 * Second)
	}
}

// TestSlidingWindowSteady: 10 per 10 s for 1000 s. At half the limit rate every request passes.
// At the limit rate or above, each window after the first admits 9: a full previous window still
// weighs a little until the boundary, so the 10th unit never fits — under saturation the estimate
// admits Limit − 1 per window. A client at exactly 1 per second sees the second request of each
// window denied (at 21 s the estimate is 9·0.9 + 1 + 1 = 10.1, though the last 10 s hold 9).
func TestSlidingWindowSteady(t *testing.T) {
	s, _ := NewSlidingWindow(10, 10*Second)
	for _, c := range []struct {
		every int64
		want  int
	}{
		{Millisecond, 10 + 99*9},
		{Second / 2, 10 + 99*9},
		{Second, 10 + 99*9},
		{2 * Second, 500},
	} {
		var st State
		admitted := 0
		for now := int64(0); now < 1000*Second; now += c.every {
			if s.Decide(&st, Request{Now: now, Cost: 1}).Allowed {
				admitted++
			}
		}
		if admitted != c.want {
			t.Errorf("every %d µs: admitted %d, want %d", c.every, admitted, c.want)
		}
	}
}

// TestSlidingWindowBackwardsClock: a clock that goes back counts in the stored window with
// elapsed 0, where the previous window weighs the most.
func TestSlidingWindowBackwardsClock(t *testing.T) {
	ms := Millisecond
	s, _ := NewSlidingWindow(3, Second)
	st := replay(t, s, 3, []step{
		{1500 * ms, 3, true, 0, 1500 * ms, 0},
		{1200 * ms, 1, false, 0, 1800 * ms, 1_133_334}, // at 2.333334 s: 3·0.666666 + 0 + 1 ≤ 3
		{500 * ms, 1, false, 0, 2500 * ms, 1_833_334},  // an earlier window: nothing reset
		{2500 * ms, 1, true, 0, 1500 * ms, 0},          // 3·0.5 + 0 + 1 ≤ 3
		{1900 * ms, 1, false, 0, 2100 * ms, 766_667},   // elapsed 0: 3 + 1 + 1 > 3
		{1900 * ms, 0, false, 0, 2100 * ms, 433_334},   // even a peek: 3 + 1 > 3
		{1900*ms - Day, 1, false, 0, 2100*ms + Day, 766_667 + Day},
		{2_333_334, 0, true, 0, 1_666_666, 0},
	})
	if st.W != [4]int64{2 * Second, 1, 3} {
		t.Fatalf("state %v", st.W)
	}
}

func TestSlidingWindowPartial(t *testing.T) {
	s, _ := NewSlidingWindow(10, 10*Second)
	var st State
	for i, c := range []struct {
		at, cost, granted, retry int64
	}{
		{0, 4, 4, 0},
		{0, 10, 6, 0},
		{0, 1, 0, 11 * Second}, // cur = 10: only at 11 s does 10·9/10 + 1 fit
		{15 * Second, 10, 5, 0},
		{15 * Second, 0, 0, 0}, // a peek
	} {
		d := s.Decide(&st, Request{Now: c.at, Cost: c.cost, Partial: true, MaxWait: Hour})
		if d.Granted != c.granted || d.Allowed != (c.granted > 0 || c.cost == 0) || d.RetryAfter != c.retry || d.Delay != 0 {
			t.Errorf("request %d: got %+v, want granted %d retry %d", i, d, c.granted, c.retry)
		}
	}
}

func TestSlidingWindowParams(t *testing.T) {
	for _, c := range []struct {
		limit, window int64
		param         string
	}{
		{0, Second, "limit"},
		{-1, Second, "limit"},
		{1, 0, "window"},
		{1, -Second, "window"},
		{1, MaxSpan + 1, "window"},
		{MaxCount + 1, Second, "limit"},
	} {
		_, err := NewSlidingWindow(c.limit, c.window)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != c.param || !errors.Is(err, ErrParam) {
			t.Errorf("NewSlidingWindow(%d, %d) = %v, want an error about %s", c.limit, c.window, err, c.param)
		}
	}
	if _, err := NewSlidingWindow(MaxCount, MaxSpan); err != nil {
		t.Errorf("limit × window = 2^51 refused: %v", err)
	}
}
