// Package algotest lists configured limits that tests of the stores share.
package algotest

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// Limit is a configured algorithm and the number of unit requests it admits from a fresh state
// within a few seconds (no refill is due before an hour has passed).
type Limit struct {
	Name   string
	Alg    algos.Algorithm
	Admits int64
}

// Exact returns one limit per algorithm, each admitting exactly Admits requests at once.
func Exact() []Limit {
	return []Limit{
		{"gcra", must(algos.NewGCRA(1, algos.Hour, 100)), 100},
		{"gcra+ban", must(algos.NewBan(must(algos.NewGCRA(1, algos.Hour, 100)), algos.Hour)), 100},
		{"fixed window", must(algos.NewFixedWindow(100, algos.Day)), 100},
		{"sliding window", must(algos.NewSlidingWindow(100, algos.Day)), 100},
		{"sliding log", must(algos.NewSlidingLog(100, algos.Hour)), 100},
		{"leaky bucket", must(algos.NewLeakyBucket(1, algos.Hour, 99, algos.NoDelay)), 100},
		{"concurrency", must(algos.NewConcurrency(100, algos.Hour)), 100},
		{"warm_up", must(algos.NewWarmUp(1, algos.Hour, 100*algos.Hour)), 1}, // a cold start spaces requests
	}
}

func must(a algos.Algorithm, err error) algos.Algorithm {
	if err != nil {
		panic(err)
	}
	return a
}

// Race makes goroutines × each concurrent requests of cost 1, with unique IDs, through decide and
// returns how many were admitted. An error from decide fails the test.
func Race(t testing.TB, goroutines, each int, decide func(algos.Request) (algos.Decision, error)) int64 {
	var admitted, id atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				d, err := decide(algos.Request{Cost: 1, ID: id.Add(1)})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}
