package batch_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/redisstore"
)

// clock is a virtual µs clock shared by the nodes of a test and passed to Redis (CallerClock).
type clock struct{ t atomic.Int64 }

func (c *clock) now() int64 { return c.t.Load() }

// rule decodes one cluster rule with a batch block.
func rule(t *testing.T, limit, batch string) *rules.Rule {
	t.Helper()
	v, err := conf.ParseJSON([]byte(`{"name":"r","mode":"cluster","limit":` + limit + `,"batch":` + batch + `}`))
	if err != nil {
		t.Fatal(err)
	}
	errs := &conf.Errors{}
	r := rules.DecodeRule(conf.Read(v, errs))
	if err := errs.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// node is one gateway: a batch store in front of the shared Redis.
func nodes(t *testing.T, n int, clk *clock) ([]*batch.Store, *redistest.Server) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{CallerClock: true})
	var out []*batch.Store
	for range n {
		out = append(out, batch.New(rs, batch.Options{Now: clk.now}))
	}
	return out, srv
}

// decided is an op as a batch store decided it, and whether it answered it from what it holds.
type decided struct {
	rules.Op
	Cached bool
}

func decide(s *batch.Store, alg algos.Algorithm, key string, now int64, dry bool) decided {
	op := opOf(key, alg, algos.Request{Now: now, Cost: 1, DryRun: dry})
	held := s.DecideHeld(context.Background(), []*rules.Op{op})
	return decided{*op, held == 1}
}

// opOf is the op of a request on alg, in its batched mode if it has one (rules.NewOp's Batch).
func opOf(key string, alg algos.Algorithm, req algos.Request) *rules.Op {
	b, _ := alg.(*rules.Batched)
	return &rules.Op{Key: key, Alg: alg, Req: req, Batch: b}
}

// TestNeverOverAdmits replays random traffic from four nodes, from well below to far above the
// limit, and checks every admission against the limit's own promise: batched units never let more
// through than the rule allows.
func TestNeverOverAdmits(t *testing.T) {
	const s = algos.Second
	cases := []struct {
		name, limit string
		check       algotest.Contract
		batch       string // default {"max":20}
	}{
		{"fixed_window", `{"algorithm":"fixed_window","limit":50,"window":"1s"}`, algotest.PerWindow(50, s), ""},
		// Units that expire before their window ends go back to Redis.
		{"fixed_window, max_age 200ms", `{"algorithm":"fixed_window","limit":50,"window":"1s"}`, algotest.PerWindow(50, s), `{"max":20,"max_age":"200ms"}`},
		{"sliding_window", `{"algorithm":"sliding_window","limit":50,"window":"1s"}`, algotest.PerWindow(50, s), ""},
		{"sliding_log", `{"algorithm":"sliding_log","limit":50,"window":"1s"}`, algotest.Sliding(50, s), ""},
		{"token_bucket", `{"algorithm":"token_bucket","rate":50,"period":"1s","burst":20}`, algotest.Bucket(50, s, 20), ""},
		{"leaky_bucket", `{"algorithm":"leaky_bucket","rate":50,"period":"1s","burst":19,"nodelay":true}`, algotest.Bucket(50, s, 20), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bo := tc.batch
			if bo == "" {
				bo = `{"max":20}`
			}
			r := rule(t, tc.limit, bo)
			clk := &clock{}
			clk.t.Store(1_000 * s)
			ns, _ := nodes(t, 4, clk)
			rng := rand.New(rand.NewPCG(1, 2))
			var admitted []int64
			offered := 0
			// Four phases of 3 s: 0.5×, 1×, 4× and 0.8× the limit's rate of 50/s.
			for _, rate := range []int64{25, 50, 200, 40} {
				end := clk.now() + 3*s
				for clk.now() < end {
					clk.t.Add(1 + rng.Int64N(2*s/rate))
					offered++
					c := decide(ns[rng.IntN(len(ns))], r.Alg, "k", clk.now(), false)
					if c.Err != nil {
						t.Fatal(c.Err)
					}
					if c.Dec.Allowed {
						admitted = append(admitted, clk.now())
					}
				}
			}
			if over := tc.check(admitted); over > 0 {
				t.Fatalf("over-admitted by %d units", over)
			}
			if len(admitted) < offered/4 {
				t.Fatalf("admitted %d of %d offered: batching starves the key", len(admitted), offered)
			}
			var returned int64
			for _, n := range ns {
				returned += n.Stats().Returned
			}
			t.Logf("offered %d, admitted %d, units given back %d", offered, len(admitted), returned)
		})
	}
}

