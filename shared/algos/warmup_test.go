package algos

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
)

func newWarmUp(t *testing.T, rate, period, warmup int64) *WarmUp {
	t.Helper()
	u, err := NewWarmUp(rate, period, warmup)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// warmAcquire is Guava's acquire(): the request waits as long as it must (MaxWait large), and
// the caller's clock moves on by the Delay it sleeps. It returns that Delay.
func warmAcquire(t *testing.T, u *WarmUp, st *State, now *int64, cost int64) int64 {
	t.Helper()
	d := u.Decide(st, Request{Now: *now, Cost: cost, MaxWait: 100 * Day})
	if !d.Allowed || d.Granted != cost {
		t.Fatalf("t=%d: acquire(%d) refused: %+v", *now, cost, d)
	}
	*now += d.Delay
	return d.Delay
}

// warmSleeps checks that successive acquire(1)s sleep exactly want.
func warmSleeps(t *testing.T, u *WarmUp, st *State, now *int64, want ...int64) {
	t.Helper()
	for i, w := range want {
		if got := warmAcquire(t, u, st, now, 1); got != w {
			t.Errorf("acquire %d at t=%d slept %d µs, want %d", i, *now, got, w)
		}
	}
}

// TestWarmUpGuava reproduces Guava's RateLimiterTest.testWarmUp: create(2 per second, warm-up
// 4 s, cold factor 3), whose expected sleeps are "R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, ..."
// (rounded there to 10 ms; exactly 1.375, 1.125, 0.875, 0.625 s here: the trapezoid from 3·0.5 s
// down to 0.5 s over the 4 permits above the threshold of 4, out of max = 8).
func TestWarmUpGuava(t *testing.T) {
	u := newWarmUp(t, 2, Second, 4*Second)
	if u.cap != 8 {
		t.Fatalf("cap %d, want max permits 8", u.cap)
	}
	ms := Millisecond
	cold := []int64{0, 1375 * ms, 1125 * ms, 875 * ms, 625 * ms, 500 * ms, 500 * ms, 500 * ms}
	var st State
	now := int64(0)
	warmSleeps(t, u, &st, &now, cold...) // #1
	now += 500 * ms                      // #2: repay the last acquire
	now += 4000 * ms                     // #3: cold again
	warmSleeps(t, u, &st, &now, cold...) // #4
	now += 500 * ms                      // #5
	now += 2000 * ms                     // #6: only down to the threshold: not cold
	warmSleeps(t, u, &st, &now, 0, 500*ms, 500*ms, 500*ms, 500*ms, 500*ms, 500*ms, 500*ms)
}

// TestWarmUpSaturated: a caller asking again as soon as its previous request is released sees
// its intervals fall from 3·S (2,980 µs averaged over the first permit) to S = 1 ms, and runs at
// the stable rate from exactly W = 100 ms on. 1 per ms and W = 100 ms make every value exact:
// max = 100 permits, threshold 50, interval k = 1000 + 1980 − 40k µs for k < 50.
func TestWarmUpSaturated(t *testing.T) {
	u := newWarmUp(t, 1, Millisecond, 100*Millisecond)
	var st State
	now := int64(0)
	warmAcquire(t, u, &st, &now, 1)
	for k := int64(0); k < 200; k++ {
		want := int64(1000)
		if k < 50 {
			want = 1000 + 1980 - 40*k
		}
		if got := warmAcquire(t, u, &st, &now, 1); got != want {
			t.Fatalf("interval %d: %d µs, want %d", k, got, want)
		}
		if k == 49 && now != 100*Millisecond {
			t.Fatalf("stable rate reached at %d µs, want exactly W = 100,000", now)
		}
	}
}

// TestWarmUpSaturatedInexact: 3 per second (S = 333,333⅓ µs), W = 10 s: max = 30, threshold
// 15. The intervals never rise, start at a little under 3·S, are S (in whole µs) from the 16th
// on, and the warm-up ends no earlier than W and at most 15 rounded-up ticks (5 µs) later.
func TestWarmUpSaturatedInexact(t *testing.T) {
	u := newWarmUp(t, 3, Second, 10*Second)
	var st State
	now := int64(0)
	warmAcquire(t, u, &st, &now, 1)
	prev := int64(1 << 62)
	for k := range 100 {
		got := warmAcquire(t, u, &st, &now, 1)
		if got > prev+1 { // +1: each release is rounded up to a whole µs
			t.Fatalf("interval %d: %d µs after %d: the warm-up curve went back up", k, got, prev)
		}
		prev = got
		switch {
		case k == 0 && (got < 950_000 || got >= Second):
			t.Fatalf("first interval %d µs, want just under 3·S", got)
		case k == 14 && (now < 10*Second || now > 10*Second+5):
			t.Fatalf("warm-up ended at %d µs, want W = 10 s plus at most 5 µs", now)
		case k >= 15 && (got < 333_333 || got > 333_334):
			t.Fatalf("interval %d: %d µs, want S", k, got)
		}
	}
}

// TestWarmUpCoolDown: idle time past nextFree stores one permit per S, up to max; stored
// permits above the threshold make the next request slower.
func TestWarmUpCoolDown(t *testing.T) {
	u := newWarmUp(t, 1, Millisecond, 100*Millisecond)
	for _, c := range []struct {
		idle, first int64 // idle µs after saturation; the interval after the first request
	}{
		{0, 1000},
		{50 * Millisecond, 1000},    // 50 stored: at the threshold, still stable
		{75 * Millisecond, 1980},    // 75 stored: A = 50,000 half-ticks: 1000 + 980
		{100 * Millisecond, 2980},   // fully cold again
		{Day, 2980},                 // never more than max
		{100*Millisecond - 1, 2980}, // 1 µs short of cold: 2,979.96 rounded up
	} {
		var st State
		now := int64(0)
		for range 101 { // 100 permits drain max; the last one's cost is repaid below
			warmAcquire(t, u, &st, &now, 1)
		}
		now += 1000 + c.idle
		if st.W[2] != u.w || st.W[3] != 0 {
			t.Fatalf("after saturation: warmth %d + %d/r, want %d (no stored permits)", st.W[2], st.W[3], u.w)
		}
		warmAcquire(t, u, &st, &now, 1)
		if got := warmAcquire(t, u, &st, &now, 1); got != c.first {
			t.Errorf("after %d µs idle: interval %d, want %d", c.idle, got, c.first)
		}
	}
}

// TestWarmUpTryAcquire pins the Decision of plain tryAcquire (MaxWait 0) requests.
func TestWarmUpTryAcquire(t *testing.T) {
	u := newWarmUp(t, 2, Second, 4*Second)
	ms := Millisecond
	replay(t, u, 1, []step{
		{0, 9, false, 1, 0, Never}, // above max permits: never
		{0, 0, true, 1, 0, 0},      // a peek on a cold limiter: one request may go
		{0, 1, true, 0, 1375 * ms, 0},
		{0, 1, false, 0, 1375 * ms, 1375 * ms}, // the next pays for the first
		{0, 0, true, 0, 1375 * ms, 0},          // a peek takes nothing, never waits
		{1000 * ms, 1, false, 0, 375 * ms, 375 * ms},
		{1375 * ms, 1, true, 0, 1125 * ms, 0},
		{2500*ms - 1, 8, false, 0, 1, 1},
		{2500 * ms, 8, true, 0, 875*ms + 625*ms + 6*500*ms, 0}, // 6 stored (2 above the threshold), 2 fresh
		{9000 * ms, 1, true, 0, 500 * ms, 0},                   // only 2 s cooled: warm
	})
}

func TestWarmUpDecisionFields(t *testing.T) {
	u := newWarmUp(t, 2, Second, 4*Second)
	var st State
	r := Request{Now: 0, Cost: 1}
	d := u.Decide(&st, r)
	record(t, u, &st, r, d) // the golden vector of the delay path below starts here
	// nextFree = 1.375 s; stored 7 of 8: cold again 0.5 s (one permit) after nextFree.
	want := Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 1375 * Millisecond, Granted: 1, TTL: 1875 * Millisecond}
	if d != want {
		t.Fatalf("got %+v, want %+v", d, want)
	}
	r = Request{Now: 375 * Millisecond, Cost: 2, MaxWait: Second}
	d = u.Decide(&st, r)
	record(t, u, &st, r, d)
	// Waits until 1.375 s; takes 2 stored permits: 1125 + 875 ms; 3 permits to cool.
	want = Decision{Allowed: true, Limit: 1, ResetAfter: 3 * Second, Delay: Second, Granted: 2, TTL: 4500 * Millisecond}
	if d != want {
		t.Fatalf("got %+v, want %+v", d, want)
	}
	if st.W != [4]int64{3375 * Millisecond, 0, 1500 * Millisecond, 0} {
		t.Fatalf("state %v", st.W)
	}
	r = Request{Now: 375 * Millisecond, Cost: 1, MaxWait: 3*Second - 1}
	d = u.Decide(&st, r)
	record(t, u, &st, r, d)
	want = Decision{Limit: 1, ResetAfter: 3 * Second, RetryAfter: 3 * Second, TTL: 4500 * Millisecond}
	if d != want {
		t.Fatalf("denied: got %+v, want %+v", d, want)
	}
	// After the TTL the state decides as an empty one.
	d = u.Decide(&st, Request{Now: 4875 * Millisecond})
	want = Decision{Allowed: true, Limit: 1, Remaining: 1}
	if d != want {
		t.Fatalf("after the TTL: got %+v, want %+v", d, want)
	}
}

