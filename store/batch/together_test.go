package batch_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

// TestTogetherNeverOverAdmits replays random traffic from four nodes through DecideTogether: each
// request falls under a batched rule and an exact one, the exact one refusing a share of them.
// The batched rule never lets more through than it allows, the units a refused request took go
// back to its node (Spent counts only the admissions), and Redis counts the exact rule's
// admissions exactly: all or nothing.
func TestTogetherNeverOverAdmits(t *testing.T) {
	const s = algos.Second
	b := rule(t, `{"algorithm":"fixed_window","limit":50,"window":"1s"}`, `{"max":20}`)
	exact, err := algos.NewFixedWindow(60, algos.Hour) // per client; 8 clients: it binds too
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.t.Store(1_000 * s)
	ns, srv := nodes(t, 4, clk)
	rng := rand.New(rand.NewPCG(3, 4))
	var admitted []int64
	perClient := map[int]int64{}
	for _, rate := range []int64{25, 50, 200, 40} {
		end := clk.now() + 3*s
		for clk.now() < end {
			clk.t.Add(1 + rng.Int64N(2*s/rate))
			client := rng.IntN(8)
			ops := []*rules.Op{
				opOf("k", b.Alg, algos.Request{Now: clk.now(), Cost: 1}),
				{Key: "client:" + string(rune('a'+client)), Alg: exact, Req: algos.Request{Now: clk.now(), Cost: 1}},
			}
			ns[rng.IntN(len(ns))].DecideTogether(context.Background(), ops, rng.IntN(10) == 0)
			for _, op := range ops {
				if op.Err != nil {
					t.Fatal(op.Err)
				}
			}
			if ops[0].Req.DryRun != ops[1].Req.DryRun {
				t.Fatalf("one limit committed, the other not: %+v, %+v", ops[0], ops[1])
			}
			if !ops[0].Req.DryRun {
				admitted = append(admitted, clk.now())
				perClient[client]++
			}
		}
	}
	if over := algotest.PerWindow(50, s)(admitted); over > 0 {
		t.Fatalf("over-admitted by %d units", over)
	}
	var spent int64
	for _, n := range ns {
		spent += n.Stats().Spent
	}
	if spent != int64(len(admitted)) {
		t.Errorf("the nodes spent %d batched units for %d admitted requests", spent, len(admitted))
	}
	peek := redisstore.New(srv.Client(), redisstore.Options{CallerClock: true})
	for client := range 8 {
		d, err := peek.DecideOne(context.Background(), "client:"+string(rune('a'+client)), exact, algos.Request{Now: clk.now()})
		if err != nil {
			t.Fatal(err)
		}
		if n := 60 - d.Remaining; n != perClient[client] {
			t.Errorf("client %d: Redis counts %d, %d admitted", client, n, perClient[client])
		}
	}
	if len(admitted) < 200 || len(perClient) != 8 {
		t.Errorf("%d admitted, of %d clients", len(admitted), len(perClient))
	}
	t.Logf("admitted %d, per client %v", len(admitted), perClient)
}
