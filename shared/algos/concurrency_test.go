package algos

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// lease is one request of a concurrency golden vector and the decision expected.
type lease struct {
	at, id, cost int64
	release      bool
	allowed      bool
	remaining    int64
	reset        int64
	retry        int64
	granted      int64
}

func replayLeases(t *testing.T, c *Concurrency, st *State, steps []lease) {
	t.Helper()
	for i, s := range steps {
		d := c.Decide(st, Request{Now: s.at, ID: s.id, Cost: s.cost, Release: s.release})
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.ResetAfter != s.reset ||
			d.RetryAfter != s.retry || d.Granted != s.granted || d.TTL != d.ResetAfter || d.Limit != c.max {
			t.Errorf("step %d (t=%d id %d cost %d release %v): got %+v, want allowed=%v remaining=%d reset=%d retry=%d granted=%d",
				i, s.at, s.id, s.cost, s.release, d, s.allowed, s.remaining, s.reset, s.retry, s.granted)
		}
	}
}

func TestConcurrencyLeases(t *testing.T) {
	c, err := NewConcurrency(3, 10*Second)
	if err != nil {
		t.Fatal(err)
	}
	s := Second
	var st State
	replayLeases(t, c, &st, []lease{
		// At most 3 in flight.
		{0, 1, 1, false, true, 2, 10 * s, 0, 1},
		{1 * s, 2, 1, false, true, 1, 10 * s, 0, 1},
		{2 * s, 3, 1, false, true, 0, 10 * s, 0, 1},
		{3 * s, 4, 1, false, false, 0, 9 * s, 7 * s, 0}, // lease 1 expires at 10 s
		{3 * s, 4, 2, false, false, 0, 9 * s, 8 * s, 0}, // two slots: lease 2 too, at 11 s
		{3 * s, 4, 0, false, true, 0, 9 * s, 0, 0},      // a peek
		// A release frees a slot.
		{4 * s, 2, 0, true, true, 1, 8 * s, 0, 0},
		{4 * s, 4, 1, false, true, 0, 10 * s, 0, 1},
		// Releasing an unknown or already released id changes nothing.
		{4 * s, 99, 0, true, true, 0, 10 * s, 0, 0},
		{4 * s, 2, 0, true, true, 0, 10 * s, 0, 0},
		// Lease 1, never released, expires at 10 s (expiry ≤ now).
		{10*s - 1, 5, 1, false, false, 0, 4*s + 1, 1, 0},
		{10 * s, 5, 1, false, true, 0, 10 * s, 0, 1},
		{10 * s, 6, 4, false, false, 0, 10 * s, Never, 0}, // more than max: never
		{11 * s, 1, 0, true, true, 0, 9 * s, 0, 0},        // releasing the expired lease 1: no-op
		// Everything expired.
		{20 * s, 0, 0, false, true, 3, 0, 0, 0},
		// A lease of cost n holds n slots.
		{20 * s, 7, 2, false, true, 1, 10 * s, 0, 2},
		{21 * s, 8, 2, false, false, 1, 9 * s, 9 * s, 0},
		{21 * s, 7, 5, true, true, 3, 0, 0, 0}, // the release ignores its cost
		{21 * s, 8, 2, false, true, 1, 10 * s, 0, 2},
	})
	if want := []int64{31 * s, 8, 2}; !slices.Equal(st.Log, want) {
		t.Errorf("log %v, want %v", st.Log, want)
	}
}

// TestConcurrencyRetake: taking a held id replaces the lease, its slots counting as free; a
// denied retake leaves the old lease as it was.
func TestConcurrencyRetake(t *testing.T) {
	c, _ := NewConcurrency(3, 10*Second)
	s := Second
	var st State
	replayLeases(t, c, &st, []lease{
		{0, 1, 2, false, true, 1, 10 * s, 0, 2},
		{1 * s, 1, 1, false, true, 2, 10 * s, 0, 1}, // resized and renewed: one lease, 1 slot, 11 s
		{2 * s, 2, 2, false, true, 0, 10 * s, 0, 2},
		{3 * s, 2, 3, false, false, 0, 9 * s, 8 * s, 0}, // 3 slots need lease 1's, free at 11 s
		{3 * s, 1, 4, false, false, 0, 9 * s, Never, 0},
		{3 * s, 1, 1, false, true, 0, 10 * s, 0, 1}, // renewed to 13 s
	})
	if want := []int64{12 * s, 2, 2, 13 * s, 1, 1}; !slices.Equal(st.Log, want) {
		t.Errorf("log %v, want %v", st.Log, want)
	}
}

