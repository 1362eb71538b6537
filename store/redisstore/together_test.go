package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// TestGoldenTogether replays Together's golden vectors (shared/algos' testdata/together.json,
// recorded from the tables that pin the Go twin) through DecideTogether, the mixed script's
// all-or-nothing groups, on a real redis-server: each limit's decision, whether it was committed,
// and the verdict must be the ones the vector pins.
func TestGoldenTogether(t *testing.T) {
	var traces []struct {
		Test  string
		Parts []algos.Script
		Steps []struct {
			Now      int64
			Denied   bool
			Admitted bool
			Parts    []struct {
				Cost    int64 `json:"cost"`
				MaxWait int64 `json:"max_wait"`
				ID      int64 `json:"id"`
				Shadow  bool  `json:"shadow"`
				vectorDecision
				Committed bool `json:"committed"`
			}
		}
	}
	readVectors(t, "together.json", &traces)
	if len(traces) < 5 {
		t.Fatalf("only %d golden vectors", len(traces))
	}
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	const shift = 10_000 * algos.Day // times ≥ 0, windows where they were (see TestGoldenLua)
	for _, tr := range traces {
		for j, st := range tr.Steps {
			ops := make([]*rules.Op, len(st.Parts))
			for i, p := range st.Parts {
				ops[i] = &rules.Op{Key: fmt.Sprintf("together:%s:%d", tr.Test, i), Alg: scripted(tr.Parts[i]),
					Req: algos.Request{Now: st.Now + shift, Cost: p.Cost, MaxWait: p.MaxWait, ID: p.ID}, Shadow: p.Shadow}
			}
			s.DecideTogether(context.Background(), ops, st.Denied)
			for i, p := range st.Parts {
				op, want := ops[i], p.decision()
				if op.Err != nil || op.Dec != want || op.Req.DryRun == p.Committed {
					t.Fatalf("%s, step %d, limit %d (%s, %+v): %v\n  lua    %+v committed %v\n  golden %+v committed %v",
						tr.Test, j, i, tr.Parts[i].Name, op.Req, op.Err, op.Dec, !op.Req.DryRun, want, p.Committed)
				}
			}
		}
	}
}

// togetherLimits are the limits TestDiffTogether draws a request's from: every algorithm, small
// enough that random requests meet their limits often, some with a ban.
func togetherLimits() []algos.Algorithm {
	return []algos.Algorithm{
		must(algos.NewGCRA(3, algos.Second, 4)),
		must(algos.NewBan(must(algos.NewGCRA(5, algos.Second, 2)), 2*algos.Second)),
		must(algos.NewSlidingWindow(6, algos.Second)),
		must(algos.NewSlidingWindowSub(5, algos.Second, 4)),
		must(algos.NewFixedWindow(5, algos.Second)),
		must(algos.NewBan(must(algos.NewFixedWindow(4, algos.Second)), 3*algos.Second)),
		must(algos.NewSlidingLog(4, algos.Second)),
		must(algos.NewBan(must(algos.NewSlidingLog(3, algos.Second)), algos.Second)),
		must(algos.NewLeakyBucket(4, algos.Second, 3, 1)),
		must(algos.NewConcurrency(3, 2*algos.Second)),
		must(algos.NewWarmUp(4, algos.Second, 2*algos.Second)),
		must(algos.NewCounter(algos.Second)),
	}
}

