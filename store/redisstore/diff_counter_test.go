package redisstore

import (
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

func TestDiffCounter(t *testing.T) {
	runDiff(t, []diffCase{
		{name: "per second", alg: must(algos.NewCounter(algos.Second)), maxGap: 600 * algos.Millisecond, maxCost: 4, backwards: true},
		{name: "per ms, partial", alg: must(algos.NewCounter(algos.Millisecond)), maxGap: 3 * algos.Millisecond, maxCost: 3, partial: true, backwards: true},
		{name: "per day", alg: must(algos.NewCounter(algos.Day)), maxGap: 6 * algos.Hour, maxCost: 9, backwards: true},
		{name: "extreme: near MaxCount", alg: must(algos.NewCounter(algos.MaxSpan)), steps: 3000, maxGap: 30 * algos.Day, maxCost: 1 << 47, partial: true, backwards: true},
	})
}
