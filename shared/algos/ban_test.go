package algos

import "testing"

// TestBan pins a ban around a bucket of 2 refilled at 1 per second, banning for 10 s.
func TestBan(t *testing.T) {
	g, _ := NewGCRA(1, Second, 2)
	b, err := NewBan(g, 10*Second)
	if err != nil {
		t.Fatal(err)
	}
	replay(t, b, 2, []step{
		{0, 1, true, 1, 1 * Second, 0},
		{0, 1, true, 0, 2 * Second, 0},
		{0, 1, false, 0, 10 * Second, 10 * Second},         // exceeds: banned for 10 s
		{5 * Second, 1, false, 0, 5 * Second, 5 * Second},  // the bucket has refilled, the ban holds
		{5 * Second, 0, false, 0, 5 * Second, 5 * Second},  // a peek sees the ban
		{10*Second - 1, 1, false, 0, 1, 1},                 // 1 µs left
		{10 * Second, 1, true, 1, 1 * Second, 0},           // over: the bucket is full again
		{10 * Second, 3, false, 0, 10 * Second, Never},     // cost above the bucket: never, and banned
		{15 * Second, 1, false, 0, 5 * Second, 5 * Second}, // that denial banned too
	})
}

// TestBanLetsReleasesThrough: during a ban a concurrency lease can still be given back.
func TestBanLetsReleasesThrough(t *testing.T) {
	c, _ := NewConcurrency(1, Hour)
	b, _ := NewBan(c, Hour)
	var st State
	if d := b.Decide(&st, Request{Now: 0, Cost: 1, ID: 1}); !d.Allowed {
		t.Fatalf("first lease refused: %+v", d)
	}
	if d := b.Decide(&st, Request{Now: 0, Cost: 1, ID: 2}); d.Allowed || st.Ban != Hour {
		t.Fatalf("second lease: %+v, ban until %d, want a denial and an hour's ban", d, st.Ban)
	}
	b.Decide(&st, Request{Now: 1, ID: 1, Release: true})
	if len(st.Log) != 0 {
		t.Fatalf("the release during the ban was lost: log %v", st.Log)
	}
}

func TestBanParams(t *testing.T) {
	g, _ := NewGCRA(1, Second, 1)
	for _, dur := range []int64{0, -1, MaxSafe} {
		if _, err := NewBan(g, dur); err == nil {
			t.Errorf("NewBan(%d) accepted", dur)
		}
	}
}
