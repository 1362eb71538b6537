package rules_test

import (
	"reflect"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// TestFallbackAt pins the algorithm a rule builds at a share of its limit: rates exact (the
// period stretched), counts rounded down to at least 1, the ban kept; 1/N is the Fallback of N
// nodes.
func TestFallbackAt(t *testing.T) {
	cases := []struct {
		name, limit string
		num, den    int64
		want        algos.Script
	}{
		{"gcra 3/5", `"algorithm": "token_bucket", "rate": 100, "burst": 20`, 3, 5,
			script(algos.NewGCRA(60, algos.Second, 12))},
		{"gcra 612/1000", `"algorithm": "token_bucket", "rate": 100, "burst": 20`, 612, 1000,
			script(algos.NewGCRA(306, 5*algos.Second, 12))}, // 61.2/s; burst 12.24 → 12
		{"gcra 1/1000 of a small burst", `"algorithm": "token_bucket", "rate": 100, "burst": 20`, 1, 1000,
			script(algos.NewGCRA(1, 10*algos.Second, 1))},
		{"fixed window 102/1000", `"algorithm": "fixed_window", "limit": 500, "window": "1s"`, 102, 1000,
			script(algos.NewFixedWindow(51, algos.Second))},
		{"sliding log 1/1", `"algorithm": "sliding_log", "limit": 500, "window": "1m"`, 1000, 1000,
			script(algos.NewSlidingLog(500, algos.Minute))},
		{"leaky bucket 1/2", `"algorithm": "leaky_bucket", "rate": 10, "burst": 7, "delay": 3`, 1, 2,
			script(algos.NewLeakyBucket(5, algos.Second, 3, 1))},
		{"warm-up 3/4", `"algorithm": "warm_up", "rate": 10, "warmup": "10s"`, 3, 4,
			script(algos.NewWarmUp(15, 2*algos.Second, 10*algos.Second))},
		{"concurrency 1/3", `"algorithm": "concurrency", "max": 10`, 1, 3,
			script(algos.NewConcurrency(3, algos.Minute))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustRule(t, `{"name": "r", "mode": "cluster", "on_error": "local", "limit": {`+c.limit+`}}`)
			a, err := r.FallbackAt(c.num, c.den)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Script(); !reflect.DeepEqual(got, c.want) {
				t.Errorf("FallbackAt(%d, %d) = %+v, want %+v", c.num, c.den, got, c.want)
			}
		})
	}

	r := mustRule(t, `{"name": "r", "mode": "cluster", "on_error": "local", "nodes": 4, "ban": "1m",
		"limit": {"algorithm": "token_bucket", "rate": 7, "burst": 9}}`)
	a, err := r.FallbackAt(250, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.Script(), r.Fallback.Script(); !reflect.DeepEqual(got, want) {
		t.Errorf("FallbackAt(250, 1000) = %+v, want the Fallback of 4 nodes %+v", got, want)
	}
	if got := a.Script().Ban; got != algos.Minute {
		t.Errorf("ban = %d, want %d", got, algos.Minute)
	}
	for _, bad := range [][2]int64{{0, 1000}, {1001, 1000}, {-1, 5}} {
		if _, err := r.FallbackAt(bad[0], bad[1]); err == nil {
			t.Errorf("FallbackAt(%d, %d) = nil error, want one", bad[0], bad[1])
		}
	}
}
