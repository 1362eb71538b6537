package stack

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// budget is a cluster token budget: 20,000 tokens a second, a bucket of 5,000, each request
// reserving its max_tokens; on_error local, for the Redis-down half of TestSettleStack.
const budget = `{"rules": [{"name": "tokens", "mode": "cluster", "on_error": "local", "nodes": 4,
	"usage": {"body": "usage.total_tokens", "estimate_body": "max_tokens"},
	"limit": {"algorithm": "token_bucket", "rate": 20000, "period": "1s", "burst": 5000}}]}`

func budgetRules(t *testing.T) []*rules.Rule {
	t.Helper()
	doc, err := conf.ParseJSON([]byte(budget))
	if err != nil {
		t.Fatal(err)
	}
	errs := &conf.Errors{Source: "test"}
	rs := rules.Decode(conf.Read(doc, errs))
	if err := errs.Err(); err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestSettleStack: 16 clients over 4 nodes (each its own stack: client, redisstore, batch,
// failover) on one real redis-server spend a token budget with costs known only after their
// responses, from half to twice the estimate. The tokens charged never exceed the budget (the burst
// and the refill over the run) plus the in-flight bound: the overshoot of the requests admitted
// but not settled yet, at most one per client. And the run spends most of the budget.
func TestSettleStack(t *testing.T) {
	rs := redistest.Start(t)
	rule := budgetRules(t)
	const nodes, clients, maxTokens = 4, 16, 100
	engines := make([]*rules.Engine, nodes)
	for i := range engines {
		// A timeout far above a round trip: on a loaded machine a decision by the fail policy
		// would not be the budget's.
		st, err := New(Redis{Conn: redisstore.Conn{Addrs: []string{rs.Addr}}, Timeout: 5 * time.Second}, Hooks{Local: memstore.New(memstore.Options{})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Client.Close() })
		engines[i], err = rules.New(rule, rules.Options{Cluster: st.Store, Local: rules.Each(memstore.New(memstore.Options{}).Decide)})
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	var spent, admitted, denied, reserved atomic.Int64
	start := time.Now()
	const run = 1500 * time.Millisecond
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			eng := engines[c%nodes]
			for time.Since(start) < run {
				est := 1 + rng.Int64N(maxTokens)
				in := &rules.Input{Method: "POST", Path: "/v1/chat/completions", Body: `{"max_tokens":` + strconv.FormatInt(est, 10) + `}`, BodyState: rules.BodyWhole}
				res := eng.Check(ctx, in)
				if res.Err != nil {
					t.Error(res.Err)
					return
				}
				if !res.Allowed {
					denied.Add(1)
					time.Sleep(time.Millisecond)
					continue
				}
				admitted.Add(1)
				reserved.Add(est)
				// From half to twice the estimate: more than it on average, so that a budget
				// charged only its estimates would be overspent.
				actual := est/2 + rng.Int64N(2*est-est/2+1)
				spent.Add(actual)
				eng.Settle(ctx, &res, func(*rules.Rule) (int64, error) { return actual, nil })
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// The bucket may refill over the whole run; each client holds at most one request whose
	// actual cost exceeds its estimate by at most maxTokens.
	bound := 5000 + 20000*elapsed.Microseconds()/algos.Second + clients*maxTokens
	t.Logf("%d admitted, %d denied, %d tokens spent (%d reserved) in %v; bound %d", admitted.Load(), denied.Load(), spent.Load(), reserved.Load(), elapsed, bound)
	if spent.Load() > bound {
		t.Fatalf("spent %d tokens, more than the budget plus the in-flight bound, %d", spent.Load(), bound)
	}
	if least := 5000 + 20000*run.Microseconds()/algos.Second/2; spent.Load() < least || denied.Load() == 0 {
		t.Fatalf("spent %d tokens with %d denials: the run did not press on the budget (want %d at least)", spent.Load(), denied.Load(), least)
	}
}

// TestSettleRedisDown: a settlement Redis cannot take goes by the rule's fail policy (on_error
// local: into this node's local state), with the store's error reported, and nothing panics.
func TestSettleRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	local := memstore.New(memstore.Options{})
	st, err := New(Redis{Conn: redisstore.Conn{Addrs: []string{rs.Addr}}}, Hooks{Local: local})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Client.Close() })
	var settled []rules.Settled
	eng, err := rules.New(budgetRules(t), rules.Options{Cluster: st.Store, Local: rules.Each(local.Decide),
		Settled: func(s rules.Settled) { settled = append(settled, s) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := func() *rules.Input {
		return &rules.Input{Method: "POST", Path: "/", Body: `{"max_tokens": 100}`, BodyState: rules.BodyWhole}
	}
	res := eng.Check(ctx, in())
	if !res.Allowed || res.Err != nil {
		t.Fatalf("with Redis: %+v", res)
	}
	rs.Stop()
	eng.Settle(ctx, &res, func(*rules.Rule) (int64, error) { return 0, errors.New("client gone") })
	if len(settled) != 1 || settled[0].StoreErr == nil || settled[0].Cost != 100 {
		t.Fatalf("settled %+v", settled)
	}
	// Admitted by the local fallback (the budget divided by 4 nodes: a bucket of 1250), requests
	// settle there, charged in full as no shared store holds their estimates: 300 reserved and
	// 1200 charged take the bucket below zero.
	res = eng.Check(ctx, in())
	if res.Err == nil || !res.Allowed {
		t.Fatalf("without Redis: %+v", res)
	}
	res2 := eng.Check(ctx, &rules.Input{Method: "POST", Path: "/", Body: `{"max_tokens": 200}`, BodyState: rules.BodyWhole})
	eng.Settle(ctx, &res, func(*rules.Rule) (int64, error) { return 1000, nil })
	eng.Settle(ctx, &res2, func(*rules.Rule) (int64, error) { return 200, nil })
	peek := eng.Check(ctx, &rules.Input{Method: "POST", Path: "/", Body: `{"max_tokens": 0}`, BodyState: rules.BodyWhole})
	if peek.Allowed || peek.Decision.Remaining != 0 || peek.Decision.RetryAfter < 10*algos.Millisecond {
		t.Fatalf("local state after the settlements: %+v, want a debt of up to 250 tokens (50 ms), less the refill since", peek)
	}
}
