package redisstore

import (
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

func TestDiffLeakyBucket(t *testing.T) {
	runDiff(t, []diffCase{
		{name: "nginx 1r/s burst 5", alg: must(algos.NewLeakyBucket(1, algos.Second, 5, algos.DelayAll)), maxGap: 3 * algos.Second, maxCost: 7, backwards: true},
		{name: "10r/s burst 5 delay 2", alg: must(algos.NewLeakyBucket(10, algos.Second, 5, 2)), maxGap: algos.Second, maxCost: 7, partial: true, maxWait: algos.Second},
		{name: "3r/s burst 10 nodelay", alg: must(algos.NewLeakyBucket(3, algos.Second, 10, algos.NoDelay)), maxGap: algos.Second, maxCost: 12, partial: true, backwards: true},
		{name: "burst 0", alg: must(algos.NewLeakyBucket(1, algos.Second, 0, algos.DelayAll)), maxGap: 2 * algos.Second, maxCost: 2, backwards: true},
		{name: "1M per second", alg: must(algos.NewLeakyBucket(1_000_000, algos.Second, 1000, 300)), maxGap: 2000, maxCost: 1500, backwards: true, partial: true},
		{name: "7 per day burst 1", alg: must(algos.NewLeakyBucket(7, algos.Day, 1, algos.DelayAll)), maxGap: 6 * algos.Hour, maxCost: 3, backwards: true, partial: true},
		{name: "extreme: 2^40 burst", alg: must(algos.NewLeakyBucket(1<<30, 1<<10, 1<<40, 1<<39)), maxGap: 1 << 20, maxCost: 1 << 41, partial: true, backwards: true},
		{name: "extreme: 10^15 per second, capacity 10^15", alg: must(algos.NewLeakyBucket(algos.MaxCount, algos.Second, algos.MaxCount-1, 5)), maxGap: 10, maxCost: 1 << 52, partial: true, backwards: true},
		{name: "banned", alg: must(algos.NewBan(must(algos.NewLeakyBucket(10, algos.Second, 3, 1)), 2*algos.Second)), maxGap: algos.Second, maxCost: 4, backwards: true},
	})
}
