package failover

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// cluster is nodes sharing one real redis-server, each a failover Store with its own local
// store, Shares and Engine, on one fake clock (µs) that the local stores and the Shares read.
type cluster struct {
	t    *testing.T
	srv  *redistest.Server
	rule string // the rule's JSON
	// client, if set, is the client address of node n's k-th request of a second.
	client func(n, k int) netip.Addr
	now    atomic.Int64
	nodes  []*node
}

type node struct {
	name string
	sh   *Shares // nil: a node that learns nothing (the limit divided by the node count)
	s    *Store
	eng  *rules.Engine
	rule *rules.Rule
}

func newCluster(t *testing.T, rule string) *cluster {
	c := &cluster{t: t, srv: redistest.Start(t), rule: rule}
	c.now.Store(1_000_000 * algos.Second) // a whole second: fixed windows start on it
	return c
}

// add starts a node; learn says whether it learns its share.
func (c *cluster) add(learn bool) *node {
	c.t.Helper()
	rs := decodeRules(c.t, c.rule)
	n := &node{name: fmt.Sprintf("n%d", len(c.nodes)), rule: rs[0]}
	client := c.srv.Client()
	opts := Options{Local: memstore.New(memstore.Options{Clock: c.now.Load})}
	if learn {
		n.sh = NewShares(client, ShareOptions{Node: n.name, Manual: true, Now: func() time.Time { return time.UnixMicro(c.now.Load()) }})
		opts.Shares = n.sh
	}
	n.s = New(redisstore.New(client, redisstore.Options{}), opts)
	var err error
	if n.eng, err = rules.New(rs, rules.Options{Cluster: n.s}); err != nil {
		c.t.Fatal(err)
	}
	c.nodes = append(c.nodes, n)
	return n
}

// second offers perSec[i] requests to node i, spread over 100 ticks of 10ms, and returns the
// requests admitted; a node with weight 0 gets none. Then, with sync, every learning node
// exchanges its counts, as once a second.
func (c *cluster) second(perSec []int, sync bool) (admitted int) {
	c.t.Helper()
	const ticks = 100
	ctx := context.Background()
	for tick := range ticks {
		for i, n := range c.nodes {
			// node i's requests of this tick: its per-second count spread evenly over the ticks
			k := perSec[i]*(tick+1)/ticks - perSec[i]*tick/ticks
			for j := range k {
				in := rules.Input{Method: "GET", Path: "/"}
				if c.client != nil {
					in.SetClient(c.client(i, perSec[i]*tick/ticks+j), 64)
				}
				if n.eng.Check(ctx, &in).Allowed {
					admitted++
				}
			}
		}
		c.now.Add(algos.Second / ticks)
	}
	if sync {
		for i, n := range c.nodes {
			if n.sh != nil && perSec[i] >= 0 {
				if err := n.sh.Sync(ctx); err != nil {
					c.t.Fatalf("%s: sync: %v", n.name, err)
				}
			}
		}
	}
	return admitted
}

// scale returns split × k.
func scale(split []int, k int) []int {
	out := make([]int, len(split))
	for i, w := range split {
		out[i] = w * k
	}
	return out
}