// TestDiffTogether replays random round trips through the Go twins (algos.Together for a
// request's limits, each algorithm's Decide for independent calls) and through one round trip of
// the mixed script on a real redis-server: each round trip holds several requests of 1 to 4
// limits decided together, some refused elsewhere, some limits shadows, between independent
// calls (dry runs among them) on the same keys. Every decision, every commit and every state must
// be the same.
func TestDiffTogether(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	ctx := context.Background()
	limits := togetherLimits()
	const keys = 3 // identities per limit
	states := make([][keys]algos.State, len(limits))
	rng := rand.New(rand.NewPCG(11, 12))
	now := int64(1_700_000_000_000_000)
	id := int64(0)
	key := func(l, k int) string { return fmt.Sprintf("tdiff:%d:%d", l, k) }
	seen := map[string]int{} // what the trace went through, which it must
	defer func() {
		for _, what := range []string{"admitted", "refused", "a shadow limit's denial", "a ban started by a refused request"} {
			if seen[what] < 20 {
				t.Errorf("the trace saw %q %d times: %v", what, seen[what], seen)
			}
		}
	}()
	for trip := range 1500 {
		now += gap(rng, 2*algos.Second)
		var gs []group
		type planned struct {
			l, k []int
			ops  []*rules.Op
		}
		var plan []planned
		for range 1 + rng.IntN(4) {
			var p planned
			together := rng.IntN(4) != 0
			n := 1 + rng.IntN(4)
			seen := map[int]bool{}
			for range n {
				l := rng.IntN(len(limits))
				if together && seen[l] { // a request's limits are distinct
					continue
				}
				seen[l] = true
				k := rng.IntN(keys)
				r := algos.Request{Now: now, Cost: cost(rng, 3)}
				if rng.IntN(5) == 0 {
					r.MaxWait = rng.Int64N(algos.Second)
				}
				if _, ok := limits[l].(*algos.Concurrency); ok {
					id++
					r.ID = id
				}
				if !together {
					r.DryRun = rng.IntN(4) == 0
				}
				p.l, p.k = append(p.l, l), append(p.k, k)
				p.ops = append(p.ops, &rules.Op{Key: key(l, k), Alg: limits[l], Req: r, Shadow: together && rng.IntN(5) == 0})
			}
			plan = append(plan, p)
			gs = append(gs, group{ops: p.ops, together: together, denied: together && rng.IntN(6) == 0})
		}
		s.send(ctx, gs)
		for gi, g := range gs {
			p := plan[gi]
			if !g.together {
				for i, op := range g.ops {
					want := goDecide(limits[p.l[i]], &states[p.l[i]][p.k[i]], op.Req)
					if op.Err != nil || op.Dec != want {
						t.Fatalf("trip %d group %d call %d on %s %+v: %v\n  go  %+v\n  lua %+v", trip, gi, i, op.Key, op.Req, op.Err, want, op.Dec)
					}
				}
				continue
			}
			parts := make([]algos.Part, len(g.ops))
			for i, op := range g.ops {
				parts[i] = algos.Part{Alg: limits[p.l[i]], State: &states[p.l[i]][p.k[i]], Req: op.Req, Shadow: op.Shadow}
				parts[i].Req.DryRun = false
			}
			if algos.Together(parts, g.denied) {
				seen["admitted"]++
			} else {
				seen["refused"]++
			}
			for i := range parts {
				switch {
				case parts[i].Shadow && !parts[i].Dec.Allowed:
					seen["a shadow limit's denial"]++
				case !parts[i].Dec.Allowed && parts[i].Committed:
					seen["a ban started by a refused request"]++
				}
			}
			for i, op := range g.ops {
				want := parts[i].Dec
				want.TTL = 0
				if op.Err != nil || op.Dec != want || op.Req.DryRun == parts[i].Committed {
					t.Fatalf("trip %d group %d (denied %v) limit %d on %s %+v shadow %v: %v\n  go  %+v committed %v\n  lua %+v committed %v",
						trip, gi, g.denied, i, op.Key, op.Req, op.Shadow, op.Err, want, parts[i].Committed, op.Dec, !op.Req.DryRun)
				}
			}
		}
		if trip%10 == 0 || trip > 1400 {
			for l := range limits {
				for k := range keys {
					got, err := s.State(ctx, key(l, k), limits[l])
					if err != nil {
						t.Fatal(err)
					}
					same := equalState
					if _, ok := limits[l].(*algos.Concurrency); ok {
						same = sameLeases
					}
					if !same(states[l][k], got) {
						t.Fatalf("trip %d: %s (%s): states differ\n  go  %+v\n  lua %+v", trip, key(l, k), limits[l].Script().Name, states[l][k], got)
					}
				}
			}
		}
	}
}

