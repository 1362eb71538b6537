package algotest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// Decide is a store under test: it decides r for key under alg at r.Now (a store with a clock
// of its own sets that clock to r.Now first).
type Decide func(key string, alg algos.Algorithm, r algos.Request) algos.Decision

// banned are limits whose window outlives their ban: the state a store keeps must outlive it too.
func banned() []Limit {
	s, m, h := algos.Second, algos.Minute, algos.Hour
	ban := func(a algos.Algorithm, err error) algos.Algorithm { return must(algos.NewBan(must(a, err), m)) }
	return []Limit{
		{Name: "fixed window 5 per hour, ban 1 min", Alg: ban(algos.NewFixedWindow(5, h))},
		{Name: "sliding window 5 per hour, ban 1 min", Alg: ban(algos.NewSlidingWindow(5, h))},
		{Name: "sliding window 5 per hour in 2 sub-windows, ban 1 min", Alg: ban(algos.NewSlidingWindowSub(5, h, 2))},
		{Name: "sliding window 5 per hour in 12 sub-windows, ban 1 min", Alg: ban(algos.NewSlidingWindowSub(5, h, 12))},
		{Name: "sliding log 5 per hour, ban 1 min", Alg: ban(algos.NewSlidingLog(5, h))},
		{Name: "token bucket 5, 1 per 10 min, ban 1 min", Alg: ban(algos.NewGCRA(1, 10*m, 5))},
		{Name: "leaky bucket 5, 1 per 10 min, ban 1 min", Alg: ban(algos.NewLeakyBucket(1, 10*m, 4, algos.NoDelay))},
		{Name: "warm-up 1 per 20 s over 10 min, ban 1 min", Alg: ban(algos.NewWarmUp(1, 20*s, 10*m))},
		{Name: "concurrency 3, leases of 1 h, ban 1 min", Alg: ban(algos.NewConcurrency(3, h))},
	}
}

// BanKeepsWindow is the case that found stores dropping a window with its ban: 5 requests per
// hour, a ban of a minute. The sixth request starts the ban; requests during it are refused;
// once it is over the window is still full, so the client is refused again (and banned again),
// and told the real wait: until the hour's window ends, not the ban's end.
func BanKeepsWindow(t *testing.T, decide Decide) {
	t.Helper()
	alg := banned()[0].Alg
	const key = "ban-keeps-window"
	start := 472_222 * algos.Hour // about 2023, and a window starts here
	req := func(at int64) algos.Decision { return decide(key, alg, algos.Request{Now: start + at, Cost: 1}) }
	for i := range 5 {
		if d := req(int64(i) * algos.Second); !d.Allowed {
			t.Fatalf("request %d refused: %+v", i, d)
		}
	}
	if d := req(10 * algos.Second); d.Allowed || d.RetryAfter != algos.Hour-10*algos.Second {
		t.Fatalf("sixth request: %+v, want a denial until the window ends, in %d µs", d, algos.Hour-10*algos.Second)
	}
	for at := 20 * algos.Second; at < 70*algos.Second; at += 10 * algos.Second {
		if d := req(at); d.Allowed || d.RetryAfter != algos.Hour-at {
			t.Fatalf("during the ban, at %d s: %+v, want the real wait %d µs", at/algos.Second, d, algos.Hour-at)
		}
	}
	if d := req(2 * algos.Minute); d.Allowed {
		t.Fatalf("after the ban: %+v: the window was reset with the ban", d)
	}
	if d := req(algos.Hour + algos.Minute + algos.Second); !d.Allowed {
		t.Fatalf("in the next window, after the last ban: %+v", d)
	}
}

// MatchTransition replays random traces of every banned limit through decide and through the
// algorithm's own transition on a state that is never dropped, with idle gaps longer than bans
// and windows, and fails at the first decision that differs (TTL aside): a store may drop a
// state only once an empty one decides the same. logs says whether the store holds the
// algorithms whose state is a log (sliding log, concurrency) or more words than State.W.
func MatchTransition(t *testing.T, decide Decide, logs bool) {
	t.Helper()
	for i, l := range banned() {
		if (l.Alg.Script().Log || l.Alg.Script().Words > 0) && !logs {
			continue
		}
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		key := fmt.Sprintf("transition-%d", i)
		var st algos.State
		now := int64(1_700_000_000) * algos.Second
		id := int64(0)
		for step := range 400 {
			switch rng.IntN(10) {
			case 0:
				now += rng.Int64N(2 * algos.Hour) // past bans, windows and leases
			case 1, 2:
				now += rng.Int64N(2 * algos.Minute)
			default:
				now += rng.Int64N(20 * algos.Second)
			}
			id++
			r := algos.Request{Now: now, Cost: 1 + rng.Int64N(2), ID: id}
			want := l.Alg.Decide(&st, r)
			got := decide(key, l.Alg, r)
			want.TTL, got.TTL = 0, 0
			if got != want {
				t.Fatalf("%s, step %d at %d µs: the store decided\n  %+v\nthe transition\n  %+v", l.Name, step, now, got, want)
			}
		}
	}
}
