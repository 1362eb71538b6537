package algos

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func newLog(t *testing.T, limit, window int64) *SlidingLog {
	t.Helper()
	s, err := NewSlidingLog(limit, window)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSlidingLogBoundary: no burst at a window boundary. A fixed window of 3 per second admits 3
// at 0.9 s and 3 more at 1.0 s; the sliding log admits the next unit only when one of the three
// is a full second old.
func TestSlidingLogBoundary(t *testing.T) {
	ms := Millisecond
	st := replay(t, newLog(t, 3, Second), 3, []step{
		{900 * ms, 1, true, 2, Second, 0},
		{900 * ms, 1, true, 1, Second, 0},
		{950 * ms, 1, true, 0, Second, 0},
		{1000 * ms, 1, false, 0, 950 * ms, 900 * ms}, // the boundary of a fixed window
		{1100 * ms, 3, false, 0, 850 * ms, 850 * ms}, // needs the 3rd oldest to leave
		{1_899_999, 1, false, 0, 50_001, 1},
		{1900 * ms, 2, true, 0, Second, 0}, // both 0.9 s entries left
		{1900 * ms, 0, true, 0, Second, 0}, // a peek
		{1950 * ms, 1, true, 0, Second, 0},
	})
	if want := []int64{1900 * ms, 1900 * ms, 1950 * ms}; !slices.Equal(st.Log, want) {
		t.Errorf("log %v, want %v", st.Log, want)
	}
}

// TestSlidingLogExpiry: the entries leave the window one by one, each exactly Window after it
// was recorded.
func TestSlidingLogExpiry(t *testing.T) {
	st := replay(t, newLog(t, 3, 1000), 3, []step{
		{0, 1, true, 2, 1000, 0},
		{100, 1, true, 1, 1000, 0},
		{200, 1, true, 0, 1000, 0},
		{999, 1, false, 0, 201, 1},
		{1000, 0, true, 1, 200, 0}, // 0 has left: a peek sees it
		{1000, 1, true, 0, 1000, 0},
		{1050, 1, false, 0, 950, 50},
		{1100, 1, true, 0, 1000, 0},
		{1200, 2, false, 1, 900, 800}, // 200 left; 2 units need 1000 to leave too
		{1999, 1, true, 0, 1000, 0},
		{2100, 0, true, 2, 899, 0}, // 1000 and 1100 left
		{2999, 0, true, 3, 0, 0},   // all left: an empty log
	})
	// Peeks drop nothing: the old entries go when units are next recorded.
	if want := []int64{1000, 1100, 1999}; !slices.Equal(st.Log, want) {
		t.Errorf("log %v, want %v", st.Log, want)
	}
}

// TestSlidingLogCost: a request of cost n records n entries and waits for the (len+n−limit)-th
// oldest; cost > limit is never admitted.
func TestSlidingLogCost(t *testing.T) {
	ms := Millisecond
	st := replay(t, newLog(t, 5, Second), 5, []step{
		{0, 6, false, 5, 0, Never},
		{0, 3, true, 2, Second, 0},
		{400 * ms, 2, true, 0, Second, 0},
		{500 * ms, 6, false, 0, 900 * ms, Never},
		{500 * ms, 0, true, 0, 900 * ms, 0},
		{500 * ms, 1, false, 0, 900 * ms, 500 * ms},
		{500 * ms, 4, false, 0, 900 * ms, 900 * ms}, // the 4th oldest is at 0.4 s
		{Second, 3, true, 0, Second, 0},
	})
	if want := []int64{400 * ms, 400 * ms, Second, Second, Second}; !slices.Equal(st.Log, want) {
		t.Errorf("log %v, want %v", st.Log, want)
	}
}

func TestSlidingLogPartial(t *testing.T) {
	s := newLog(t, 5, Second)
	var st State
	ms := Millisecond
	for i, c := range []struct {
		at, cost, granted, retry int64
	}{
		{0, 3, 3, 0},
		{100 * ms, 4, 2, 0},
		{200 * ms, 1, 0, 800 * ms},
		{200 * ms, 9, 0, 800 * ms}, // more than the limit: still a partial grant, later
		{Second, 10, 3, 0},         // the three at 0 left
		{Second, 0, 0, 0},          // a peek
	} {
		d := s.Decide(&st, Request{Now: c.at, Cost: c.cost, Partial: true})
		if d.Granted != c.granted || d.Allowed != (c.granted > 0 || c.cost == 0) || d.RetryAfter != c.retry {
			t.Errorf("request %d: got %+v, want granted %d retry %d", i, d, c.granted, c.retry)
		}
	}
	if want := []int64{100 * ms, 100 * ms, Second, Second, Second}; !slices.Equal(st.Log, want) {
		t.Errorf("log %v, want %v", st.Log, want)
	}
}

// TestSlidingLogMaxWait: a waiting request is recorded at its admission time and counts against
// the requests after it; a wait is at most one window.
func TestSlidingLogMaxWait(t *testing.T) {
	s := newLog(t, 2, 1000)
	var st State
	for i, c := range []struct {
		at, cost, maxWait int64
		allowed           bool
		delay, retry      int64
		log               []int64
	}{
		{0, 1, 0, true, 0, 0, []int64{0}},
		{400, 1, 0, true, 0, 0, []int64{0, 400}},
		{500, 1, 0, false, 0, 500, nil},
		{500, 1, 499, false, 0, 500, nil},
		{500, 1, 500, true, 500, 0, []int64{0, 400, 1000}},
		{500, 1, 5000, true, 900, 0, []int64{0, 400, 1000, 1400}},
		{500, 1, 5000, false, 0, 1500, nil}, // 1.5 windows away: waits no longer than a window
		{500, 0, 0, false, 0, 900, nil},     // even a peek: 4 units reserved for 2
		{1000, 1, 0, false, 0, 1000, nil},
		{2000, 1, 0, true, 0, 0, []int64{1400, 2000}},
	} {
		before := slices.Clone(st.Log)
		r := Request{Now: c.at, Cost: c.cost, MaxWait: c.maxWait}
		d := s.Decide(&st, r)
		record(t, s, &st, r, d) // a golden vector of the delay path
		if d.Allowed != c.allowed || d.Delay != c.delay || d.RetryAfter != c.retry {
			t.Errorf("request %d: got %+v, want allowed=%v delay=%d retry=%d", i, d, c.allowed, c.delay, c.retry)
		}
		want := c.log
		if want == nil {
			want = before
		}
		if !slices.Equal(st.Log, want) {
			t.Errorf("request %d: log %v, want %v", i, st.Log, want)
		}
	}
}

// TestSlidingLogBackwardsClock: a clock that goes back adds no capacity; units are recorded no
// earlier than the newest entry; a peek at a later time drops nothing that an earlier clock
// could then reuse.
func TestSlidingLogBackwardsClock(t *testing.T) {
	s := newLog(t, 3, 10*Second)
	var st State
	check := func(at, cost int64, allowed bool, retry int64, log ...int64) {
		t.Helper()
		d := s.Decide(&st, Request{Now: at, Cost: cost})
		if d.Allowed != allowed || d.RetryAfter != retry {
			t.Errorf("t=%d cost %d: got %+v, want allowed=%v retry=%d", at, cost, d, allowed, retry)
		}
		if !slices.Equal(st.Log, log) {
			t.Errorf("t=%d cost %d: log %v, want %v", at, cost, st.Log, log)
		}
	}
	check(100*Second, 2, true, 0, 100*Second, 100*Second)
	check(50*Second, 1, true, 0, 100*Second, 100*Second, 100*Second) // recorded at 100 s, not 50 s
	for _, back := range []int64{1, Second, Hour, 10 * Day} {
		check(100*Second-back, 1, false, 10*Second+back, 100*Second, 100*Second, 100*Second)
	}
	check(110*Second, 1, true, 0, 110*Second)

	// 2 per 100 µs: a peek at 601 sees 500 gone, but a request whose clock says 520 still counts
	// it, so the two units at 500 and 560 keep the window (460, 560] full.
	s = newLog(t, 2, 100)
	st = State{}
	check(500, 1, true, 0, 500)
	check(560, 1, true, 0, 500, 560)
	check(601, 0, true, 0, 500, 560)
	check(520, 1, false, 80, 500, 560)
	check(601, 1, true, 0, 560, 601)
}

// TestSlidingLogExact replays random traces and checks every decision by brute force over all
// the units ever recorded: no window (s − W, s] holds more than the limit, denials and waits
// are exactly as long as needed, and the log is the recorded entries newer than the latest
// admission's now − W.
func TestSlidingLogExact(t *testing.T) {
	for ci, c := range []struct {
		limit, window, maxGap, maxCost, maxWait int64
		partial, backwards                      bool
	}{
		{1, 1000, 700, 2, 0, false, false},
		{3, 1000, 400, 4, 0, false, false},
		{5, 997, 300, 7, 2000, true, false},
		{10, 10_000, 3000, 12, 0, true, false},
		{4, 1000, 500, 5, 1500, true, true},
		{7, 5000, 2000, 3, 0, false, true},
	} {
		s := newLog(t, c.limit, c.window)
		rng := rand.New(rand.NewPCG(uint64(ci), 7))
		var st State
		var rec []int64 // every unit recorded, in order
		now, maxNow, dropAt := int64(1e9), int64(1e9), int64(-1<<62)
		// fits: the request of n units, judged at s ≥ every now seen, fits.
		fits := func(at, n int64) bool {
			live := int64(0)
			for _, e := range rec {
				if e > at-c.window {
					live++
				}
			}
			return live+n <= c.limit
		}
		for i := range 5000 {
			now += rng.Int64N(c.maxGap + 1)
			if c.backwards && rng.IntN(30) == 0 {
				now -= rng.Int64N(3 * c.window)
			}
			forward := now >= maxNow
			maxNow = max(maxNow, now)
			r := Request{Now: now, Cost: rng.Int64N(c.maxCost + 1), Partial: c.partial && rng.IntN(3) == 0}
			if c.maxWait > 0 && rng.IntN(3) == 0 {
				r.MaxWait = rng.Int64N(c.maxWait + 1)
			}
			before := len(st.Log)
			d := s.Decide(&st, r)
			if d.Allowed && d.Granted > 0 {
				dropAt = max(dropAt, now-c.window)
				tail := st.Log[len(st.Log)-int(d.Granted):]
				rec = append(rec, tail...)
				t0 := tail[0]
				if t0 < now+d.Delay || (before > 0 && len(st.Log) == 0) {
					t.Fatalf("case %d step %d: recorded at %d, before now+delay %d", ci, i, t0, now+d.Delay)
				}
				n := 0
				for _, e := range rec {
					if e > t0-c.window && e <= t0 {
						n++
					}
				}
				if int64(n) > c.limit {
					t.Fatalf("case %d step %d: %d units in (%d, %d]", ci, i, n, t0-c.window, t0)
				}
			}
			if !slices.IsSorted(st.Log) || int64(len(st.Log)) > 2*c.limit {
				t.Fatalf("case %d step %d: log %v", ci, i, st.Log)
			}
			var want []int64
			for _, e := range rec {
				if e > dropAt {
					want = append(want, e)
				}
			}
			if !slices.Equal(st.Log, want) {
				t.Fatalf("case %d step %d: log %v, want %v", ci, i, st.Log, want)
			}
			if !forward || d.Granted < r.Cost && d.Allowed {
				continue // a backwards clock judges against entries a later now dropped
			}
			n := r.Cost
			switch {
			case n > c.limit && !r.Partial:
				if d.Allowed || d.RetryAfter != Never {
					t.Fatalf("case %d step %d: %+v for cost %d", ci, i, d, n)
				}
			case r.Partial && !d.Allowed && n > 0:
				if fits(now, 1) || !fits(now+d.RetryAfter, 1) || fits(now+d.RetryAfter-1, 1) {
					t.Fatalf("case %d step %d: partial retry %d not exact", ci, i, d.RetryAfter)
				}
			case d.Allowed && d.Delay == 0:
				// fits: already recorded, so check the units before it
				rec = rec[:len(rec)-int(d.Granted)]
				ok := fits(now, n)
				rec = append(rec, st.Log[len(st.Log)-int(d.Granted):]...)
				if !ok {
					t.Fatalf("case %d step %d: admitted %+v, not fitting", ci, i, d)
				}
			default:
				wait := d.Delay + d.RetryAfter
				if d.Allowed {
					rec = rec[:len(rec)-int(d.Granted)]
				}
				ok := !fits(now, n) && fits(now+wait, n) && !fits(now+wait-1, n)
				if d.Allowed {
					rec = append(rec, st.Log[len(st.Log)-int(d.Granted):]...)
				}
				if !ok {
					t.Fatalf("case %d step %d: wait %d not exact: %+v", ci, i, wait, d)
				}
			}
		}
	}
}

// TestSlidingLogNoAlloc: under a steady load the log reuses its backing array.
func TestSlidingLogNoAlloc(t *testing.T) {
	s := newLog(t, 100, Second)
	var st State
	now := int64(0)
	for range 1000 {
		now += 3 * Millisecond
		s.Decide(&st, Request{Now: now, Cost: 1})
	}
	allocs := testing.AllocsPerRun(10_000, func() {
		now += 3 * Millisecond
		s.Decide(&st, Request{Now: now, Cost: 1 + now%3})
	})
	if allocs != 0 {
		t.Errorf("%v allocations per decision", allocs)
	}
}

func TestSlidingLogParams(t *testing.T) {
	for _, c := range []struct {
		limit, window int64
		param         string
	}{
		{0, Second, "limit"},
		{-1, Second, "limit"},
		{MaxLogLimit + 1, Second, "limit"},
		{1, 0, "window"},
		{1, -Second, "window"},
		{1, MaxSpan + 1, "window"},
	} {
		_, err := NewSlidingLog(c.limit, c.window)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != c.param || !errors.Is(err, ErrParam) {
			t.Errorf("NewSlidingLog(%d, %d) = %v, want an error about %s", c.limit, c.window, err, c.param)
		}
	}
	if _, err := NewSlidingLog(MaxLogLimit, MaxSpan); err != nil {
		t.Errorf("the largest parameters: %v", err)
	}
}
