package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
)

func TestDiffSlidingLog(t *testing.T) {
	runDiff(t, []diffCase{
		{name: "1 per second", alg: must(algos.NewSlidingLog(1, algos.Second)), maxGap: 2 * algos.Second, maxCost: 2, backwards: true},
		{name: "5 per second, waits", alg: must(algos.NewSlidingLog(5, algos.Second)), maxGap: algos.Second, maxCost: 7, maxWait: 2 * algos.Second, backwards: true},
		{name: "100 per 10 ms, partial", alg: must(algos.NewSlidingLog(100, 10*algos.Millisecond)), maxGap: 2 * algos.Millisecond, maxCost: 150, partial: true, maxWait: 5 * algos.Millisecond},
		{name: "3 per µs", alg: must(algos.NewSlidingLog(3, 1)), maxGap: 3, maxCost: 4, backwards: true, partial: true, maxWait: 2},
		{name: "20 per day", alg: must(algos.NewSlidingLog(20, algos.Day)), maxGap: 2 * algos.Hour, maxCost: 25, maxWait: algos.Day, partial: true, backwards: true},
		// Times stay below 2^52 (the constructor's premise): 10,000 steps advance about 720·maxGap.
		{name: "extreme: longest window", alg: must(algos.NewSlidingLog(4, algos.MaxSpan)), maxGap: 1 << 38, maxCost: 5, maxWait: algos.MaxWaitCap, backwards: true},
		{name: "30 days, waits", alg: must(algos.NewSlidingLog(6, 30*algos.Day)), maxGap: 20 * algos.Day, maxCost: 7, maxWait: 40 * algos.Day, partial: true, backwards: true},
		// A full log of 10,000 members is read back after every step: fewer steps.
		{name: "extreme: MaxLogLimit", alg: must(algos.NewSlidingLog(algos.MaxLogLimit, algos.Minute)), steps: 500, maxGap: 10 * algos.Second, maxCost: 12_000, maxWait: algos.Minute, partial: true, backwards: true},
		{name: "banned", alg: must(algos.NewBan(must(algos.NewSlidingLog(3, algos.Second)), 2*algos.Second)), maxGap: algos.Second, maxCost: 4, backwards: true},
	})
}

// TestDiffSlidingLogTTL: on Redis's clock, the sorted set holds one member per unit and expires
// when its newest entry leaves the window.
func TestDiffSlidingLogTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, Options{})
	ctx := context.Background()
	l := must(algos.NewSlidingLog(3, 10*algos.Second))
	for i, want := range []bool{true, true, true, false} {
		d, err := s.DecideOne(ctx, "user:1", l, algos.Request{Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want {
			t.Fatalf("request %d: %+v, want allowed=%v", i, d, want)
		}
	}
	key, _ := s.Keys("user:1")
	if n := c.ZCard(ctx, key).Val(); n != 3 {
		t.Errorf("%d members, want 3", n)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 9*time.Second || ttl > 10*time.Second+time.Millisecond {
		t.Errorf("TTL %v, want about 10 s", ttl)
	}
}