// TestTogetherOneCall: the limits of a request, on a standalone Redis, are one script call
// (DecideTogether), whatever their algorithms; nothing is written when one of them fails.
func TestTogetherOneCall(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, Options{})
	ctx := context.Background()
	ops := func(suffix string) []*rules.Op {
		return []*rules.Op{
			{Key: "ip" + suffix, Alg: must(algos.NewGCRA(20, algos.Hour, 20)), Req: algos.Request{Cost: 1}},
			{Key: "path" + suffix, Alg: must(algos.NewSlidingWindow(20, algos.Hour)), Req: algos.Request{Cost: 1}},
			{Key: "global" + suffix, Alg: must(algos.NewFixedWindow(20, algos.Hour)), Req: algos.Request{Cost: 1}},
		}
	}
	s.DecideTogether(ctx, ops(":warm"), false) // loads the script
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		o := ops("")
		s.DecideTogether(ctx, o, false)
		for _, op := range o {
			if op.Err != nil || !op.Dec.Allowed || op.Req.DryRun || op.Dec.Remaining != int64(19-i) {
				t.Fatalf("request %d on %s: %+v %v, dry %v; want admitted, committed, %d left", i, op.Key, op.Dec, op.Err, op.Req.DryRun, 19-i)
			}
		}
	}
	stats, err := srv.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := stats["evalsha"].Calls + stats["eval"].Calls; n != 10 {
		t.Errorf("10 requests of 3 limits made %d script calls, want 10", n)
	}
	// A limit whose key holds another type fails the request's every limit: nothing is taken.
	bad, _ := s.Keys("path:bad")
	if err := c.HSet(ctx, bad, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	o := ops("")
	o[1].Key = "path:bad"
	s.DecideTogether(ctx, o, false)
	for i, op := range o {
		if op.Err == nil || !strings.Contains(op.Err.Error(), "WRONGTYPE") || !op.Req.DryRun {
			t.Errorf("limit %d beside a failing one: %+v %v, dry %v; want WRONGTYPE and nothing committed", i, op.Dec, op.Err, op.Req.DryRun)
		}
	}
	o = ops("")
	for _, op := range o {
		op.Req.Cost = 0
	}
	s.DecideTogether(ctx, o, false)
	for _, op := range o {
		if op.Err != nil || op.Dec.Remaining != 10 {
			t.Errorf("a peek after the failed request, %s: %+v %v; want the 10 units the 10th request left", op.Key, op.Dec, op.Err)
		}
	}
}

// TestTogetherCluster: on a Redis Cluster, under a prefix that holds a hash tag, every key of a
// request is in one slot and the request is one call, all or nothing; otherwise its keys are in
// several slots, and the request is two round trips (a dry run, then the commit), all or nothing
// across them.
func TestTogetherCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	defer c.Close()
	ctx := context.Background()
	fw := must(algos.NewFixedWindow(2, algos.Minute))
	sent := &sentCommands{}
	c.AddHook(sent)
	for _, tc := range []struct {
		prefix string
		trips  int
	}{{"apart:", 2}, {"{tenant}:", 1}} {
		s := New(c, Options{Prefix: tc.prefix})
		o := func(costs ...int64) []*rules.Op {
			var ops []*rules.Op
			for i, k := range []string{"a", "b", "c"} {
				ops = append(ops, &rules.Op{Key: k, Alg: fw, Req: algos.Request{Cost: costs[i]}})
			}
			return ops
		}
		s.DecideTogether(ctx, o(1, 1, 1), false) // loads the script on every node
		sent.names = nil
		ops := o(1, 1, 1)
		s.DecideTogether(ctx, ops, false)
		for _, op := range ops {
			if op.Err != nil || !op.Dec.Allowed || op.Dec.Remaining != 0 || op.Req.DryRun {
				t.Fatalf("%s: %s: %+v %v; want admitted with 0 left", tc.prefix, op.Key, op.Dec, op.Err)
			}
		}
		if len(sent.names) != tc.trips {
			t.Errorf("%s: %d round trips (%v), want %d", tc.prefix, len(sent.names), sent.names, tc.trips)
		}
		// c is full: the others keep their unit, in one slot or apart.
		for _, k := range []string{"a", "b"} {
			st, _ := s.Keys(k)
			if err := c.Del(ctx, st).Err(); err != nil {
				t.Fatal(err)
			}
		}
		ops = o(1, 1, 1)
		s.DecideTogether(ctx, ops, false)
		if ops[2].Dec.Allowed || ops[2].Req.DryRun == false {
			t.Fatalf("%s: the full limit: %+v, committed %v", tc.prefix, ops[2].Dec, !ops[2].Req.DryRun)
		}
		for _, op := range ops[:2] {
			if op.Err != nil || !op.Dec.Allowed || !op.Req.DryRun {
				t.Errorf("%s: %s beside the full limit: %+v %v, committed %v; want a dry run", tc.prefix, op.Key, op.Dec, op.Err, !op.Req.DryRun)
			}
			if d, err := s.DecideOne(ctx, op.Key, fw, algos.Request{}); err != nil || d.Remaining != 2 {
				t.Errorf("%s: %s has %d left (%v), want its 2", tc.prefix, op.Key, d.Remaining, err)
			}
		}
	}
}
