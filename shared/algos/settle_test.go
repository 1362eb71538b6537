package algos

import (
	"testing"
)

// sstep is a step of a settlement golden vector: at time at, an admission of cost units by the
// algorithm (est < 0), or the settlement at cost units of a request that reserved est units age
// µs before.
type sstep struct {
	at, cost, est, age int64
	allowed            bool
	remaining, reset   int64
	retry, granted     int64
}

// replaySettle runs steps on one state and records them as a golden vector (the Lua twins
// replay it in store/redisstore).
func replaySettle(t *testing.T, alg Algorithm, steps []sstep) *State {
	t.Helper()
	var st State
	for i, s := range steps {
		a := alg
		if s.est >= 0 {
			a = NewSettle(alg, s.est, s.age)
		}
		r := Request{Now: s.at, Cost: s.cost}
		d := a.Decide(&st, r)
		record(t, a, &st, r, d)
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.ResetAfter != s.reset || d.RetryAfter != s.retry || d.Granted != s.granted {
			t.Errorf("step %d (%+v): got %+v", i, s, d)
		}
		if d.TTL != d.ResetAfter {
			t.Errorf("step %d: TTL %d, ResetAfter %d", i, d.TTL, d.ResetAfter)
		}
	}
	return &st
}

// TestSettleGCRA: a bucket of 10 refilled at 10 per second. A debit takes it below zero and
// later requests wait until the debt is paid back; a credit gives units back, never beyond a
// full bucket.
func TestSettleGCRA(t *testing.T) {
	g, _ := NewGCRA(10, Second, 10)
	ms := Millisecond
	replaySettle(t, g, []sstep{
		{0, 4, -1, 0, true, 6, 400 * ms, 0, 4},                  // reserve an estimate of 4
		{0, 9, 4, 0, true, 1, 900 * ms, 0, 5},                   // it used 9: 5 more
		{0, 30, 0, 0, true, 0, 3900 * ms, 0, 30},                // 30 with no estimate: 20 below zero
		{100 * ms, 1, -1, 0, false, 0, 3800 * ms, 2900 * ms, 0}, // waits for the debt and its unit
		{100 * ms, 0, 0, 0, true, 0, 3800 * ms, 0, 0},           // a settlement of 0 on 0 changes nothing
		{3000 * ms, 1, -1, 0, true, 0, 1000 * ms, 0, 1},         // the debt paid, one unit fits
		{3000 * ms, 2, 10, 0, true, 8, 200 * ms, 0, 8},          // reserved 10, used 2: 8 back
		{3000 * ms, 0, 50, 0, true, 10, 0, 0, 50},               // a credit never fills beyond full
		{3000 * ms, 5, -1, 0, true, 5, 500 * ms, 0, 5},
	})
	// A settlement never starts or reads a ban: it runs on the inner bucket.
	b, _ := NewBan(g, Second)
	if s := NewSettle(b, 1, 0); s == nil || s.Script().Name != "token_bucket_settle" || s.Script().Ban != 0 {
		t.Fatalf("settlement of a banned bucket: %+v", s)
	}
}

// TestSettleGCRAExtremes: a debit of 10^15 on a bucket of 1 per year stops at ten years of debt
// beyond empty; at 10^15 per µs it counts in full.
func TestSettleGCRAExtremes(t *testing.T) {
	slow, _ := NewGCRA(1, Year, 1)
	replaySettle(t, slow, []sstep{
		{0, MaxCount, 0, 0, true, 0, MaxSpan, 0, 10},        // ten buckets at most per settlement
		{0, MaxCount, 0, 0, true, 0, Year + MaxSpan, 0, 10}, // capped: never beyond
		{0, 0, MaxCount, 0, true, 0, Year, 0, 10},           // a credit of 10 buckets
	})
	fast, _ := NewGCRA(MaxCount, 1, MaxCount)
	replaySettle(t, fast, []sstep{
		{0, MaxCount, 0, 0, true, 0, 1, 0, MaxCount},
		{0, MaxCount, 0, 0, true, 0, 2, 0, MaxCount},
		{1, 1, -1, 0, false, 0, 1, 1, 0},
		{2, 1, -1, 0, true, MaxCount - 1, 1, 0, 1},
	})
}