func TestWarmUpPartial(t *testing.T) {
	u := newWarmUp(t, 2, Second, 4*Second)
	var st State
	if d := u.Decide(&st, Request{Now: 0, Cost: 20, Partial: true}); !d.Allowed || d.Granted != 8 {
		t.Fatalf("partial above max: %+v, want 8 granted", d)
	}
	if d := u.Decide(&st, Request{Now: 0, Cost: 20, Partial: true}); d.Allowed || d.Granted != 0 || d.RetryAfter <= 0 {
		t.Fatalf("partial while waiting: %+v, want a denial with a wait", d)
	}
}

// TestWarmUpBackwardsClock: a clock that goes back never stores permits (which would make the
// limiter colder, but also never lets a request through earlier than nextFree).
func TestWarmUpBackwardsClock(t *testing.T) {
	u := newWarmUp(t, 1, Millisecond, 100*Millisecond)
	var st State
	now := 10 * Day
	for range 101 {
		warmAcquire(t, u, &st, &now, 1) // warm: no stored permits
	}
	// nextFree is now + 1 ms.
	before := st
	for _, back := range []int64{1, Second, Hour, 5 * Day} {
		d := u.Decide(&st, Request{Now: now - back, Cost: 1})
		if d.Allowed || d.RetryAfter != back+Millisecond || st.W != before.W {
			t.Fatalf("%d µs back: %+v, state %v", back, d, st.W)
		}
	}
	// Waiting from a time in the past: it proceeds at nextFree, at the stable cost.
	back := now - Hour
	warmAcquire(t, u, &st, &back, 1)
	if back != now+Millisecond || st.W[0] != now+2*Millisecond || st.W[2] != u.w {
		t.Fatalf("after a wait from the past: at %d, state %v", back, st.W)
	}
}

