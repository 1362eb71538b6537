package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// TestDiffSettle replays random admissions and settlements of earlier ones (debits, credits,
// some after their window ended, some on a clock gone back, some far beyond the limit) through
// the Go transitions and the Lua twins: decisions and states must be equal at every step.
func TestDiffSettle(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	ctx := context.Background()
	cases := []struct {
		name   string
		alg    algos.Algorithm
		maxGap int64
		big    int64 // the largest actual cost drawn, once in a while
		least  int   // the fewest debits and credits each the trace must hold
	}{
		{"token bucket", must(algos.NewGCRA(20, algos.Second, 20)), 5 * algos.Second, 200, 300},
		{"token bucket, fractional T", must(algos.NewGCRA(3, 7*algos.Second, 15)), 60 * algos.Second, 50, 100},
		{"token bucket, 10^12 per year", must(algos.NewGCRA(1_000_000_000_000, algos.Year, 1_000_000_000_000)), 30 * algos.Day, 1_000_000_000_000, 100},
		{"token bucket, 1 per year", must(algos.NewGCRA(1, algos.Year, 1)), 300 * algos.Day, algos.MaxCount, 2},
		{"banned token bucket", must(algos.NewBan(must(algos.NewGCRA(20, algos.Second, 20)), algos.Second)), 5 * algos.Second, 200, 300},
		{"fixed window", must(algos.NewFixedWindow(20, algos.Second)), 5 * algos.Second, 200, 300},
		{"fixed window, 10^15 a year", must(algos.NewFixedWindow(algos.MaxCount, algos.Year)), 30 * algos.Day, algos.MaxCount, 300},
		{"sliding window", must(algos.NewSlidingWindow(20, algos.Second)), 5 * algos.Second, 200, 300},
		{"sliding window, 10^12 a year", must(algos.NewSlidingWindow(1_000_000_000_000, algos.Year)), 30 * algos.Day, algos.MaxCount, 300},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci)+11, 3))
			key := fmt.Sprintf("settle:%d", ci)
			var st algos.State
			type reservation struct{ at, est int64 }
			var held []reservation
			now := int64(1_700_000_000_000_000)
			var debits, credits, denied int
			for i := range 3000 {
				now += gap(rng, c.maxGap)
				if rng.IntN(50) == 0 {
					now -= gap(rng, c.maxGap) // a clock gone back
				}
				call := rules.Op{Key: key}
				if len(held) > 0 && rng.IntN(2) == 0 {
					j := rng.IntN(len(held))
					h := held[j]
					held = append(held[:j], held[j+1:]...)
					actual := rng.Int64N(2*h.est + 3)
					if rng.IntN(300) == 0 {
						actual = rng.Int64N(c.big + 1)
					}
					call.Alg = algos.NewSettle(c.alg, h.est, now-h.at)
					call.Req = algos.Request{Now: now, Cost: actual, DryRun: rng.IntN(20) == 0}
					if actual > h.est {
						debits++
					} else if actual < h.est {
						credits++
					}
				} else {
					call.Alg = c.alg
					call.Req = algos.Request{Now: now, Cost: rng.Int64N(9), DryRun: rng.IntN(10) == 0}
				}
				want := goDecide(call.Alg, &st, call.Req)
				if call.Alg == c.alg {
					if want.Allowed && !call.Req.DryRun {
						held = append(held, reservation{now, call.Req.Cost})
					} else if !want.Allowed {
						denied++
					}
				}
				calls := []rules.Op{call}
				s.decideAll(ctx, calls)
				got := calls[0]
				if got.Err != nil {
					t.Fatalf("step %d: %v", i, got.Err)
				}
				if got.Dec != want {
					t.Fatalf("step %d %s %+v:\n  go  %+v\n  lua %+v", i, call.Alg.Script().Name, call.Req, want, got.Dec)
				}
				rst, err := s.State(ctx, key, c.alg)
				if err != nil {
					t.Fatal(err)
				}
				if !equalState(st, rst) {
					t.Fatalf("step %d %s %+v: states differ\n  go  %+v\n  lua %+v", i, call.Alg.Script().Name, call.Req, st, rst)
				}
			}
			if debits < c.least || credits < c.least || denied < 10 && c.alg.Script().Limit < 1_000_000_000_000 { // the huge limits see no denial but after a debt
				t.Fatalf("%d debits, %d credits, %d denials: the trace misses a case", debits, credits, denied)
			}
			t.Logf("%d debits, %d credits, %d denials", debits, credits, denied)
		})
	}
}
