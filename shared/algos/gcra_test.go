package algos

import (
	"errors"
	"testing"
)

// step is one request of a golden vector: the request at time at (µs) and the decision expected.
type step struct {
	at, cost  int64
	allowed   bool
	remaining int64
	reset     int64
	retry     int64
}

// replay runs steps against a fresh state and compares Allowed, Remaining, ResetAfter and
// RetryAfter (and Limit, when limit > 0).
func replay(t *testing.T, a Algorithm, limit int64, steps []step) *State {
	t.Helper()
	var st State
	for i, s := range steps {
		r := Request{Now: s.at, Cost: s.cost}
		d := a.Decide(&st, r)
		record(t, a, &st, r, d)
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.ResetAfter != s.reset || d.RetryAfter != s.retry {
			t.Errorf("step %d (t=%d, cost %d): got allowed=%v remaining=%d reset=%d retry=%d, want %v %d %d %d",
				i, s.at, s.cost, d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter, s.allowed, s.remaining, s.reset, s.retry)
		}
		if limit > 0 && d.Limit != limit {
			t.Errorf("step %d: limit %d, want %d", i, d.Limit, limit)
		}
	}
	return &st
}

// TestGCRAThrottled reproduces throttled's TestRateLimit: PerSec(1), MaxBurst 4 (a bucket of 5).
// throttled reports RetryAfter −1 for an admitted request; Diana reports 0.
func TestGCRAThrottled(t *testing.T) {
	g, err := NewGCRA(1, Second, 5)
	if err != nil {
		t.Fatal(err)
	}
	ms := Millisecond
	replay(t, g, 5, []step{
		{0, 6, false, 5, 0, Never}, // never larger than the bucket
		{0, 1, true, 4, 1 * Second, 0},
		{0, 1, true, 3, 2 * Second, 0},
		{0, 1, true, 2, 3 * Second, 0},
		{0, 1, true, 1, 4 * Second, 0},
		{0, 1, true, 0, 5 * Second, 0},
		{0, 1, false, 0, 5 * Second, 1 * Second},
		{3000 * ms, 1, true, 2, 3000 * ms, 0},
		{3100 * ms, 1, true, 1, 3900 * ms, 0},
		{4000 * ms, 1, true, 1, 4000 * ms, 0},
		{8000 * ms, 1, true, 4, 1000 * ms, 0},
		{9500 * ms, 1, true, 4, 1000 * ms, 0},
		{9500 * ms, 0, true, 4, 1000 * ms, 0}, // a peek
		{9500 * ms, 2, true, 2, 3000 * ms, 0},
		{9500 * ms, 5, false, 2, 3000 * ms, 3000 * ms},
	})
}

// TestGCRAExactRate: 3 per second is exactly 3 per second, although 1/3 s is no whole number of
// µs. Saturated by a request every ms for 10,000 s, a bucket of 10 admits 10 + ⌊3·t⌋ by time t:
// 30,009 with the last request at 9,999.999 s (an emission interval rounded down to 333,333 µs
// would admit 30,010).
func TestGCRAExactRate(t *testing.T) {
	g, _ := NewGCRA(3, Second, 10)
	var st State
	admitted := 0
	for now := int64(0); now < 10_000*Second; now += Millisecond {
		if g.Decide(&st, Request{Now: now, Cost: 1}).Allowed {
			admitted++
		}
	}
	if admitted != 30_009 {
		t.Fatalf("admitted %d, want 30009", admitted)
	}
}

func TestGCRAMaxWait(t *testing.T) {
	g, _ := NewGCRA(1, Second, 2)
	var st State
	for i, c := range []struct {
		maxWait int64
		allowed bool
		delay   int64
		retry   int64
	}{
		{0, true, 0, 0},
		{0, true, 0, 0},
		{0, false, 0, Second},          // empty, no wait allowed
		{Second - 1, false, 0, Second}, // would need a full second
		{Second, true, Second, 0},      // waits, and reserves the token
		{Second, false, 0, 2 * Second}, // the next one pays for it
		{2 * Second, true, 2 * Second, 0},
	} {
		r := Request{Now: 0, Cost: 1, MaxWait: c.maxWait}
		d := g.Decide(&st, r)
		record(t, g, &st, r, d) // a golden vector of the delay path
		if d.Allowed != c.allowed || d.Delay != c.delay || d.RetryAfter != c.retry {
			t.Errorf("request %d: got %+v, want allowed=%v delay=%d retry=%d", i, d, c.allowed, c.delay, c.retry)
		}
	}
}

func TestGCRAPartial(t *testing.T) {
	g, _ := NewGCRA(10, Second, 10)
	var st State
	for i, c := range []struct {
		at, cost, granted, retry int64
	}{
		{0, 4, 4, 0},
		{0, 10, 6, 0},                // only 6 left
		{0, 3, 0, 100 * Millisecond}, // none left: one unit in 0.1 s
		{250 * Millisecond, 5, 2, 0}, // 2.5 refilled
		{300 * Millisecond, 1, 1, 0}, // 0.5 left over plus 0.5 refilled
		{300 * Millisecond, 1, 0, 100 * Millisecond},
	} {
		d := g.Decide(&st, Request{Now: c.at, Cost: c.cost, Partial: true})
		if d.Granted != c.granted || d.Allowed != (c.granted > 0) || d.RetryAfter != c.retry {
			t.Errorf("request %d: got %+v, want granted %d retry %d", i, d, c.granted, c.retry)
		}
	}
}

// TestGCRABackwardsClock: a clock that goes back never adds capacity.
func TestGCRABackwardsClock(t *testing.T) {
	g, _ := NewGCRA(1, Second, 3)
	var st State
	now := 100 * Second
	for range 3 {
		if !g.Decide(&st, Request{Now: now, Cost: 1}).Allowed {
			t.Fatal("a full bucket refused")
		}
	}
	for _, back := range []int64{1, Second, Hour, 10 * Day} {
		if d := g.Decide(&st, Request{Now: now - back, Cost: 1}); d.Allowed {
			t.Fatalf("admitted after the clock went back %d µs: %+v", back, d)
		}
	}
	if d := g.Decide(&st, Request{Now: now + Second, Cost: 1}); !d.Allowed {
		t.Fatalf("refused after the refill time: %+v", d)
	}
}

func TestGCRAParams(t *testing.T) {
	for _, c := range []struct {
		rate, period, burst int64
		param               string
	}{
		{0, Second, 1, "rate"},
		{-1, Second, 1, "rate"},
		{1, 0, 1, "period"},
		{1, Second, 0, "burst"},
		{1, Second, MaxCount + 1, "burst"},
		{1, Year, 11, "burst"}, // refills in 11 years
		{MaxCount + 1, Second, 1, "rate"},
		{1, MaxSpan + 1, 1, "period"},
	} {
		_, err := NewGCRA(c.rate, c.period, c.burst)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != c.param || !errors.Is(err, ErrParam) {
			t.Errorf("NewGCRA(%d, %d, %d) = %v, want an error about %s", c.rate, c.period, c.burst, err, c.param)
		}
	}
	for _, c := range [][3]int64{
		{1, Year, 10},                // refills in exactly 10 years
		{MaxCount, Second, MaxCount}, // 10^15 per second
		{1_000_000_000_000, Year, 1_000_000_000_000},
		{999_999_999_989, MaxSpan, 999_999_999_989},
	} {
		if _, err := NewGCRA(c[0], c[1], c[2]); err != nil {
			t.Errorf("NewGCRA%v: %v", c, err)
		}
	}
}
