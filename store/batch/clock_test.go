package batch_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/redisstore"
)

// TestClockSteps: the nodes' clocks step back or forward in the middle of traffic (a wall clock
// set by hand or by NTP, injected here), while Redis keeps true time. Units held across a step
// must not outlive their lease in true time: in no window of the rule do the nodes together
// admit more than the limit. (With the wall clock read directly and no check for steps, a step
// back of 1 s let units granted for one window be spent in the next: 139 here, in a window of
// 100.) The nodes read their clocks every millisecond, as a node under traffic does: a step back
// is seen at the first reading after it.
func TestClockSteps(t *testing.T) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{CallerClock: true})
	const limit = 100
	for _, c := range []struct {
		name string
		step int64
	}{
		{"back 1 s", -algos.Second}, {"back 10 s", -10 * algos.Second}, {"back 5 ms", -5 * algos.Millisecond},
		{"forward 1 s", algos.Second}, {"forward 10 s", 10 * algos.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Batches of exactly 40: node 0 takes one with a single request just before a
			// window ends and holds 39 units across the boundary; then every node sends a burst
			// at the start of each of the next windows. Each node's clock steps at its own
			// moment, node 0's right after it took its batch.
			r := rule(t, `{"algorithm": "fixed_window", "limit": 100, "window": "1s"}`, `{"max": 40, "min": 40}`)
			var truth clock
			truth.t.Store(1_000_000 * algos.Second)
			var offsets [4]atomic.Int64
			var ns []*batch.Store
			for i := range offsets {
				ns = append(ns, batch.New(rs, batch.Options{Now: func() int64 { return truth.now() + offsets[i].Load() }}))
			}
			key := "steps:" + c.name
			admitted := map[int64]int{} // by window of true time
			start := truth.now()
			for ms := int64(0); ms < 5000; ms++ {
				now := start + ms*algos.Millisecond
				truth.t.Store(now)
				for i, n := range ns {
					if ms == 2995+int64(i)*2 {
						offsets[i].Store(c.step)
					}
					cost := int64(1)
					if (ms < 3000 || ms%1000 >= 100) && !(i == 0 && ms == 2990) {
						cost = 0 // a peek: the node reads its clock, as it does for every request
					}
					calls := []*rules.Op{opOf(key, r.Alg, algos.Request{Now: now, Cost: cost})}
					n.Decide(context.Background(), calls)
					if calls[0].Err != nil {
						t.Fatal(calls[0].Err)
					}
					if calls[0].Dec.Allowed && cost > 0 {
						admitted[now/algos.Second]++
					}
				}
			}
			total := 0
			for w, got := range admitted {
				total += got
				if got > limit {
					t.Errorf("window %d: %d admitted, limit %d", w-start/algos.Second, got, limit)
				}
			}
			if total < 2*limit {
				t.Errorf("%d admitted in the 2 windows of %d with bursts: the nodes stopped admitting", total, limit)
			}
		})
	}
}
