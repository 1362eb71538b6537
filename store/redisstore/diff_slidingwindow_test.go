package redisstore

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"

	"github.com/diana-gw/diana/shared/algos"
)

func TestDiffSlidingWindow(t *testing.T) {
	runDiff(t, []diffCase{
		{name: "10 per 10 s", alg: must(algos.NewSlidingWindow(10, 10*algos.Second)), maxGap: 3 * algos.Second, maxCost: 12, backwards: true},
		{name: "7 per 3 s, partial", alg: must(algos.NewSlidingWindow(7, 3*algos.Second)), maxGap: 2 * algos.Second, maxCost: 9, maxWait: algos.Second, partial: true, backwards: true},
		{name: "1 per µs", alg: must(algos.NewSlidingWindow(1, 1)), maxGap: 4, maxCost: 2, partial: true, backwards: true},
		{name: "3 per day", alg: must(algos.NewSlidingWindow(3, algos.Day)), maxGap: 8 * algos.Hour, maxCost: 4, backwards: true},
		{name: "extreme: 1 per 10 years", alg: must(algos.NewSlidingWindow(1, algos.MaxSpan)), steps: 3000, maxGap: 30 * algos.Day, maxCost: 2, partial: true, backwards: true},
		{name: "extreme: 10^15 per µs", alg: must(algos.NewSlidingWindow(algos.MaxCount, 1)), maxGap: 3, maxCost: 1 << 52, partial: true, backwards: true},
		{name: "extreme: 10^15 per 10 years", alg: must(algos.NewSlidingWindow(algos.MaxCount, algos.MaxSpan)), steps: 3000, maxGap: 30 * algos.Day, maxCost: 1 << 51, partial: true, backwards: true},
		{name: "extreme: 2^31 per 2^20 µs", alg: must(algos.NewSlidingWindow(1<<31, 1<<20)), maxGap: 1 << 20, maxCost: 1 << 32, partial: true, backwards: true},
		{name: "banned", alg: must(algos.NewBan(must(algos.NewSlidingWindow(5, algos.Second)), 2*algos.Second)), maxGap: algos.Second, maxCost: 6, backwards: true},
	})
}

// TestDiffSlidingWindowSub: the sub-window variant, whose state has more words than W holds
// from 3 sub-windows on (the rest in Log, one Redis string), at its extremes too.
func TestDiffSlidingWindowSub(t *testing.T) {
	runDiff(t, []diffCase{
		{name: "10 per 10 s in 2", alg: must(algos.NewSlidingWindowSub(10, 10*algos.Second, 2)), maxGap: 3 * algos.Second, maxCost: 12, backwards: true},
		{name: "10 per 10 s in 5", alg: must(algos.NewSlidingWindowSub(10, 10*algos.Second, 5)), maxGap: 3 * algos.Second, maxCost: 12, backwards: true},
		{name: "7 per 3 s in 7, partial", alg: must(algos.NewSlidingWindowSub(7, 3*algos.Second, 7)), maxGap: 2 * algos.Second, maxCost: 9, maxWait: algos.Second, partial: true, backwards: true},
		{name: "100 per minute in 60", alg: must(algos.NewSlidingWindowSub(100, algos.Minute, 60)), maxGap: 20 * algos.Second, maxCost: 30, partial: true, backwards: true},
		{name: "1 per 60 µs in 60", alg: must(algos.NewSlidingWindowSub(1, 60, 60)), maxGap: 200, maxCost: 2, partial: true, backwards: true},
		{name: "3 per 7 µs in 7", alg: must(algos.NewSlidingWindowSub(3, 7, 7)), maxGap: 20, maxCost: 4, backwards: true},
		{name: "in 1: as sliding_window", alg: must(algos.NewSlidingWindowSub(5, algos.Second, 1)), maxGap: algos.Second, maxCost: 6, partial: true, backwards: true},
		{name: "extreme: 1 per 10 years in 60", alg: must(algos.NewSlidingWindowSub(1, algos.MaxSpan, 60)), steps: 3000, maxGap: 30 * algos.Day, maxCost: 2, partial: true, backwards: true},
		{name: "extreme: 10^15 per 10 years in 59", alg: must(algos.NewSlidingWindowSub(algos.MaxCount, algos.MaxSpan, 59)), steps: 3000, maxGap: 30 * algos.Day, maxCost: 1 << 51, partial: true, backwards: true},
		{name: "extreme: 10^15 per 60 µs in 60", alg: must(algos.NewSlidingWindowSub(algos.MaxCount, 60, 60)), maxGap: 90, maxCost: 1 << 52, partial: true, backwards: true},
		{name: "extreme: 2^31 per 2^20 + 1 µs in 13", alg: must(algos.NewSlidingWindowSub(1<<31, 1<<20+1, 13)), maxGap: 1 << 20, maxCost: 1 << 32, partial: true, backwards: true},
		{name: "banned, in 4", alg: must(algos.NewBan(must(algos.NewSlidingWindowSub(5, algos.Second, 4)), 2*algos.Second)), maxGap: algos.Second, maxCost: 6, backwards: true},
	})
}

// TestDiffSlidingWindowSwitch: a rule whose subwindows changes keeps its key, so each variant
// reads the state another wrote; Go and Lua read it alike, and a state is never stuck.
func TestDiffSlidingWindowSwitch(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	ctx := context.Background()
	algs := []algos.Algorithm{must(algos.NewSlidingWindow(20, algos.Second)), must(algos.NewSlidingWindowSub(20, algos.Second, 2)),
		must(algos.NewSlidingWindowSub(20, algos.Second, 10)), must(algos.NewSlidingWindowSub(20, algos.Second, 60))}
	widest := algs[len(algs)-1] // reads a state of any of them
	rng := rand.New(rand.NewPCG(7, 7))
	var st algos.State
	now := int64(1_700_000_000_000_000)
	for i := range 4000 {
		alg := algs[rng.IntN(len(algs))]
		now += gap(rng, algos.Second/2)
		r := algos.Request{Now: now, Cost: cost(rng, 5), Partial: rng.IntN(4) == 0, DryRun: rng.IntN(5) == 0}
		want := goDecide(alg, &st, r)
		got, err := s.DecideOne(ctx, "switch", alg, r)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("step %d, %s %v, %+v:\n  go  %+v\n  lua %+v", i, alg.Script().Name, alg.Script().Args, r, want, got)
		}
		rst, err := s.State(ctx, "switch", widest)
		if err != nil {
			t.Fatal(err)
		}
		if rst.W != st.W || !slices.Equal(rst.Log, st.Log) {
			t.Fatalf("step %d, %v: states differ\n  go  %v %v\n  lua %v %v", i, alg.Script().Args, st.W, st.Log, rst.W, rst.Log)
		}
		if want.ResetAfter > 2*algos.Second {
			t.Fatalf("step %d, %v: ResetAfter %d µs, beyond two windows", i, alg.Script().Args, want.ResetAfter)
		}
	}
}
