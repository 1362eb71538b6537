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

// TestDiffRefund replays random batch grants (partial requests of a rule's batch algorithm)
// and refunds of random earlier grants, some after their window ended, through the Go
// transitions and the Lua twins: decisions, the stamp a partial grant replies (Req.Now) and the
// states must be equal at every step.
func TestDiffRefund(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	ctx := context.Background()
	fw := must(must(algos.NewFixedWindow(20, algos.Second)).Batching(0))
	sl := must(must(algos.NewSlidingLog(20, algos.Second)).Batching(0))
	banned := must(must(algos.NewBan(must(algos.NewFixedWindow(20, algos.Second)), algos.Second)).Batching(0))
	cases := []struct {
		name   string
		l      *algos.Batching
		maxGap int64
		stamp  func(now int64, st *algos.State) int64 // the time the Go grant's units count at
	}{
		{"fixed window", fw, 200 * algos.Millisecond, func(now int64, _ *algos.State) int64 { return now }},
		{"fixed window, banned", banned, 200 * algos.Millisecond, func(now int64, _ *algos.State) int64 { return now }},
		{"sliding log", sl, 100 * algos.Millisecond, func(_ int64, st *algos.State) int64 { return st.Log[len(st.Log)-1] }},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci)+7, 9))
			key := fmt.Sprintf("refund:%d", ci)
			var st algos.State
			type grant struct{ at, units int64 }
			var grants []grant
			now := int64(1_700_000_000_000_000)
			var back, kept int // refunds that took units back, and that did not
			for i := range 5000 {
				now += gap(rng, c.maxGap)
				if rng.IntN(50) == 0 {
					now -= gap(rng, c.maxGap) // a clock gone back
				}
				call := rules.Op{Key: key}
				var want algos.Decision
				var wantAt int64
				if len(grants) > 0 && rng.IntN(3) == 0 {
					j := rng.IntN(len(grants))
					g := grants[j]
					grants = append(grants[:j], grants[j+1:]...)
					call.Alg = c.l.Refund(g.at)
					call.Req = algos.Request{Now: now, Cost: rng.Int64N(g.units + 2), DryRun: rng.IntN(10) == 0}
					want = goDecide(call.Alg, &st, call.Req)
					if want.Granted > 0 {
						back++
					} else {
						kept++
					}
				} else {
					call.Alg = c.l.Alg
					call.Req = algos.Request{Now: now, Cost: 1 + rng.Int64N(8), Partial: true, DryRun: rng.IntN(10) == 0}
					want = goDecide(call.Alg, &st, call.Req)
					if want.Granted > 0 && !call.Req.DryRun {
						wantAt = c.stamp(now, &st)
						grants = append(grants, grant{wantAt, want.Granted})
					} else if want.Granted > 0 {
						wantAt = -1 // a dry run's stamp is not checked
					}
				}
				calls := []rules.Op{call}
				s.decideAll(ctx, calls)
				got := calls[0]
				if got.Err != nil {
					t.Fatalf("step %d: %v", i, got.Err)
				}
				var gotAt int64 // the stamp of a partial grant (rules.Op.Req)
				if got.Req.Partial && got.Dec.Granted > 0 {
					gotAt = got.Req.Now
				}
				if got.Dec != want || (wantAt >= 0 && gotAt != wantAt) {
					t.Fatalf("step %d %s %+v:\n  go  %+v at %d\n  lua %+v at %d", i, call.Alg.Script().Name, call.Req, want, wantAt, got.Dec, gotAt)
				}
				rst, err := s.State(ctx, key, c.l.Alg)
				if err != nil {
					t.Fatal(err)
				}
				if !equalState(st, rst) {
					t.Fatalf("step %d %s %+v: states differ\n  go  %+v\n  lua %+v", i, call.Alg.Script().Name, call.Req, st, rst)
				}
			}
			if back < 100 || kept < 100 {
				t.Fatalf("%d refunds took units back, %d did not: the trace misses a case", back, kept)
			}
			t.Logf("%d refunds took units back, %d did not", back, kept)
		})
	}
}
