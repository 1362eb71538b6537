package algos

import (
	"errors"
	"testing"
)

// TestFixedWindow pins the boundary burst: 3 requests in the last 10 ms of one window and 3 more
// in the first ms of the next pass, 6 in 11 ms against a limit of 3 per second.
func TestFixedWindow(t *testing.T) {
	f, err := NewFixedWindow(3, Second)
	if err != nil {
		t.Fatal(err)
	}
	if name := f.Script().Name; name != "fixed_window" {
		t.Fatalf("script %q", name)
	}
	ms := Millisecond
	replay(t, f, 3, []step{
		{990 * ms, 1, true, 2, 10 * ms, 0},
		{995 * ms, 1, true, 1, 5 * ms, 0},
		{999 * ms, 1, true, 0, 1 * ms, 0},
		{999 * ms, 1, false, 0, 1 * ms, 1 * ms}, // until the next window starts
		{999 * ms, 0, true, 0, 1 * ms, 0},       // a peek
		{999 * ms, 4, false, 0, 1 * ms, Never},  // more than the limit
		{1000 * ms, 1, true, 2, 1000 * ms, 0},   // reset at the boundary
		{1000 * ms, 1, true, 1, 1000 * ms, 0},
		{1001 * ms, 1, true, 0, 999 * ms, 0}, // the 2× burst: 6 in 11 ms
		{1001 * ms, 1, false, 0, 999 * ms, 999 * ms},
		{1500 * ms, 2, false, 0, 500 * ms, 500 * ms},
		{2000 * ms, 2, true, 1, 1000 * ms, 0},
		{2500 * ms, 2, false, 1, 500 * ms, 500 * ms}, // 2 more do not fit: wait for the next window
		{2500 * ms, 1, true, 0, 500 * ms, 0},
		{5000 * ms, 0, true, 3, 0, 0}, // an idle window later: all free, nothing to reset
		{5000 * ms, 3, true, 0, 1000 * ms, 0},
	})
}

// TestFixedWindowBackwardsClock: a clock that goes back into an earlier window counts in the
// stored window, and waits for it.
func TestFixedWindowBackwardsClock(t *testing.T) {
	ms := Millisecond
	f, _ := NewFixedWindow(2, Second)
	st := replay(t, f, 2, []step{
		{1500 * ms, 2, true, 0, 500 * ms, 0},
		{999 * ms, 1, false, 0, 1001 * ms, 1001 * ms}, // the count is not reset
		{1200 * ms, 1, false, 0, 800 * ms, 800 * ms},
		{1500*ms - Day, 1, false, 0, 500*ms + Day, 500*ms + Day},
	})
	if st.W != [4]int64{Second, 2} {
		t.Fatalf("state %v", st.W)
	}

	g, _ := NewFixedWindow(3, Second)
	var s State
	for i, c := range []struct {
		at, maxWait int64
		allowed     bool
		delay       int64
		retry       int64
		remaining   int64
	}{
		{1500 * ms, 0, true, 0, 0, 2},
		{999 * ms, 0, false, 0, 1 * ms, 2}, // room in the stored window, which starts in 1 ms
		{999 * ms, 1 * ms, true, 1 * ms, 0, 1},
		{1500 * ms, 0, true, 0, 0, 0},
		{999 * ms, Second, false, 0, 1001 * ms, 0}, // the stored window is full
		{999 * ms, 1001 * ms, true, 1001 * ms, 0, 2},
	} {
		r := Request{Now: c.at, Cost: 1, MaxWait: c.maxWait}
		d := g.Decide(&s, r)
		record(t, g, &s, r, d) // a golden vector of the delay path
		if d.Allowed != c.allowed || d.Delay != c.delay || d.RetryAfter != c.retry || d.Remaining != c.remaining {
			t.Errorf("request %d: got %+v, want allowed=%v delay=%d retry=%d remaining=%d", i, d, c.allowed, c.delay, c.retry, c.remaining)
		}
	}
}

