package stack

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// engineOn builds an engine over the rules of doc ({"rules": [...]}) with st's store for its
// cluster rules and a memstore for its local ones.
func engineOn(t *testing.T, st *Stack, doc string) (*rules.Engine, []*rules.Rule) {
	t.Helper()
	v, err := conf.ParseJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	errs := &conf.Errors{}
	o := conf.Read(v, errs)
	rs := rules.Decode(o)
	o.Done()
	if err := errs.Err(); err != nil {
		t.Fatal(err)
	}
	e, err := rules.New(rs, rules.Options{Local: rules.Each(memstore.New(memstore.Options{}).Decide), Cluster: st.Store})
	if err != nil {
		t.Fatal(err)
	}
	return e, rs
}

// scriptCalls is the script calls Redis has counted.
func scriptCalls(t *testing.T, rs *redistest.Server) int64 {
	t.Helper()
	stats, err := rs.CommandStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return stats["evalsha"].Calls + stats["eval"].Calls
}

// remaining peeks at what rule r has left for key in Redis.
func remaining(t *testing.T, st *Stack, r *rules.Rule, key string) int64 {
	t.Helper()
	d, err := st.Redis.DecideOne(context.Background(), key, r.Alg, algos.Request{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// threeRules are the usual production config: per client a token bucket, per path a sliding
// window, and a global fixed window, in cluster mode.
const threeRules = `{"rules": [
	{"name": "ip", "by": ["ip"], "mode": "cluster", "limit": {"algorithm": "token_bucket", "rate": 3, "period": "1h"}},
	{"name": "path", "by": ["path"], "mode": "cluster", "limit": {"algorithm": "sliding_window", "limit": 5, "window": "1h"}},
	{"name": "global", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 100, "window": "1h"}}
]}`

// A request that three cluster rules match is one script call to Redis through the store stack,
// and takes from all three rules or from none.
func TestEngineOneCall(t *testing.T) {
	rs := redistest.Start(t)
	st, err := New(Redis{Conn: redisstore.Conn{Addrs: []string{rs.Addr}}}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Client.Close() })
	e, list := engineOn(t, st, threeRules)
	ip, path, global := list[0], list[1], list[2]
	ctx := context.Background()
	in := func(addr, p string) *rules.Input { return &rules.Input{Method: "GET", Path: p, ClientIP: addr} }
	e.Check(ctx, in("192.0.2.99", "/warm")) // loads the script
	before := scriptCalls(t, rs)
	// a spends its 3; its 4th is refused by "ip" and takes nothing from "path" and "global".
	for i := range 4 {
		res := e.Check(ctx, in("192.0.2.1", "/a"))
		if res.Allowed != (i < 3) {
			t.Fatalf("request %d from a: allowed %v (%+v, rule %v)", i, res.Allowed, res.Decision, res.Rule)
		}
	}
	if n := scriptCalls(t, rs) - before; n != 4 {
		t.Errorf("4 requests of 3 cluster rules made %d script calls, want 4", n)
	}
	if p, g := remaining(t, st, path, "path|/a"), remaining(t, st, global, "global"); p != 2 || g != 96 {
		t.Errorf("after a's refused request: path /a has %d left, global %d; want 2 and 96", p, g)
	}
	// /a's window takes 2 more; the next is refused by "path", and b's bucket keeps its units.
	for i := range 3 {
		res := e.Check(ctx, in("192.0.2.2", "/a"))
		if res.Allowed != (i < 2) || !res.Allowed && res.Rule != path {
			t.Fatalf("request %d from b: allowed %v, rule %v", i, res.Allowed, res.Rule.Name)
		}
	}
	if b, g := remaining(t, st, ip, "ip|192.0.2.2"), remaining(t, st, global, "global"); b != 1 || g != 94 {
		t.Errorf("after b's refused request: b has %d left, global %d; want 1 and 94", b, g)
	}
}

// Local and cluster rules together: a local denial takes nothing from the cluster rules, and a
// cluster denial nothing from the local rule; a shadow rule's denial refuses nothing; a ban
// starts though the request takes nothing from the others; a batched rule gives its units back
// to the node when another rule refuses the request.
func TestEngineTogetherMixed(t *testing.T) {
	rs := redistest.Start(t)
	st, err := New(Redis{Conn: redisstore.Conn{Addrs: []string{rs.Addr}}}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Client.Close() })
	e, list := engineOn(t, st, `{"rules": [
		{"name": "loc", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 4, "window": "1h"}},
		{"name": "ban", "by": ["ip"], "mode": "cluster", "ban": "1h", "match": {"paths": ["/ban"]}, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "shadow", "mode": "cluster", "action": "shadow", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "batched", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 100, "window": "1h"}, "batch": {"max": 10}},
		{"name": "global", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 6, "window": "1h"}}
	]}`)
	global := list[4]
	ctx := context.Background()
	in := func(addr, p string) *rules.Input { return &rules.Input{Method: "GET", Path: p, ClientIP: addr} }
	held := func() int64 { return st.Batch.Stats().Spent }
	// a's 4 local units; its 5th request is refused by "loc" and takes no global unit, nor a
	// batched one (the node takes them back). The shadow rule denies from the 2nd on, refusing
	// nothing.
	for i := range 5 {
		res := e.Check(ctx, in("192.0.2.1", "/"))
		if res.Allowed != (i < 4) {
			t.Fatalf("request %d: allowed %v, rule %v", i, res.Allowed, res.Rule)
		}
		if i >= 1 && res.Shadow == nil {
			t.Errorf("request %d: no shadow denial reported", i)
		}
	}
	if g, s := remaining(t, st, global, "global"), held(); g != 2 || s != 4 {
		t.Errorf("after the local refusal: global has %d left, batched units spent %d; want 2 and 4", g, s)
	}
	// b on /ban: its first passes; its second is refused and banned, taking nothing else.
	expectAllowed(t, e, in("192.0.2.2", "/ban"), true)
	expectAllowed(t, e, in("192.0.2.2", "/ban"), false)
	if g, s := remaining(t, st, global, "global"), held(); g != 1 || s != 5 {
		t.Errorf("after the ban: global has %d left, batched units spent %d; want 1 and 5", g, s)
	}
	if _, ban := st.Redis.Keys("ban|192.0.2.2"); rs.Client().Exists(ctx, ban).Val() != 1 {
		t.Errorf("the refused request did not start b's ban")
	}
	// The global limit's last unit, then its refusal, which takes nothing from "loc".
	expectAllowed(t, e, in("192.0.2.3", "/"), true)
	expectAllowed(t, e, in("192.0.2.3", "/"), false)
	res := e.Check(ctx, &rules.Input{Method: "GET", Path: "/", ClientIP: "192.0.2.3"})
	if res.Allowed || res.Rule != global {
		t.Fatalf("refused by global: %+v", res)
	}
	if s := held(); s != 6 {
		t.Errorf("batched units spent %d, want 6", s)
	}
}

// expectAllowed checks a request's verdict.
func expectAllowed(t *testing.T, e *rules.Engine, in *rules.Input, want bool) {
	t.Helper()
	if res := e.Check(context.Background(), in); res.Allowed != want {
		t.Fatalf("%s from %s: allowed %v (rule %v, %+v), want %v", in.Path, in.ClientIP, res.Allowed, res.Rule, res.Decision, want)
	}
}

// Under concurrency, from several goroutines and nodes (stacks) on one Redis: every rule admits
// exactly its limit, and each admitted request took one unit of each rule, no more: Redis's
// counts are the admissions.
func TestEngineTogetherConcurrent(t *testing.T) {
	rs := redistest.Start(t)
	const nodes, workers, each = 3, 8, 20
	var engines []*rules.Engine
	var list []*rules.Rule
	for range nodes {
		st, err := New(Redis{Conn: redisstore.Conn{Addrs: []string{rs.Addr}}}, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Client.Close() })
		var e *rules.Engine
		e, list = engineOn(t, st, `{"rules": [
			{"name": "ip", "by": ["ip"], "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 7, "window": "1h"}},
			{"name": "global", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 50, "window": "1h"}}
		]}`)
		engines = append(engines, e)
	}
	var admitted [10]atomic.Int64
	var wg sync.WaitGroup
	for n, e := range engines {
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					k := (n*workers + w + i) % len(admitted)
					if e.Check(context.Background(), &rules.Input{Method: "GET", Path: "/", ClientIP: fmt.Sprintf("192.0.2.%d", k)}).Allowed {
						admitted[k].Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	st, err := New(Redis{Conn: redisstore.Conn{Addrs: []string{rs.Addr}}}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Client.Close()
	total := int64(0)
	for k := range admitted {
		a := admitted[k].Load()
		total += a
		if left := remaining(t, st, list[0], fmt.Sprintf("ip|192.0.2.%d", k)); a > 7 || 7-left != a {
			t.Errorf("client %d: %d admitted, Redis counts %d of 7", k, a, 7-left)
		}
	}
	if left := remaining(t, st, list[1], "global"); total != 50 || 50-left != total {
		t.Errorf("%d admitted in all, Redis counts %d of the global 50; want 50 and 50", total, 50-left)
	}
}
