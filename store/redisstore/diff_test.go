package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// diffCase is one parameter set of an algorithm replayed through its Go transition and its Lua
// twin on a real redis-server.
type diffCase struct {
	name    string
	alg     algos.Algorithm
	steps   int   // default 10,000
	maxGap  int64 // largest forward time step, µs
	maxCost int64 // costs are drawn from 0..maxCost, mostly 1
	// Optional variations of the requests.
	backwards bool  // about 2% of steps move the clock back by up to maxGap
	maxWait   int64 // about 1 in 4 requests may wait up to this long
	partial   bool  // about 1 in 4 requests ask for a partial grant
	leases    bool  // concurrency: take leases with fresh IDs and release random ones
	logScale  bool  // draw steps and costs log-uniformly (logGap), for parameters spanning 10^15
	// sameState compares the states; nil means W, Ban and Log must be equal.
	sameState func(goSt, redisSt algos.State) bool
}

// runDiff replays a random trace per case and fails at the first step where the decisions or the
// stored states differ. About 1 step in 5 is a dry run (never a release: stores refuse those),
// which must give the decision of the same request and leave the state as it was. Half the steps
// go through the algorithm's batch script (scripts.Batch), the same request made on a second key
// in the same call, whose decisions are checked too.
func runDiff(t *testing.T, cases []diffCase) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	ctx := context.Background()
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // the cases wait on Redis round trips, on keys of their own
			rng := rand.New(rand.NewPCG(uint64(ci)+1, 42))
			key := fmt.Sprintf("diff:%s:%d", c.name, ci)
			var other algos.State // the second key's, for the steps that go in a batch
			steps := c.steps
			if steps == 0 {
				steps = 10_000
			}
			var st algos.State
			var held []int64 // concurrency leases not yet released
			nextID := int64(1)
			now := int64(1_700_000_000_000_000) + rng.Int64N(algos.Second)
			for i := range steps {
				draw := gap
				if c.logScale {
					draw = logGap
				}
				now += draw(rng, c.maxGap)
				if now >= 1<<52 {
					t.Fatalf("step %d: the trace reached 2^52 µs (the year 2112), past the algorithms' bound: fewer steps or shorter gaps", i)
				}
				if c.backwards && rng.IntN(50) == 0 {
					now -= draw(rng, c.maxGap)
				}
				r := algos.Request{Now: now, Cost: cost(rng, c.maxCost)}
				if c.logScale && rng.IntN(2) == 0 {
					r.Cost = logGap(rng, c.maxCost)
				}
				if c.maxWait > 0 && rng.IntN(4) == 0 {
					r.MaxWait = draw(rng, c.maxWait)
				}
				r.Partial = c.partial && rng.IntN(4) == 0
				if c.leases {
					if len(held) > 0 && rng.IntN(2) == 0 {
						j := rng.IntN(len(held))
						r.ID, r.Release = held[j], true
						held = slices.Delete(held, j, j+1)
					} else {
						r.ID = nextID
						nextID++
					}
				}
				r.DryRun = !r.Release && rng.IntN(5) == 0
				want := goDecide(c.alg, &st, r)
				var got algos.Decision
				var err error
				if rng.IntN(2) == 0 {
					got, err = s.DecideOne(ctx, key, c.alg, r)
				} else {
					ops := []*rules.Op{{Key: key, Alg: c.alg, Req: r}, {Key: key + ":other", Alg: c.alg, Req: r}}
					s.Decide(ctx, ops)
					got, err = ops[0].Dec, errors.Join(ops[0].Err, ops[1].Err)
					if w := goDecide(c.alg, &other, r); err == nil && ops[1].Dec != w {
						t.Fatalf("step %d %+v, the batch's second key:\n  go  %+v\n  lua %+v", i, r, w, ops[1].Dec)
					}
				}
				if err != nil {
					t.Fatalf("step %d %+v: %v", i, r, err)
				}
				if got != want {
					t.Fatalf("step %d %+v:\n  go  %+v\n  lua %+v", i, r, want, got)
				}
				if c.leases && got.Allowed && !r.Release && r.Cost > 0 && !r.DryRun {
					held = append(held, r.ID)
				}
				rst, err := s.State(ctx, key, c.alg)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				same := c.sameState
				if same == nil {
					same = equalState
				}
				if !same(st, rst) {
					t.Fatalf("step %d %+v: states differ\n  go  %+v\n  lua %+v", i, r, st, rst)
				}
			}
		})
	}
}

// goDecide is a store's decision in Go: a dry run decides on a copy of the state, as the memory
// store does. TTL is left out, as the scripts do not reply it.
func goDecide(alg algos.Algorithm, st *algos.State, r algos.Request) algos.Decision {
	if r.DryRun {
		cp := *st
		cp.Log = slices.Clone(st.Log)
		st = &cp
	}
	d := alg.Decide(st, r)
	d.TTL = 0
	return d
}

func equalState(a, b algos.State) bool {
	return a.W == b.W && a.Ban == b.Ban && slices.Equal(a.Log, b.Log)
}

// gap draws a time step: often none, often small, sometimes up to max.
func gap(rng *rand.Rand, max int64) int64 {
	switch rng.IntN(8) {
	case 0:
		return 0
	case 1, 2, 3:
		return rng.Int64N(max/1000 + 1)
	case 4, 5, 6:
		return rng.Int64N(max/20 + 1)
	default:
		return rng.Int64N(max + 1)
	}
}

// cost draws a cost: mostly 1, sometimes 0 (a peek), sometimes up to max.
func cost(rng *rand.Rand, max int64) int64 {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1, 2:
		return rng.Int64N(max + 1)
	default:
		return min(1, max)
	}
}

// must unwraps a constructor's result in a table.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
