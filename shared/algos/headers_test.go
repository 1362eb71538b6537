package algos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// headerCase is a configured algorithm and the longest RateLimit-Reset it may report, before the
// delays it granted (a reservation pushes the reset out by as much as it waited).
type headerCase struct {
	name  string
	alg   Algorithm
	reset int64 // bound on ResetAfter
	waits bool  // requests may ask to wait (MaxWait)
}

func headerCases(t *testing.T) []headerCase {
	t.Helper()
	ok := func(a Algorithm, err error) Algorithm {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	ban := func(a Algorithm, d int64) Algorithm { return ok(NewBan(a, d)) }
	cases := []headerCase{
		{"fixed window 10 per s", ok(NewFixedWindow(10, Second)), Second, true},
		{"fixed window 10^12 per year", ok(NewFixedWindow(1e12, Year)), Year, true},
		// The weighted estimate keeps the previous window's count for a whole window, down-weighted:
		// a unit counts until the end of the window after its own.
		{"sliding window 10 per s", ok(NewSlidingWindow(10, Second)), 2 * Second, false},
		{"sliding window 10^12 per day", ok(NewSlidingWindow(1e12, Day)), 2 * Day, false},
		{"sliding log 10 per s", ok(NewSlidingLog(10, Second)), Second, true},
		{"token bucket 10, 3 per s", ok(NewGCRA(3, Second, 10)), 10*Second/3 + 1, true}, // τ rounded up
		{"token bucket 10^12 per year", ok(NewGCRA(1e12, Year, 1e12)), Year, true},
		{"leaky bucket 5, 3 per s, delay 2", ok(NewLeakyBucket(3, Second, 4, 2)), 5*Second/3 + 1, false},
		{"leaky bucket nodelay, 10^12 per day", ok(NewLeakyBucket(1e12, Day, 1e12-1, NoDelay)), Day, false},
		// A cold limiter spaces units 3·S apart; a request of the largest cost moves nextFree by
		// at most n·S + W/2 = 1.5·W.
		{"warm-up 2 per s over 4 s", ok(NewWarmUp(2, Second, 4*Second)), 6 * Second, true},
		{"concurrency 3, leases of 10 s", ok(NewConcurrency(3, 10*Second)), 10 * Second, false},
	}
	for _, c := range cases[:len(cases):len(cases)] {
		b := c
		b.name += ", ban 3 s"
		b.alg = ban(c.alg, 3*Second)
		b.reset = max(c.reset, 3*Second)
		cases = append(cases, b)
	}
	return cases
}

// TestHeadersTellTheTruth replays random traces through every algorithm, with and without a
// ban, and checks at every step what the rate-limit headers will say:
//   - 0 ≤ Remaining ≤ Limit;
//   - RateLimit-Reset (ResetAfter) is at most the algorithm's window or refill time (plus the
//     delays it granted), and exact: after waiting it with nothing else spent, Remaining is back
//     to Limit, and 1 µs earlier it is not;
//   - Retry-After (RetryAfter) is the real wait: the same request made then, or at the whole
//     second the header rounds it up to, is admitted, and made 1 µs earlier it is refused (a
//     banned client waits for the ban and for the algorithm); it is never later than the reset.
//
// Each check decides on a copy of the state (DryRun), so the trace itself goes on undisturbed.
func TestHeadersTellTheTruth(t *testing.T) {
	for ci, c := range headerCases(t) {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci), 11))
			var st State
			now := int64(1_700_000_000) * Second
			slack := int64(0) // the longest delay granted so far
			id := int64(0)
			for step := range 3000 {
				switch rng.IntN(6) {
				case 0:
					now += rng.Int64N(c.reset + 1)
				case 1, 2:
					now += rng.Int64N(c.reset/10 + 1)
				}
				id++
				r := Request{Now: now, Cost: 1, ID: id}
				if rng.IntN(5) == 0 {
					r.Cost = rng.Int64N(4)
				}
				if c.waits && rng.IntN(4) == 0 {
					r.MaxWait = rng.Int64N(c.reset/4 + 1)
				}
				at := fmt.Sprintf("step %d at %d µs, %+v", step, now, r)
				d := c.alg.Decide(&st, r)
				if d.Remaining < 0 || d.Remaining > d.Limit {
					t.Fatalf("%s: Remaining %d outside [0, Limit %d]", at, d.Remaining, d.Limit)
				}
				slack = max(slack, d.Delay)
				if d.ResetAfter > c.reset+slack {
					t.Fatalf("%s: ResetAfter %d µs, more than %d (+ %d delayed): %+v", at, d.ResetAfter, c.reset, slack, d)
				}
				checkReset(t, at, c.alg, &st, now, d)
				if !d.Allowed && r.Cost > 0 {
					checkRetry(t, at, c.alg, &st, r, d)
				}
			}
		})
	}
}