// TestCutsRedisCalls: at a steady load below the limit, spread over four nodes, Redis sees at
// least ten times fewer calls than requests, and nothing is refused.
func TestCutsRedisCalls(t *testing.T) {
	const s = algos.Second
	for _, limit := range []string{
		`{"algorithm":"fixed_window","limit":1000,"window":"1s"}`,
		`{"algorithm":"token_bucket","rate":1000,"period":"1s"}`,
		`{"algorithm":"sliding_log","limit":1000,"window":"1s"}`,
	} {
		r := rule(t, limit, `{"max":100}`)
		clk := &clock{}
		clk.t.Store(1_000 * s)
		ns, srv := nodes(t, 4, clk)
		decide(ns[0], r.Alg, "warm-up", clk.now(), false) // loads the script: one EVAL after a NOSCRIPT
		before, err := srv.CommandStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		requests, denied := 0, 0
		for i := range 8000 { // 800 requests a second for 10 s
			clk.t.Add(1250)
			requests++
			if c := decide(ns[i%4], r.Alg, "k", clk.now(), false); c.Err != nil || !c.Dec.Allowed {
				denied++
			}
		}
		after, err := srv.CommandStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		calls := after["evalsha"].Calls - before["evalsha"].Calls
		var st batch.Stats
		for _, n := range ns {
			x := n.Stats()
			st.Batches += x.Batches
			if n == ns[0] {
				st.Batches-- // the warm-up
			}
			st.Granted += x.Granted
			st.Spent += x.Spent
			st.Expired += x.Expired
		}
		t.Logf("%s: %d requests, %d Redis calls (%.1f× fewer), %d denied; granted %d, expired %d",
			r.Algorithm, requests, calls, float64(requests)/float64(calls), denied, st.Granted, st.Expired)
		if calls*10 > int64(requests) {
			t.Errorf("%s: %d Redis calls for %d requests: less than a 10× cut", r.Algorithm, calls, requests)
		}
		if denied > 0 {
			t.Errorf("%s: %d of %d requests denied at 80%% of the limit", r.Algorithm, denied, requests)
		}
		if st.Batches != calls {
			t.Errorf("%s: Stats counted %d batches, Redis %d calls", r.Algorithm, st.Batches, calls)
		}
	}
}

// TestUnitsExpire: units a node holds past their life are not spent: another node gets them
// back from Redis only after the window, and the node itself asks again.
func TestUnitsExpire(t *testing.T) {
	const s = algos.Second
	r := rule(t, `{"algorithm":"fixed_window","limit":10,"window":"1s"}`, `{"min":10,"max":10}`)
	clk := &clock{}
	clk.t.Store(1_000 * s)
	ns, _ := nodes(t, 2, clk)
	if c := decide(ns[0], r.Alg, "k", clk.now(), false); !c.Dec.Allowed || c.Cached {
		t.Fatalf("first request: %+v", c)
	}
	// Node 0 holds the other 9 units of this window: node 1 is refused until the next one.
	c := decide(ns[1], r.Alg, "k", clk.now()+1, false)
	if c.Dec.Allowed || c.Dec.RetryAfter != s-1 {
		t.Fatalf("node 1 in the same window: %+v, want a denial with retry-after %d", c.Dec, s-1)
	}
	clk.t.Add(s)
	if c := decide(ns[0], r.Alg, "k", clk.now(), false); !c.Dec.Allowed || c.Cached {
		t.Fatalf("node 0 in the next window must ask Redis again: %+v", c)
	}
	if st := ns[0].Stats(); st.Expired != 9 || st.Granted != 20 || st.Spent != 2 {
		t.Fatalf("stats %+v, want 9 expired, 20 granted, 2 spent", st)
	}
	if c := decide(ns[1], r.Alg, "k", clk.now(), false); c.Dec.Allowed {
		t.Fatalf("node 1 got a unit node 0 holds: %+v", c.Dec)
	}
}