// TestSettleFixedWindow: 10 per second. A debit counts in the window the response ended in and
// ends with it; a credit comes back only to the window of its admission.
func TestSettleFixedWindow(t *testing.T) {
	f, _ := NewFixedWindow(10, Second)
	ms := Millisecond
	st := replaySettle(t, f, []sstep{
		{100 * ms, 5, -1, 0, true, 5, 900 * ms, 0, 5},         // reserve 5
		{200 * ms, 2, 5, 100 * ms, true, 8, 800 * ms, 0, 3},   // used 2: 3 back
		{300 * ms, 20, 0, 0, true, 0, 700 * ms, 0, 20},        // 22: 12 below zero
		{400 * ms, 1, -1, 0, false, 0, 600 * ms, 600 * ms, 0}, // waits for the next window
		{400 * ms, 10, 21, 0, true, 0, 600 * ms, 0, 11},       // still 1 above the limit
		{500 * ms, 5, 6, 0, true, 0, 500 * ms, 0, 1},          // at the limit
		{1100 * ms, 3, -1, 0, true, 7, 900 * ms, 0, 3},        // the debt ended with its window
		{1200 * ms, 0, 3, 250 * ms, true, 7, 800 * ms, 0, 0},  // admitted in the last window: kept
		{1200 * ms, 0, 3, 100 * ms, true, 10, 0, 0, 3},        // admitted in this one: back
		{1300 * ms, 3, 0, 0, true, 7, 700 * ms, 0, 3},
		{900 * ms, 0, 3, 0, true, 7, 1100 * ms, 0, 0}, // a clock gone back: not the window
	})
	if st.W != [4]int64{Second, 3} {
		t.Fatalf("state %v", st.W)
	}
}

// TestSettleSlidingWindow: 10 per second over two weighted windows. A debit weighs in this
// window and, decaying, in the next; a credit comes back to the window of its admission, the
// current or the previous one.
func TestSettleSlidingWindow(t *testing.T) {
	s, _ := NewSlidingWindow(10, Second)
	ms := Millisecond
	replaySettle(t, s, []sstep{
		{100 * ms, 4, -1, 0, true, 6, 1900 * ms, 0, 4},          // reserve 4
		{900 * ms, 24, 4, 800 * ms, true, 0, 1100 * ms, 0, 20},  // used 24: 20 more
		{1500 * ms, 1, -1, 0, false, 0, 500 * ms, 125 * ms, 0},  // 24 weighs 12 at half: wait
		{1500 * ms, 4, 24, 1400 * ms, true, 8, 500 * ms, 0, 20}, // a credit to the previous window
		{1500 * ms, 1, -1, 0, true, 7, 1500 * ms, 0, 1},
		{1500 * ms, 0, 1, 0, true, 8, 500 * ms, 0, 1},   // a credit to this one
		{3500 * ms, 0, 5, 2000 * ms, true, 10, 0, 0, 0}, // an older window: nothing comes back
	})
}

// TestSettleRefused: the algorithms without a settlement say so.
func TestSettleRefused(t *testing.T) {
	sl, _ := NewSlidingLog(5, Second)
	sub, _ := NewSlidingWindowSub(5, Second, 4)
	c, _ := NewConcurrency(3, Second)
	for _, a := range []Algorithm{sl, sub, c} {
		if Settles(a) || NewSettle(a, 1, 0) != nil {
			t.Errorf("%s settles", a.Script().Name)
		}
	}
	g, _ := NewGCRA(1, Second, 1)
	if NewSettle(g, -5, -5).estimate != 0 || NewSettle(g, 2*MaxCount, 0).estimate != MaxCount {
		t.Error("estimate not clamped")
	}
	// A settlement reads its algorithm's state: stores keyed by algorithm find it there.
	if StateOf(NewSettle(g, 1, 0)) != g || StateOf(g) != g {
		t.Error("StateOf does not name the settled algorithm")
	}
	// A dry run changes nothing.
	var st State
	if d := NewSettle(g, 0, 0).Decide(&st, Request{Now: 5, Cost: 3, DryRun: true}); !d.Allowed || st.W != [4]int64{} {
		t.Errorf("dry run: %+v, state %v", d, st.W)
	}
}