// TestLearnedShareHoldsTheLimit runs nodes that learn their shares of uneven traffic while
// Redis is up, then takes Redis away in the middle of the traffic and counts what the whole
// cluster admits over the outage: within 5% of the limit, where the limit divided by the node
// count (measured on the same traffic with nodes that learn nothing) is far under it.
func TestLearnedShareHoldsTheLimit(t *testing.T) {
	const secs = 5 // of outage
	cases := []struct {
		name    string
		limit   string
		split   []int
		fault   string // stop or pause
		load    int    // offered, in percent of the limit
		expect  int    // the limit over the outage
		baseMax float64
	}{
		// fixed window 500/s: 5 windows, 2500; limit/4 would admit 125+125+100+100 a window.
		{"fixed window 60/20/10/10", `"algorithm": "fixed_window", "limit": 500, "window": "1s"`,
			[]int{6, 2, 1, 1}, "pause", 200, secs * 500, 0.91},
		{"fixed window 4/3/2/1", `"algorithm": "fixed_window", "limit": 500, "window": "1s"`,
			[]int{4, 3, 2, 1}, "stop", 200, secs * 500, 0.96},
		// offered exactly the limit: limit/4 admits 125+100+50+50 a window, 65%.
		{"fixed window 60/20/10/10 at the limit", `"algorithm": "fixed_window", "limit": 500, "window": "1s"`,
			[]int{6, 2, 1, 1}, "stop", 100, secs * 500, 0.66},
		// token bucket 500/s, burst 500, full at the start: 500 + 5 × 500.
		{"token bucket 60/20/10/10", `"algorithm": "token_bucket", "rate": 500, "burst": 500`,
			[]int{6, 2, 1, 1}, "stop", 200, 500 + secs*500, 0.91},
		{"token bucket 4/3/2/1", `"algorithm": "token_bucket", "rate": 500, "burst": 500`,
			[]int{4, 3, 2, 1}, "pause", 200, 500 + secs*500, 0.96},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := map[bool]int{}
			for _, learn := range []bool{true, false} {
				c := newCluster(t, `{"name": "api", "mode": "cluster", "on_error": "local", "nodes": 4, "limit": {`+tc.limit+`}}`)
				for range tc.split {
					c.add(learn)
				}
				for range 6 { // learning: 200 requests a second, split as the traffic is
					c.second(scale(tc.split, 20), true)
				}
				// Redis decides on its own clock, which ran slower than the nodes' virtual one:
				// let its state become what the cases start from (a full bucket, a window's
				// count of the learning traffic at most), and let every node learn it from one
				// more request, as a node falling back starts from what Redis said last.
				time.Sleep(time.Second)
				c.second(tc.split, false)
				outage(t, c.srv, tc.fault)
				for range secs { // load % of the limit, in the same split
					got[learn] += c.second(scale(tc.split, tc.load/2), false)
				}
				for _, n := range c.nodes {
					if !n.s.Open() {
						t.Fatalf("%s: the breaker is closed: Redis was not away", n.name)
					}
				}
			}
			t.Logf("admitted over the outage: %d learned, %d at limit/4, limit %d", got[true], got[false], tc.expect)
			if d := float64(got[true])/float64(tc.expect) - 1; math.Abs(d) > 0.05 {
				t.Errorf("with learned shares the cluster admitted %d, %+.1f%% off the limit %d (bound ±5%%)", got[true], 100*d, tc.expect)
			}
			if r := float64(got[false]) / float64(tc.expect); r > tc.baseMax {
				t.Errorf("at limit/4 the cluster admitted %d, %.1f%% of the limit: the traffic is not uneven enough to show the point", got[false], 100*r)
			}
		})
	}
}

// outage takes Redis away: stopped (connections refused) or paused (no answers: timeouts).
func outage(t *testing.T, srv *redistest.Server, fault string) {
	switch fault {
	case "stop":
		srv.Stop()
	case "pause":
		srv.Pause()
		t.Cleanup(srv.Resume) // before the harness stops it
	default:
		t.Fatalf("unknown fault %q", fault)
	}
}

// TestLearnedShareJoinLeave changes the cluster before the outage: a node leaves (its traffic
// going to another) or joins; the others learn it within seconds (a node that left drops out
// of the totals after 3 intervals), and the outage admits within 5% of the limit.
func TestLearnedShareJoinLeave(t *testing.T) {
	const secs = 5
	limit := `{"name": "api", "mode": "cluster", "on_error": "local", "nodes": 4, "limit": {"algorithm": "fixed_window", "limit": 500, "window": "1s"}}`
	cases := []struct {
		name          string
		before, after []int // requests per 10 a second, by node; -1: the node is gone
		settle        int   // seconds between the change and the outage
	}{
		{"leave", []int{4, 3, 2, 1}, []int{4, 3, 3, -1}, 8},
		{"join", []int{4, 3, 2, 1, 0}, []int{4, 3, 2, 1, 2}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, limit)
			for range tc.before {
				c.add(true)
			}
			// A node with no traffic before the change has not joined: it neither counts nor syncs.
			before := append([]int(nil), tc.before...)
			for i, w := range before {
				if w == 0 {
					before[i] = -1
				}
			}
			for range 6 {
				c.second(scale(before, 20), true)
			}
			for range tc.settle {
				c.second(scale(tc.after, 20), true)
			}
			outage(t, c.srv, "stop")
			got := 0
			for range secs {
				got += c.second(scale(tc.after, 100), false)
			}
			want := secs * 500
			t.Logf("admitted over the outage: %d, limit %d", got, want)
			if d := float64(got)/float64(want) - 1; math.Abs(d) > 0.05 {
				t.Errorf("the cluster admitted %d, %+.1f%% off the limit %d (bound ±5%%)", got, 100*d, want)
			}
		})
	}
}

