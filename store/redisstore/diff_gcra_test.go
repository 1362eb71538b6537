package redisstore

import (
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

func TestDiffGCRA(t *testing.T) {
	runDiff(t, []diffCase{
		{name: "5 per second", alg: must(algos.NewGCRA(1, algos.Second, 5)), maxGap: 3 * algos.Second, maxCost: 7, backwards: true},
		{name: "3 per second, burst 10, waits", alg: must(algos.NewGCRA(3, algos.Second, 10)), maxGap: algos.Second, maxCost: 12, maxWait: 2 * algos.Second, partial: true},
		{name: "1M per second", alg: must(algos.NewGCRA(1_000_000, algos.Second, 1000)), maxGap: 2000, maxCost: 1500, backwards: true, partial: true},
		{name: "7 per day, burst 1", alg: must(algos.NewGCRA(7, algos.Day, 1)), maxGap: 6 * algos.Hour, maxCost: 2, maxWait: algos.Day, backwards: true},
		{name: "extreme: 2^40 burst", alg: must(algos.NewGCRA(1<<30, 1<<10, 1<<40)), maxGap: 1 << 20, maxCost: 1 << 41, maxWait: 1 << 12, partial: true, backwards: true},
		{name: "banned", alg: must(algos.NewBan(must(algos.NewGCRA(10, algos.Second, 3)), 2*algos.Second)), maxGap: algos.Second, maxCost: 4, backwards: true},
	})
}
