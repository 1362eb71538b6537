package redisstore

import (
	"testing"

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