func TestWarmUpParams(t *testing.T) {
	for _, c := range []struct {
		rate, period, warmup int64
		param                string
	}{
		{0, Second, Second, "rate"},
		{-1, Second, Second, "rate"},
		{MaxCount + 1, Second, Second, "rate"},
		{1, 0, Second, "period"},
		{1, MaxSpan + 1, Second, "period"},
		{1, Second, 0, "warmup"},
		{1, Second, -Second, "warmup"},
		{1, Second, MaxSpan + 1, "warmup"},
		{MaxCount, Second, 2 * Second, "warmup"}, // a cold limiter would store 2·10^15 permits
		{MaxCount, 1, Second, "warmup"},
	} {
		_, err := NewWarmUp(c.rate, c.period, c.warmup)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != c.param || !errors.Is(err, ErrParam) {
			t.Errorf("NewWarmUp(%d, %d, %d) = %v, want an error about %s", c.rate, c.period, c.warmup, err, c.param)
		}
	}
	for _, c := range []struct{ rate, period, warmup, limit int64 }{
		{1, Second, Second, 1},
		{1, Minute, Second, 1},                  // W shorter than S: no warm-up to speak of
		{1000, Second, 1 << 44, 1 << 44 / 1000}, // reduced to 1 per ms
		{1_000_000_000_000, Year, Year, 1_000_000_000_000},
		{MaxCount, Second, Second, MaxCount},
		{1, MaxSpan, MaxSpan, 1},
	} {
		u, err := NewWarmUp(c.rate, c.period, c.warmup)
		if err != nil {
			t.Errorf("NewWarmUp(%d, %d, %d): %v", c.rate, c.period, c.warmup, err)
			continue
		}
		if u.cap != c.limit {
			t.Errorf("NewWarmUp(%d, %d, %d): cap %d, want %d", c.rate, c.period, c.warmup, u.cap, c.limit)
		}
	}
}