// TestConcurrencyBackwardsClock: a clock that goes back neither drops leases early nor lets a
// new lease expire before the ones already in flight.
func TestConcurrencyBackwardsClock(t *testing.T) {
	c, _ := NewConcurrency(2, 10*Second)
	s := Second
	var st State
	replayLeases(t, c, &st, []lease{
		{100 * s, 1, 1, false, true, 1, 10 * s, 0, 1},
		{95 * s, 2, 1, false, true, 0, 15 * s, 0, 1}, // expires at 110 s, not 105 s
		{50 * s, 3, 1, false, false, 0, 60 * s, 60 * s, 0},
		{0, 3, 1, false, false, 0, 110 * s, 110 * s, 0},
		{106 * s, 3, 1, false, false, 0, 4 * s, 4 * s, 0},
		{110 * s, 3, 1, false, true, 1, 10 * s, 0, 1},
	})
	// The clock going back after leases expired does not bring them back either.
	replayLeases(t, c, &st, []lease{{105 * s, 0, 0, false, true, 1, 15 * s, 0, 0}})
}

// TestConcurrencyRandom checks invariants on random traces: the log is in expiry order with
// unique ids and no expired lease, Remaining is Max less the slots held, and without releases a
// denied request is admitted exactly RetryAfter later.
func TestConcurrencyRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range []struct{ max, ttl int64 }{{1, 1000}, {5, 100_000}, {64, 10_000}} {
		c, _ := NewConcurrency(p.max, p.ttl)
		var st State
		now := int64(1 << 40)
		for i := range 20_000 {
			now += rng.Int64N(p.ttl/20 + 1)
			if rng.IntN(50) == 0 {
				now -= rng.Int64N(p.ttl)
			}
			r := Request{Now: now, ID: rng.Int64N(3 * p.max), Cost: rng.Int64N(p.max/2 + 2), Release: rng.IntN(3) == 0}
			d := c.Decide(&st, r)
			used := int64(0)
			for j := 0; j < len(st.Log); j += 3 {
				used += st.Log[j+2]
				if st.Log[j] <= now || (j > 0 && st.Log[j] < st.Log[j-3]) || st.Log[j+2] < 1 {
					t.Fatalf("step %d: bad log %v at %d", i, st.Log, now)
				}
				for k := j + 3; k < len(st.Log); k += 3 {
					if st.Log[k+1] == st.Log[j+1] {
						t.Fatalf("step %d: id %d twice in %v", i, st.Log[j+1], st.Log)
					}
				}
			}
			if d.Remaining != p.max-used || used > p.max {
				t.Fatalf("step %d %+v: remaining %d with %d used", i, r, d.Remaining, used)
			}
			if d.Allowed || d.RetryAfter == Never {
				continue
			}
			before := State{Log: slices.Clone(st.Log)}
			if c.Decide(&before, Request{Now: now + d.RetryAfter - 1, ID: r.ID, Cost: r.Cost}).Allowed {
				t.Fatalf("step %d %+v: admitted before RetryAfter %d", i, r, d.RetryAfter)
			}
			after := State{Log: slices.Clone(st.Log)}
			if !c.Decide(&after, Request{Now: now + d.RetryAfter, ID: r.ID, Cost: r.Cost}).Allowed {
				t.Fatalf("step %d %+v: denied after RetryAfter %d", i, r, d.RetryAfter)
			}
		}
	}
}

// TestConcurrencyNoAlloc: at steady state the log's backing array is reused.
func TestConcurrencyNoAlloc(t *testing.T) {
	c, _ := NewConcurrency(100, Second)
	var st State
	now, id := int64(0), int64(0)
	step := func() {
		now += 7 * Millisecond
		id++
		c.Decide(&st, Request{Now: now, ID: id, Cost: 1 + id%3})
		c.Decide(&st, Request{Now: now, ID: id - 5, Release: true})
	}
	for range 1000 {
		step()
	}
	if a := testing.AllocsPerRun(1000, step); a != 0 {
		t.Fatalf("%v allocations per step", a)
	}
}

func TestConcurrencyParams(t *testing.T) {
	if _, err := NewConcurrency(MaxConcurrency, MaxSpan); err != nil {
		t.Fatalf("largest parameters refused: %v", err)
	}
	for _, c := range []struct {
		max, ttl int64
		param    string
	}{
		{0, Second, "max"},
		{-1, Second, "max"},
		{MaxConcurrency + 1, Second, "max"},
		{1, 0, "lease"},
		{1, -Second, "lease"},
		{1, MaxSpan + 1, "lease"},
	} {
		_, err := NewConcurrency(c.max, c.ttl)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != c.param || !errors.Is(err, ErrParam) {
			t.Errorf("NewConcurrency(%d, %d) = %v, want an error about %s", c.max, c.ttl, err, c.param)
		}
	}
}
