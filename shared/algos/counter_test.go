package algos

import "testing"

// TestCounter pins the counting of every unit: nothing below MaxCount is refused, the count
// starts afresh at each boundary, and a clock gone back counts in the stored window.
func TestCounter(t *testing.T) {
	c, err := NewCounter(Second)
	if err != nil {
		t.Fatal(err)
	}
	if sc := c.Script(); sc.Name != "counter" || !sc.Hash || sc.Limit != MaxCount || len(sc.Args) != 1 || sc.Args[0] != Second {
		t.Fatalf("script %+v", sc)
	}
	ms := Millisecond
	st := replay(t, c, MaxCount, []step{
		{990 * ms, 0, true, MaxCount, 0, 0}, // a peek of an empty state
		{990 * ms, 3, true, MaxCount - 3, 10 * ms, 0},
		{999 * ms, 5, true, MaxCount - 8, 1 * ms, 0},
		{999 * ms, 0, true, MaxCount - 8, 1 * ms, 0}, // a peek
		{1000 * ms, 1, true, MaxCount - 1, 1000 * ms, 0},
		{500 * ms, 2, true, MaxCount - 3, 1500 * ms, 0}, // the clock went back: the stored window
		{1999 * ms, MaxCount - 3, true, 0, 1 * ms, 0},
		{1999 * ms, 1, false, 0, 1 * ms, 1 * ms}, // beyond MaxCount: until the next window
		{2000 * ms, MaxCount, true, 0, 1000 * ms, 0},
		{5000 * ms, 0, true, MaxCount, 0, 0}, // windows later: nothing counted
	})
	if st.W != [4]int64{2 * Second, MaxCount} {
		t.Fatalf("state %v", st.W)
	}
}

// TestCounterPartial: a partial request takes what is left below MaxCount.
func TestCounterPartial(t *testing.T) {
	c, _ := NewCounter(Minute)
	var st State
	for i, s := range []struct {
		cost, granted int64
		allowed       bool
	}{{MaxCount - 10, MaxCount - 10, true}, {25, 10, true}, {1, 0, false}} {
		r := Request{Now: Second, Cost: s.cost, Partial: true}
		d := c.Decide(&st, r)
		if d.Allowed != s.allowed || d.Granted != s.granted {
			t.Fatalf("step %d: %+v", i, d)
		}
	}
}

func TestCounterBounds(t *testing.T) {
	for _, w := range []int64{0, Millisecond - 1, MaxSpan + 1} {
		if _, err := NewCounter(w); err == nil {
			t.Errorf("window %d accepted", w)
		}
	}
}