// TestFixedWindowMaxWait: a request that fits in the next window waits for it and counts there;
// so does every later request, even one made before that window starts.
func TestFixedWindowMaxWait(t *testing.T) {
	ms := Millisecond
	f, _ := NewFixedWindow(2, Second)
	var st State
	for i, c := range []struct {
		at, cost, maxWait int64
		allowed           bool
		delay             int64
		retry             int64
		remaining, reset  int64
	}{
		{900 * ms, 1, 0, true, 0, 0, 1, 100 * ms},
		{900 * ms, 1, 0, true, 0, 0, 0, 100 * ms},
		{900 * ms, 1, 99 * ms, false, 0, 100 * ms, 0, 100 * ms},
		{900 * ms, 1, 100 * ms, true, 100 * ms, 0, 1, 1100 * ms}, // counted in [1 s, 2 s)
		{950 * ms, 1, 0, false, 0, 50 * ms, 1, 1050 * ms},        // not at once: 3 in [0, 1 s)
		{950 * ms, 1, 50 * ms, true, 50 * ms, 0, 0, 1050 * ms},
		{950 * ms, 1, 1050 * ms, true, 1050 * ms, 0, 1, 2050 * ms}, // two windows on
		{1000 * ms, 3, Hour, false, 0, Never, 1, 2000 * ms},
		{1000 * ms, 1, 0, false, 0, 1000 * ms, 1, 2000 * ms},
		{2000 * ms, 1, 0, true, 0, 0, 0, 1000 * ms},
		{2000 * ms, 2, 0, false, 0, 1000 * ms, 0, 1000 * ms},
		{2000 * ms, 2, 1000 * ms, true, 1000 * ms, 0, 0, 2000 * ms},
	} {
		r := Request{Now: c.at, Cost: c.cost, MaxWait: c.maxWait}
		d := f.Decide(&st, r)
		record(t, f, &st, r, d) // a golden vector of the delay path
		if d.Allowed != c.allowed || d.Delay != c.delay || d.RetryAfter != c.retry || d.Remaining != c.remaining || d.ResetAfter != c.reset {
			t.Errorf("request %d: got %+v, want allowed=%v delay=%d retry=%d remaining=%d reset=%d",
				i, d, c.allowed, c.delay, c.retry, c.remaining, c.reset)
		}
		if d.TTL != d.ResetAfter {
			t.Errorf("request %d: TTL %d, reset %d", i, d.TTL, d.ResetAfter)
		}
	}
}

func TestFixedWindowPartial(t *testing.T) {
	ms := Millisecond
	f, _ := NewFixedWindow(5, Second)
	var st State
	for i, c := range []struct {
		at, cost, granted, retry int64
	}{
		{0, 3, 3, 0},
		{100 * ms, 4, 2, 0},
		{200 * ms, 1, 0, 800 * ms},
		{1000 * ms, 7, 5, 0}, // min(7, 5)
		{1000 * ms, 0, 0, 0}, // a peek
	} {
		d := f.Decide(&st, Request{Now: c.at, Cost: c.cost, Partial: true})
		if d.Granted != c.granted || d.Allowed != (c.granted > 0 || c.cost == 0) || d.RetryAfter != c.retry {
			t.Errorf("request %d: got %+v, want granted %d retry %d", i, d, c.granted, c.retry)
		}
	}
	if d := f.Decide(&State{}, Request{Now: 0, Cost: 6}); d.Allowed || d.RetryAfter != Never {
		t.Errorf("cost 6 of 5 without partial: %+v", d)
	}
}

// TestFixedWindowEpoch: windows are aligned to the epoch of Now, negative times included.
func TestFixedWindowEpoch(t *testing.T) {
	f, _ := NewFixedWindow(1, 10)
	replay(t, f, 1, []step{
		{-15, 1, true, 0, 5, 0}, // window [-20, -10)
		{-11, 1, false, 0, 1, 1},
		{-10, 1, true, 0, 10, 0},
		{7, 1, true, 0, 3, 0},
		{9, 1, false, 0, 1, 1},
	})
}

func TestFixedWindowParams(t *testing.T) {
	for _, c := range []struct {
		limit, window int64
		param         string
	}{
		{0, Second, "limit"},
		{-1, Second, "limit"},
		{1, 0, "window"},
		{1, -Second, "window"},
		{MaxCount + 1, Second, "limit"},
		{1, MaxSpan + 1, "window"},
	} {
		_, err := NewFixedWindow(c.limit, c.window)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != c.param || !errors.Is(err, ErrParam) {
			t.Errorf("NewFixedWindow(%d, %d) = %v, want an error about %s", c.limit, c.window, err, c.param)
		}
	}
	if _, err := NewFixedWindow(MaxCount, MaxSpan); err != nil {
		t.Errorf("largest parameters refused: %v", err)
	}
}
