package algos

import (
	"slices"
	"testing"
)

// rstep is a step of a refund golden vector: a request of cost at time at, by the batch
// algorithm (refund < 0) or by its refund of units granted at time refund.
type rstep struct {
	at, cost, refund int64
	allowed          bool
	remaining, reset int64
	granted          int64
}

// replayRefunds runs steps on one state and records them as a golden vector (the Lua twins
// replay it in store/redisstore).
func replayRefunds(t *testing.T, l *Batching, steps []rstep) *State {
	t.Helper()
	var st State
	for i, s := range steps {
		var a Algorithm = l.Alg
		if s.refund >= 0 {
			a = l.Refund(s.refund)
		}
		r := Request{Now: s.at, Cost: s.cost}
		d := a.Decide(&st, r)
		record(t, a, &st, r, d)
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.ResetAfter != s.reset || d.Granted != s.granted {
			t.Errorf("step %d (%+v): got %+v", i, s, d)
		}
	}
	return &st
}

// TestRefundFixedWindow: units come back to the window they were granted in while it lasts,
// never to a later one, nor to one the clock went back to.
func TestRefundFixedWindow(t *testing.T) {
	f, _ := NewFixedWindow(5, Second)
	l, _ := f.Batching(0)
	ms := Millisecond
	st := replayRefunds(t, l, []rstep{
		{100 * ms, 3, -1, true, 2, 900 * ms, 3},
		{500 * ms, 2, 100 * ms, true, 4, 500 * ms, 2}, // 2 of the 3 come back
		{600 * ms, 5, 100 * ms, true, 5, 0, 1},        // never more than the count
		{700 * ms, 5, -1, true, 0, 300 * ms, 5},
		{1200 * ms, 3, 700 * ms, true, 5, 0, 0}, // the window ended: nothing comes back
		{1300 * ms, 2, -1, true, 3, 700 * ms, 2},
		{1400 * ms, 3, 700 * ms, true, 3, 600 * ms, 0},  // not credited to the next window
		{1999 * ms, 1, 1300 * ms, true, 4, 1 * ms, 1},   // the last µs of the window
		{900 * ms, 1, 1300 * ms, true, 4, 1100 * ms, 0}, // a clock gone back: not the window
		{1999 * ms, 0, 1300 * ms, true, 4, 1 * ms, 0},   // nothing asked back
	})
	if st.W != [4]int64{Second, 1} {
		t.Fatalf("state %v", st.W)
	}
	// A refund of the units of a banned batch takes them back from the inner state; the ban
	// key is not touched.
	b, _ := NewBan(f, Second)
	lb, _ := b.Batching(0)
	var s State
	lb.Alg.Decide(&s, Request{Now: 0, Cost: 4})
	rf := lb.Refund(0)
	if sc := rf.Script(); sc.Name != "fixed_window_refund" || sc.Ban != 0 || !slices.Equal(sc.Args, []int64{5, Second, 0}) {
		t.Fatalf("script %+v", sc)
	}
	if d := rf.Decide(&s, Request{Now: 10, Cost: 3}); d.Granted != 3 || s.W[1] != 1 {
		t.Fatalf("banned: %+v, state %v", d, s.W)
	}
	if d := rf.Decide(&s, Request{Now: 10, Cost: 1, DryRun: true}); d.Granted != 0 || s.W[1] != 1 {
		t.Fatalf("dry run: %+v, state %v", d, s.W)
	}
}

// TestRefundSlidingLog: the entries of the grant's time are dropped, the newest first.
func TestRefundSlidingLog(t *testing.T) {
	sl, _ := NewSlidingLog(5, Second)
	l, _ := sl.Batching(100 * Millisecond) // a log of 1.1 s
	ms := Millisecond
	st := replayRefunds(t, l, []rstep{
		{100 * ms, 2, -1, true, 3, 1100 * ms, 2},
		{200 * ms, 1, -1, true, 2, 1100 * ms, 1},
		{300 * ms, 1, 100 * ms, true, 3, 1000 * ms, 1},
		{300 * ms, 5, 150 * ms, true, 3, 1000 * ms, 0}, // nothing recorded then
		{300 * ms, 5, 200 * ms, true, 4, 900 * ms, 1},
		{1500 * ms, 1, 100 * ms, true, 5, 0, 1}, // an old entry goes too
		{1600 * ms, 3, -1, true, 2, 1100 * ms, 3},
		{1700 * ms, 9, 1600 * ms, true, 5, 0, 3},
	})
	if len(st.Log) != 0 {
		t.Fatalf("log %v", st.Log)
	}
}

// TestRefundBuckets: the buckets take nothing back (see Batching.Refund).
func TestRefundBuckets(t *testing.T) {
	g, _ := NewGCRA(10, Second, 10)
	lg, _ := g.Batching(0)
	lb, _ := NewLeakyBucket(10, Second, 10, NoDelay)
	ll, _ := lb.Batching(0)
	if lg.Refund(0) != nil || ll.Refund(0) != nil {
		t.Fatal("a bucket's batching gives a refund")
	}
}