// TestDryRunTakesNothing: a dry run is answered from held units without spending them.
func TestDryRunTakesNothing(t *testing.T) {
	const s = algos.Second
	r := rule(t, `{"algorithm":"fixed_window","limit":3,"window":"1s"}`, `{"min":3,"max":3}`)
	clk := &clock{}
	clk.t.Store(1_000 * s)
	ns, _ := nodes(t, 1, clk)
	for i := range 5 {
		if c := decide(ns[0], r.Alg, "k", clk.now(), true); !c.Dec.Allowed || c.Dec.Granted != 0 {
			t.Fatalf("dry run %d: %+v", i, c.Dec)
		}
	}
	for i := range 3 {
		c := decide(ns[0], r.Alg, "k", clk.now(), false)
		if !c.Dec.Allowed || !c.Cached || c.Dec.Remaining != int64(2-i) || c.Dec.Limit != 3 {
			t.Fatalf("request %d: %+v cached %v", i, c.Dec, c.Cached)
		}
	}
	if c := decide(ns[0], r.Alg, "k", clk.now(), false); c.Dec.Allowed {
		t.Fatalf("fourth request: %+v", c.Dec)
	}
}

// failing is a backend whose Redis is gone.
type failing struct{ calls atomic.Int64 }

func (f *failing) Decide(_ context.Context, calls []*rules.Op) {
	f.calls.Add(1)
	for i := range calls {
		calls[i].Err = errors.New("connection refused")
	}
}

// TestBackendError: a batch Redis could not grant leaves the error for the fail policy and holds
// nothing.
func TestBackendError(t *testing.T) {
	r := rule(t, `{"algorithm":"fixed_window","limit":3,"window":"1s"}`, `{"max":3}`)
	f := &failing{}
	s := batch.New(f, batch.Options{})
	for range 3 {
		c := decide(s, r.Alg, "k", 0, false)
		if c.Err == nil || c.Cached || c.Dec.Allowed {
			t.Fatalf("%+v", c)
		}
	}
	if f.calls.Load() != 3 {
		t.Fatalf("%d backend calls, want 3", f.calls.Load())
	}
}

// TestPassThrough: calls of rules that are not batched reach Redis as they are.
func TestPassThrough(t *testing.T) {
	alg, err := algos.NewFixedWindow(2, algos.Second)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.t.Store(1_000 * algos.Second)
	ns, _ := nodes(t, 1, clk)
	for i, want := range []bool{true, true, false} {
		c := decide(ns[0], alg, "k", clk.now(), false)
		if c.Cached || c.Dec.Allowed != want {
			t.Fatalf("request %d: %+v cached %v", i, c.Dec, c.Cached)
		}
	}
	if st := ns[0].Stats(); st.Direct != 3 || st.Batches != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestConcurrentNodes: many goroutines on four nodes with the wall clock, under the race
// detector: the window's limit holds in total.
func TestConcurrentNodes(t *testing.T) {
	r := rule(t, `{"algorithm":"fixed_window","limit":300,"window":"1h"}`, `{"max":25}`)
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		s := batch.New(rs, batch.Options{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					c := decide(s, r.Alg, "k", 0, false)
					if c.Err != nil {
						t.Error(c.Err)
						return
					}
					if c.Dec.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	// 1,600 requests for a limit of 300 in the hour: every unit is batched, at most 300 spent.
	if a := admitted.Load(); a > 300 || a < 200 {
		t.Fatalf("admitted %d, want at most 300 and most of them", a)
	}
}

// TestGrantNearWindowEnd: a batch whose fixed window ends during its round trip is over when
// it arrives, yet the request that asked for it is admitted from it, as exact mode admits it
// (Redis counted it in that window); it was refused, with units to spare, and reported no grant.
func TestGrantNearWindowEnd(t *testing.T) {
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{CallerClock: true})
	var clk atomic.Int64
	const trip = 600 // µs the node's clock moves at each reading: a round trip crosses the window's end
	s := batch.New(rs, batch.Options{Now: func() int64 { return clk.Add(trip) }})
	r := rule(t, `{"algorithm":"fixed_window","limit":1000,"window":"1s"}`, `{"max":20}`)
	for _, at := range []int64{999_900, 1_999_990, 2_999_500} {
		clk.Store(at)
		if d := decide(s, r.Alg, "k", at, false); !d.Dec.Allowed || d.Dec.Granted != 1 {
			t.Errorf("at %d µs, the request that asked for a batch: %+v, want admitted, 1 granted", at, d.Dec)
		}
	}
}
