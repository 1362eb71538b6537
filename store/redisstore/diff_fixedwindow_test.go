package redisstore

import (
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

func TestDiffFixedWindow(t *testing.T) {
	runDiff(t, []diffCase{
		{name: "3 per second", alg: must(algos.NewFixedWindow(3, algos.Second)), maxGap: 600 * algos.Millisecond, maxCost: 4, backwards: true},
		{name: "10 per second, waits, partial", alg: must(algos.NewFixedWindow(10, algos.Second)), maxGap: 300 * algos.Millisecond, maxCost: 12, maxWait: 3 * algos.Second, partial: true, backwards: true},
		{name: "1 per µs", alg: must(algos.NewFixedWindow(1, 1)), maxGap: 3, maxCost: 2, maxWait: 2, partial: true, backwards: true},
		{name: "7 per day", alg: must(algos.NewFixedWindow(7, algos.Day)), maxGap: 6 * algos.Hour, maxCost: 9, maxWait: algos.Day, backwards: true},
		{name: "extreme: 10^15 per 10 years", alg: must(algos.NewFixedWindow(algos.MaxCount, algos.MaxSpan)), steps: 3000, maxGap: 30 * algos.Day, maxCost: 1 << 50, maxWait: algos.MaxWaitCap, partial: true, backwards: true},
		{name: "extreme: 2^40 per ms", alg: must(algos.NewFixedWindow(1<<40, algos.Millisecond)), maxGap: 3 * algos.Millisecond, maxCost: 1 << 41, maxWait: algos.Millisecond, partial: true, backwards: true},
		{name: "banned", alg: must(algos.NewBan(must(algos.NewFixedWindow(5, algos.Second)), 2*algos.Second)), maxGap: algos.Second, maxCost: 6, maxWait: algos.Second, backwards: true},
	})
}