// TestNoHistory: a node that has not synced yet (Redis went away first) limits at the limit
// divided by the rule's node count, as it always did: 125 a window each of 300, 100, 50, 50.
func TestNoHistory(t *testing.T) {
	c := newCluster(t, `{"name": "api", "mode": "cluster", "on_error": "local", "nodes": 4, "limit": {"algorithm": "fixed_window", "limit": 500, "window": "1s"}}`)
	for range 4 {
		c.add(true)
	}
	c.second([]int{12, 4, 2, 2}, false) // counted, never exchanged
	c.srv.Stop()
	if got, want := c.second([]int{600, 200, 100, 100}, false), 125+125+100+100; got != want {
		t.Errorf("admitted %d, want %d (limit/4 on each node)", got, want)
	}
	for _, n := range c.nodes {
		n.sh.Each(func(rule string, share float64) {
			if share != 0 {
				t.Errorf("%s: share of %s = %v without an exchange, want 0", n.name, rule, share)
			}
		})
	}
}

// TestSharesBackground runs the exchange as production does: Decide starts it once an interval
// on the real clock. One node alone learns the whole of the traffic, and its field is in Redis.
func TestSharesBackground(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	sh := NewShares(client, ShareOptions{Node: "solo", Every: 200 * time.Millisecond})
	s := New(redisstore.New(client, redisstore.Options{}), Options{Shares: sh})
	rs := decodeRules(t, `{"name": "api", "mode": "cluster", "on_error": "local", "nodes": 4, "limit": {"algorithm": "fixed_window", "limit": 100000, "window": "1s"}}`)
	eng, err := rules.New(rs, rules.Options{Cluster: s})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	share := 0.0
	for share != 1 && time.Now().Before(deadline) {
		in := rules.Input{Method: "GET", Path: "/"}
		eng.Check(context.Background(), &in)
		time.Sleep(time.Millisecond)
		sh.Each(func(_ string, v float64) { share = v })
	}
	if share != 1 {
		t.Fatalf("share = %v, want 1 (one node)", share)
	}
	if err := sh.Sync(context.Background()); err != nil { // the hash is fresh: it outlives a busy machine's pause
		t.Fatal(err)
	}
	fields, err := client.HKeys(context.Background(), "diana:shares:{shares}:api").Result()
	if err != nil || len(fields) != 1 || fields[0] != "solo" {
		t.Errorf("the rule's hash holds %q (%v), want [solo]", fields, err)
	}
	ttl, err := client.PTTL(context.Background(), "diana:shares:{shares}:api").Result()
	if err != nil || ttl <= 0 || ttl > 600*time.Millisecond {
		t.Errorf("the rule's hash expires in %v (%v), want within 3 intervals", ttl, err)
	}
	// Steady state: the fallback at the learned share is built once, then reused.
	if allocs := testing.AllocsPerRun(100, func() { sh.alg(rs[0]) }); allocs != 0 {
		t.Errorf("alg allocates %v times a call, want 0", allocs)
	}
	if sh.alg(rs[0]) == nil || sh.alg(rs[0]).Script().Args[0] != 100000 {
		t.Errorf("alg = %+v, want the whole limit (share 1)", sh.alg(rs[0]))
	}
}

