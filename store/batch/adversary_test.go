package batch_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/memstore"
)

// memory is the store behind a batch store, deciding in process memory, as Redis's scripts do
// (the differential tests of store/redisstore hold them equal): fast enough to replay thousands
// of traces.
type memory struct{ m *memstore.Store }

// A partial grant reports the time its units count at, as Redis does (in Req.Now, see
// rules.Op), so that units dropped unspent are given back: for the counting algorithms, the
// request's time (a sliding log's may be later, its newest entry, which memstore does not tell:
// it reports 0, unknown, and its units are not given back here).
func (b memory) Decide(_ context.Context, calls []*rules.Op) {
	for _, c := range calls {
		c.Dec = b.m.Decide(c.Key, c.Alg, c.Req)
		if c.Req.Partial && c.Dec.Granted > 0 && c.Alg.Script().Log {
			c.Req.Now = 0
		}
	}
}

// TestAdversarialTraces replays traces built to catch batched units spent late: nodes take a batch
// and go quiet until just before it expires, then spend it in a flood together with the others;
// gaps of about a batch life and of about a window. No trace may over-admit.
func TestAdversarialTraces(t *testing.T) {
	const s = algos.Second
	cases := []struct {
		name, limit, batch string
		check              algotest.Contract
	}{
		{"fixed_window", `{"algorithm":"fixed_window","limit":20,"window":"1s"}`, `{"max":8}`, algotest.PerWindow(20, s)},
		{"sliding_window", `{"algorithm":"sliding_window","limit":20,"window":"1s"}`, `{"max":8}`, algotest.PerWindow(20, s)},
		{"sliding_log", `{"algorithm":"sliding_log","limit":20,"window":"1s"}`, `{"max":8,"max_age":"300ms"}`, algotest.Sliding(20, s)},
		{"token_bucket", `{"algorithm":"token_bucket","rate":20,"period":"1s","burst":20}`, `{"max":8,"max_age":"400ms"}`, algotest.Bucket(20, s, 20)},
		{"leaky_bucket", `{"algorithm":"leaky_bucket","rate":20,"period":"1s","burst":19,"nodelay":true}`, `{"max":8,"max_age":"400ms"}`, algotest.Bucket(20, s, 20)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rule(t, tc.limit, tc.batch)
			age := r.Alg.(*rules.Batched).Batching.MaxAge
			offered, admitted, returned := 0, 0, int64(0)
			for seed := range uint64(300) {
				rng := rand.New(rand.NewPCG(seed, 7))
				clk := &clock{}
				clk.t.Store(1_000*s + rng.Int64N(s))
				shared := memory{memstore.New(memstore.Options{Clock: clk.now})}
				var ns []*batch.Store
				for range 3 {
					ns = append(ns, batch.New(shared, batch.Options{Now: clk.now}))
				}
				var ts []int64
				for range 150 {
					switch k := rng.IntN(20); {
					case k < 10:
						clk.t.Add(rng.Int64N(2_000))
					case k < 14:
						clk.t.Add(max(0, age-rng.Int64N(5_000))) // just before a batch expires
					case k < 17:
						now := clk.now()
						clk.t.Store(now - now%s + s - 2_000 + rng.Int64N(4_000)) // around a window boundary
					default:
						clk.t.Add(rng.Int64N(200_000))
					}
					i := rng.IntN(len(ns))
					if rng.IntN(40) == 0 { // the node restarts: it gives back what it holds
						if err := ns[i].Close(context.Background()); err != nil {
							t.Fatal(err)
						}
						returned += ns[i].Stats().Returned
						ns[i] = batch.New(shared, batch.Options{Now: clk.now})
					}
					node := ns[i]
					flood := 1
					if rng.IntN(3) == 0 {
						flood = 1 + rng.IntN(10)
					}
					for range flood {
						offered++
						if c := decide(node, r.Alg, "k", clk.now(), false); c.Dec.Allowed {
							ts = append(ts, clk.now())
						}
					}
				}
				if over := tc.check(ts); over > 0 {
					t.Fatalf("seed %d: over-admitted by %d units; admitted at %v", seed, over, ts)
				}
				admitted += len(ts)
				for _, n := range ns {
					returned += n.Stats().Returned
				}
			}
			if tc.name == "fixed_window" && returned == 0 {
				t.Fatal("no unit was given back: the traces do not test refunds")
			}
			t.Logf("300 traces: offered %d, admitted %d, units given back %d", offered, admitted, returned)
		})
	}
}
