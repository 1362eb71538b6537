package redisstore

import (
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

func TestDiffWarmUp(t *testing.T) {
	s, ms, d := algos.Second, algos.Millisecond, algos.Day
	runDiff(t, []diffCase{
		{name: "Guava: 2 per second, warm-up 4 s", alg: must(algos.NewWarmUp(2, s, 4*s)), maxGap: 3 * s, maxCost: 10, backwards: true, maxWait: 5 * s},
		{name: "3 per second, warm-up 10 s, partial", alg: must(algos.NewWarmUp(3, s, 10*s)), maxGap: 12 * s, maxCost: 40, maxWait: 3 * s, partial: true},
		{name: "1 per ms, warm-up 100 ms", alg: must(algos.NewWarmUp(1, ms, 100*ms)), maxGap: 20 * ms, maxCost: 3, maxWait: 10 * ms, backwards: true},
		{name: "1M per second, warm-up 1 s", alg: must(algos.NewWarmUp(1_000_000, s, s)), maxGap: 2000, maxCost: 1500, backwards: true, partial: true, maxWait: 500},
		{name: "tiny: max 1 permit", alg: must(algos.NewWarmUp(1, s, s)), maxGap: 3 * s, maxCost: 2, maxWait: 2 * s, backwards: true},
		{name: "7 per day, warm-up 2 days", alg: must(algos.NewWarmUp(7, d, 2*d)), maxGap: 3 * d, maxCost: 20, maxWait: d, partial: true},
		{name: "coprime: 7 per 1,000,003 µs", alg: must(algos.NewWarmUp(7, 1_000_003, 5*s)), maxGap: 6 * s, maxCost: 40, maxWait: s, backwards: true},
		{name: "extreme: W·r = 2^44", alg: must(algos.NewWarmUp(1<<20, 1<<20, 1<<44)), steps: 2000, maxGap: 1 << 42, maxCost: 1 << 45, maxWait: 1 << 43, partial: true, backwards: true},
		{name: "extreme: 999 per ms, W·r near 2^44", alg: must(algos.NewWarmUp(999, ms, (1<<44)/999)), maxGap: 1 << 33, maxCost: 1 << 35, maxWait: 1 << 34, partial: true, backwards: true},
		{name: "banned", alg: must(algos.NewBan(must(algos.NewWarmUp(10, s, 2*s)), 2*s)), maxGap: s, maxCost: 25, backwards: true},
	})
}