func decodeRules(t *testing.T, rule string) []*rules.Rule {
	t.Helper()
	errs := &conf.Errors{Source: "test.json"}
	v, err := conf.ParseJSON([]byte(`{"rules": [` + rule + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := conf.Read(v, errs)
	rs := rules.Decode(o)
	o.Done()
	if err := errs.Err(); err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestQuantise(t *testing.T) {
	for _, c := range []struct {
		share float64
		want  int64
	}{
		{0, 1}, {0.0001, 1}, {0.1, 102}, {0.2, 204}, {0.25, 255}, {0.6, 612}, {0.4, 408}, {0.98, 1000}, {1, 1000},
	} {
		if got := quantise(c.share); got != c.want {
			t.Errorf("quantise(%v) = %d, want %d", c.share, got, c.want)
		}
	}
}

// TestSharesTopologies runs the exchange on a Redis Cluster (every rule's hash in one slot) and
// as a least-privilege ACL user with the commands docs/redis.md lists; a user without the hash
// commands learns nothing, and Sync says why.
func TestSharesTopologies(t *testing.T) {
	doc := redistest.DocUser(t)
	acl := func(user string) func(t *testing.T) redis.UniversalClient {
		return func(t *testing.T) redis.UniversalClient { return redistest.StartAs(t, user) }
	}
	cases := []struct {
		name    string
		client  func(t *testing.T) redis.UniversalClient
		wantErr string
	}{
		{"cluster", func(t *testing.T) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{redistest.StartCluster(t).Addr}})
			t.Cleanup(func() { c.Close() })
			return c
		}, ""},
		{"acl as documented", acl(doc), ""},
		{"acl without hset", acl(strings.Replace(doc, " +hset", "", 1)), "can't run this command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.client(t)
			rs := decodeRules(t, `{"name": "a", "mode": "cluster", "on_error": "local", "limit": {"algorithm": "fixed_window", "limit": 100, "window": "1s"}},
				{"name": "b", "mode": "cluster", "on_error": "local", "limit": {"algorithm": "fixed_window", "limit": 100, "window": "1s"}}`)
			var shs []*Shares
			for i, weight := range []int{3, 1} {
				sh := NewShares(c, ShareOptions{Node: fmt.Sprint("n", i), Manual: true})
				eng, err := rules.New(rs, rules.Options{Cluster: New(redisstore.New(c, redisstore.Options{}), Options{Shares: sh})})
				if err != nil {
					t.Fatal(err)
				}
				for range weight {
					in := rules.Input{Method: "GET", Path: "/"}
					if res := eng.Check(context.Background(), &in); !res.Allowed {
						t.Fatalf("node %d: %+v", i, res)
					}
				}
				shs = append(shs, sh)
			}
			// No share before a node's second exchange: at its first, the others may not have
			// written yet.
			// The second node counted 1 request of 4, averaged at the second exchange (which counted
			// none) to 0.5 of 2: (horizon × 0.5 + prior / 2) / (horizon × 2 + prior).
			for round, want := range []float64{0, (horizon*0.5 + prior/2.0) / (horizon*2 + prior)} {
				for _, sh := range shs {
					err := sh.Sync(context.Background())
					if tc.wantErr != "" {
						if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
							t.Fatalf("Sync: %v, want an error with %q", err, tc.wantErr)
						}
						backgroundFails(t, c, rs, tc.wantErr)
						return
					}
					if err != nil {
						t.Fatalf("Sync: %v", err)
					}
				}
				got := map[string]float64{}
				shs[1].Each(func(rule string, share float64) { got[rule] = share })
				if want := map[string]float64{"a": want, "b": want}; !reflect.DeepEqual(got, want) {
					t.Errorf("exchange %d: the second node's shares are %v, want %v", round+1, got, want)
				}
			}
		})
	}
}