// peek decides r on a copy of st, changing nothing.
func peek(alg Algorithm, st *State, r Request) Decision {
	cp := State{W: st.W, Ban: st.Ban, Log: slices.Clone(st.Log)}
	r.DryRun = true
	return alg.Decide(&cp, r)
}

// checkReset: after ResetAfter with nothing spent the quota is whole again, and not before.
func checkReset(t *testing.T, at string, alg Algorithm, st *State, now int64, d Decision) {
	t.Helper()
	full := peek(alg, st, Request{Now: now + d.ResetAfter})
	if full.Remaining != full.Limit {
		t.Fatalf("%s: ResetAfter %d µs, but then Remaining is %d of %d", at, d.ResetAfter, full.Remaining, full.Limit)
	}
	if d.ResetAfter > 0 {
		if early := peek(alg, st, Request{Now: now + d.ResetAfter - 1}); early.Remaining == early.Limit {
			t.Fatalf("%s: ResetAfter %d µs, but the quota is whole 1 µs earlier", at, d.ResetAfter)
		}
	}
}

// checkRetry: a denied request made again after RetryAfter, or after the whole seconds of the
// Retry-After header, is admitted; 1 µs earlier it is not; the wait is within the reset.
func checkRetry(t *testing.T, at string, alg Algorithm, st *State, r Request, d Decision) {
	t.Helper()
	if d.RetryAfter == Never {
		return
	}
	if d.RetryAfter <= 0 {
		t.Fatalf("%s: denied with RetryAfter %d", at, d.RetryAfter)
	}
	if d.RetryAfter > d.ResetAfter {
		t.Fatalf("%s: Retry-After %d µs is later than the reset, %d µs", at, d.RetryAfter, d.ResetAfter)
	}
	retry := r
	retry.MaxWait = 0
	for _, wait := range []int64{d.RetryAfter, (d.RetryAfter + Second - 1) / Second * Second} {
		retry.Now = r.Now + wait
		if got := peek(alg, st, retry); !got.Allowed {
			t.Fatalf("%s: denied, RetryAfter %d µs, but refused again after %d µs: %+v", at, d.RetryAfter, wait, got)
		}
	}
	retry.Now = r.Now + d.RetryAfter - 1
	if r.MaxWait == 0 {
		if got := peek(alg, st, retry); got.Allowed {
			t.Fatalf("%s: RetryAfter %d µs, but admitted 1 µs earlier", at, d.RetryAfter)
		}
	}
}

// TestDryRunChangesNothing: every algorithm, with and without a ban, decides a dry run as it
// would the same request, and leaves the state exactly as it was (stores rely on it: memstore
// decides dry runs on the state it holds).
func TestDryRunChangesNothing(t *testing.T) {
	for ci, c := range headerCases(t) {
		rng := rand.New(rand.NewPCG(uint64(ci), 13))
		var st State
		now := int64(1_700_000_000) * Second
		for step := range 2000 {
			now += rng.Int64N(c.reset/5 + 1)
			r := Request{Now: now, Cost: rng.Int64N(4), ID: int64(step%7 + 1), Partial: rng.IntN(5) == 0}
			if c.waits && rng.IntN(4) == 0 {
				r.MaxWait = rng.Int64N(c.reset/4 + 1)
			}
			before := State{W: st.W, Ban: st.Ban, Log: slices.Clone(st.Log)}
			dry := r
			dry.DryRun = true
			got := c.alg.Decide(&st, dry)
			if st.W != before.W || st.Ban != before.Ban || !slices.Equal(st.Log, before.Log) {
				t.Fatalf("%s, step %d %+v: a dry run changed the state\n  %+v\n  %+v", c.name, step, r, before, st)
			}
			cp := State{W: st.W, Ban: st.Ban, Log: slices.Clone(st.Log)}
			if want := c.alg.Decide(&cp, r); got != want {
				t.Fatalf("%s, step %d %+v: dry run %+v, the request itself %+v", c.name, step, r, got, want)
			}
			c.alg.Decide(&st, r)
		}
	}
}