// TestWarmUpGuavaModel replays random traces and checks every admitted request against Guava's
// real-valued formulas (math/big), applied to the state this implementation holds: the stored
// permits after the resync are exact, and nextFree moves by Guava's cost rounded up, by less
// than one tick (1/r µs) plus n·S/W µs. After its TTL, every state decides as an empty one.
func TestWarmUpGuavaModel(t *testing.T) {
	for _, c := range [][3]int64{
		{2, Second, 4 * Second},
		{3, Second, 10 * Second},
		{7, 1_000_003, 5_000_000},
		{1000, Second, 3 * Second},
		{1, Second, Second},
		{999, 1000, 1<<44/999 - 12345},
		{1_000_000_000_000, Second, Minute},    // S = 1 ps: far below a µs
		{999_999_999_989, Year, 3 * Year},      // a prime rate: ticks of about 10^-12 µs
		{1_000_000_000_000, Year, 10 * Minute}, // W much shorter than the period
		{3, 10 * Year, 10 * Year},
	} {
		u := newWarmUp(t, c[0], c[1], c[2])
		rng := rand.New(rand.NewPCG(uint64(c[0]), uint64(c[2])))
		rat := func(a, b int64) *big.Rat { return big.NewRat(a, b) }
		stable := rat(c[1], c[0])                                           // S, µs
		maxP := new(big.Rat).Quo(rat(c[2], 1), stable)                      // W/S
		thr := new(big.Rat).Mul(maxP, rat(1, 2))                            // threshold
		slope := new(big.Rat).Quo(new(big.Rat).Mul(stable, rat(2, 1)), thr) // (3S − S)/(max − thr)
		var st State
		now := int64(1_000_000)
		for i := range 20_000 {
			// Mostly one unit every few S, sometimes a long rest, a big request or a wait.
			now += rng.Int64N(u.p/u.r*3 + 2)
			if rng.IntN(10) == 0 {
				now += rng.Int64N(c[2] + 1)
			}
			if rng.IntN(50) == 0 {
				now -= rng.Int64N(c[2])
			}
			n := min(1, u.cap)
			switch rng.IntN(50) {
			case 0:
				n = rng.Int64N(u.cap + 1)
			case 1, 2, 3, 4:
				n = rng.Int64N(min(u.cap, 10) + 1)
			}
			r := Request{Now: now, Cost: n}
			switch rng.IntN(4) {
			case 0:
				r.MaxWait = rng.Int64N(c[2] + 1)
			case 1:
				r.MaxWait = rng.Int64N(u.p/u.r*4 + 1)
			}
			if rng.IntN(100) == 0 {
				var fresh State
				ttl := u.Decide(&State{W: st.W}, Request{Now: now}).TTL
				probe := r
				probe.Now += ttl
				a, b := st, fresh
				if da, db := u.Decide(&a, probe), u.Decide(&b, probe); da != db || da.Granted > 0 && a.W != b.W {
					t.Fatalf("%v step %d: after the TTL %d: %+v / %v, fresh %+v / %v", c, i, ttl, da, a.W, db, b.W)
				}
			}
			// Guava, from the same state.
			nextFree := new(big.Rat).Add(rat(st.W[0], 1), rat(st.W[1], u.r))
			nf0 := new(big.Rat).Set(nextFree)
			stored := warmStored(u, &st, stable)
			if nextFree.Cmp(rat(now, 1)) < 0 {
				idle := new(big.Rat).Sub(rat(now, 1), nextFree)
				stored.Add(stored, idle.Quo(idle, stable))
				if stored.Cmp(maxP) > 0 {
					stored.Set(maxP)
				}
				nextFree = rat(now, 1)
			}
			d := u.Decide(&st, r)
			// tryAcquire(timeout): admitted iff nextFree − timeout ≤ now; a peek always is.
			if wantAllowed := n == 0 || nf0.Cmp(rat(now+r.MaxWait, 1)) <= 0; d.Allowed != wantAllowed {
				t.Fatalf("%v step %d %+v: allowed %v, Guava %v", c, i, r, d.Allowed, wantAllowed)
			}
			if !d.Allowed || n == 0 {
				continue
			}
			// storedPermitsToWaitTime + fresh permits.
			take := rat(n, 1)
			if take.Cmp(stored) > 0 {
				take.Set(stored)
			}
			cost := new(big.Rat).Mul(rat(n, 1), stable)
			if above := new(big.Rat).Sub(stored, thr); above.Sign() > 0 {
				q := new(big.Rat).Set(take)
				if q.Cmp(above) > 0 {
					q.Set(above)
				}
				// q·slope·(2·above − q)/2: the trapezoid less its stable part, counted in cost.
				e := new(big.Rat).Sub(new(big.Rat).Mul(above, rat(2, 1)), q)
				e.Mul(e, q).Mul(e, slope).Mul(e, rat(1, 2))
				cost.Add(cost, e)
			}
			stored.Sub(stored, take)
			gotStored := warmStored(u, &st, stable)
			if gotStored.Cmp(stored) != 0 {
				t.Fatalf("%v step %d %+v: stored %s, Guava %s", c, i, r, gotStored.FloatString(6), stored.FloatString(6))
			}
			want := new(big.Rat).Add(nextFree, cost)
			got := new(big.Rat).Add(rat(st.W[0], 1), rat(st.W[1], u.r))
			over := new(big.Rat).Sub(got, want)
			bound := new(big.Rat).Add(rat(1, u.r), new(big.Rat).Quo(new(big.Rat).Mul(rat(n, 1), stable), rat(c[2], 1)))
			if over.Sign() < 0 || over.Cmp(bound) >= 0 {
				t.Fatalf("%v step %d %+v: nextFree %s, Guava %s", c, i, r, got.FloatString(3), want.FloatString(3))
			}
		}
	}
}

// warmStored returns the permits st stores: (W − warmth)/S.
func warmStored(u *WarmUp, st *State, stable *big.Rat) *big.Rat {
	c := new(big.Rat).Sub(big.NewRat(u.w, 1), new(big.Rat).Add(big.NewRat(st.W[2], 1), big.NewRat(st.W[3], u.r)))
	return c.Quo(c, stable)
}

func TestWarmUpNoAlloc(t *testing.T) {
	u := newWarmUp(t, 3, Second, 10*Second)
	var st State
	now := int64(0)
	if a := testing.AllocsPerRun(1000, func() {
		now += 100 * Millisecond
		u.Decide(&st, Request{Now: now, Cost: 1})
	}); a != 0 {
		t.Fatalf("%v allocations per Decide", a)
	}
}