// backgroundFails checks that an exchange Decide starts tells OnError why it failed.
func backgroundFails(t *testing.T, c redis.UniversalClient, rs []*rules.Rule, wantErr string) {
	errs := make(chan error, 1)
	sh := NewShares(c, ShareOptions{Every: 50 * time.Millisecond, OnError: func(err error) {
		select {
		case errs <- err:
		default:
		}
	}})
	eng, err := rules.New(rs, rules.Options{Cluster: New(redisstore.New(c, redisstore.Options{}), Options{Shares: sh})})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(wait)
	var last error
	for {
		in := rules.Input{Method: "GET", Path: "/"}
		eng.Check(context.Background(), &in)
		select {
		case err := <-errs:
			if strings.Contains(err.Error(), wantErr) {
				return
			}
			last = err // a busy machine's timeout: the next exchange tells
		case <-deadline:
			t.Fatalf("no exchange failed with %q (last error: %v)", wantErr, last)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestSharesPerInterval: what a node writes is its moving average of units per interval; counts
// over a longer period (sparse traffic, or an outage, between exchanges) are scaled to one.
func TestSharesPerInterval(t *testing.T) {
	c := newCluster(t, `{"name": "api", "mode": "cluster", "on_error": "local", "limit": {"algorithm": "fixed_window", "limit": 500, "window": "1s"}}`)
	n := c.add(true)
	rc := c.srv.Client()
	ctx := context.Background()
	field := func() string {
		v, err := rc.HGet(ctx, "diana:shares:{shares}:api", "n0").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v[:strings.IndexByte(v, ':')]
	}
	steps := []struct {
		perSec  int // requests in the first second
		seconds int // seconds from the first request to the exchange
		want    string
	}{
		{20, 1, "20"}, // the first period starts at the first count: 20 a second
		{40, 1, "30"}, // (20 + 40) / 2
		{50, 5, "20"}, // 50 over 5 s is 10 a second: (30 + 10) / 2
		{0, 1, "10"},
	}
	for i, s := range steps {
		c.second([]int{s.perSec}, false)
		c.now.Add(int64(s.seconds-1) * algos.Second)
		if err := n.sh.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := field(); got != s.want {
			t.Errorf("step %d: the node wrote %s units an interval, want %s", i, got, s.want)
		}
	}
}

// TestSharesAllocateNothing: with Redis away, deciding at a learned share allocates no more
// than deciding at the limit divided by the node count (the algorithm at the share is built
// once, then reused).
func TestSharesAllocateNothing(t *testing.T) {
	c := newCluster(t, `{"name": "api", "mode": "cluster", "on_error": "local", "nodes": 2, "limit": {"algorithm": "token_bucket", "rate": 500, "burst": 500}}`)
	learner, plain := c.add(true), c.add(false)
	for range 2 {
		c.second([]int{3, 1}, true)
	}
	c.srv.Stop()
	c.second([]int{10, 10}, false) // opens the breakers, builds the fallback at the share
	if !learner.s.Open() || !plain.s.Open() {
		t.Fatal("the breakers did not open")
	}
	// A few measurements of each: AllocsPerRun counts the process's allocations (background
	// goroutines' too) and rounds down, so one run may read a little more or less than a
	// decision's own. The learner's least must not pass the plain node's most: an allocation
	// the learned share added to every decision would.
	allocs := func(n *node) (least, most float64) {
		in := rules.Input{Method: "GET", Path: "/"}
		least = math.Inf(1)
		for range 5 {
			a := testing.AllocsPerRun(200, func() {
				in.Path = "/"
				n.eng.Check(context.Background(), &in)
			})
			least, most = min(least, a), max(most, a)
		}
		return least, most
	}
	a, _ := allocs(learner)
	_, b := allocs(plain)
	if a > b {
		t.Errorf("a decision at the learned share allocates %v times, at limit/2 %v", a, b)
	}
}

// TestPinnedClient measures the bound of a per-rule share for a client the load balancer pins
// to one node: it gets that node's part of its limit while Redis is down, whatever its own
// traffic. The rule counts by client address; the others spread 60/20/10/10 as the rule's.
func TestPinnedClient(t *testing.T) {
	for _, tc := range []struct {
		node       int
		want, base int // admitted a window of 500: at the learned share, at limit/4
	}{
		// 500 × ⌈1000 × 1.02 × (horizon × its average + prior / 4) / (horizon × the total + prior)⌉ / 1000
		{3, 58, 125},  // 10% of the traffic: (2 × 20 + 10) / (2 × 200 + 40) = 11.4%, 11.6% with the headroom
		{0, 290, 125}, // 60%: (2 × 120 + 10) / 440 = 56.8%, 58.0%
	} {
		t.Run(fmt.Sprint("node ", tc.node), func(t *testing.T) {
			got := map[bool]int{}
			for _, learn := range []bool{true, false} {
				c := newCluster(t, `{"name": "api", "by": ["ip"], "mode": "cluster", "on_error": "local", "nodes": 4, "limit": {"algorithm": "fixed_window", "limit": 500, "window": "1s"}}`)
				c.client = func(n, k int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(n), byte(k >> 8), byte(k)}) }
				for range 4 {
					c.add(learn)
				}
				for range 6 {
					c.second([]int{120, 40, 20, 20}, true)
				}
				c.srv.Stop()
				pinned := netip.MustParseAddr("192.0.2.1")
				c.client = func(int, int) netip.Addr { return pinned }
				perSec := make([]int, 4)
				perSec[tc.node] = 1000
				for range 3 {
					got[learn] += c.second(perSec, false)
				}
			}
			t.Logf("client pinned to node %d admitted %d a window (%.1f%% of 500); at limit/4, %d",
				tc.node, got[true]/3, float64(got[true])/3/5, got[false]/3)
			if got[true] != 3*tc.want || got[false] != 3*tc.base {
				t.Errorf("admitted %d at the learned share, %d at limit/4 over 3 windows; want %d and %d", got[true], got[false], 3*tc.want, 3*tc.base)
			}
		})
	}
}
