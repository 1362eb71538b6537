package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/logbuf"
	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

// The end-to-end tests of cluster mode: dianad servers on loopback listeners deciding in a real
// redis-server, which the fault tests kill, pause and restart under them.

const (
	// forever is a fixed window that no test run crosses: windows are aligned on the epoch and
	// the next 3650-day boundary is years away, so a fixed_window's count never resets mid-test.
	forever = "3650d"
	// exactTimeout is the Redis timeout of the tests that count exactly: long enough that a busy
	// machine never makes a round trip time out and hand a decision to the fail policy.
	exactTimeout = "10s"
	// faultTimeout is the Redis timeout of the fault tests: short, as in production, yet long
	// enough that Redis answering a live request never misses it on a busy machine.
	faultTimeout = "200ms"

	breakerOpen = "diana_redis_breaker_open"
	redisTrips  = "diana_redis_request_duration_seconds_count" // one per round trip to Redis
)

// clusterConfig is a config whose ruleList (YAML list items indented by two spaces) may decide in
// the Redis at addrs, with the given timeout, a breaker that opens after 3 failed round trips
// in a row and stays open for openFor before a probe.
func clusterConfig(timeout, openFor, ruleList string, addrs ...string) string {
	return header + `trusted_proxies: ["127.0.0.1/32"]
upstreams:
  - name: demo
    url: "demo:"
redis:
  addrs: ["` + strings.Join(addrs, `", "`) + `"]
  timeout: ` + timeout + `
  breaker_failures: 3
  breaker_open_for: ` + openFor + `
rules:
` + ruleList
}

// freshIP returns a client IP that no request to ts came from yet (limitNow's sequence).
func freshIP(ts *testServer) string {
	n := ts.probes.Add(1)
	return fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
}

// redisUnits returns what Redis holds for the identity id of the running rule named rule (id is
// the rule's name, then "|" and the client IP for a per-IP rule, as rules builds keys): ok
// reports whether its state key exists, n the units it counts (a fixed window's count, a sliding
// log's entries).
func redisUnits(ctx context.Context, ts *testServer, rc redis.UniversalClient, rule, id string) (n int64, ok bool, err error) {
	var r *rules.Rule
	for _, x := range ts.live.Load().engine.Rules() {
		if x.Name == rule {
			r = x
		}
	}
	if r == nil {
		return 0, false, fmt.Errorf("no rule %q", rule)
	}
	st := redisstore.New(rc, redisstore.Options{Prefix: ts.cfg.Redis.Prefix})
	key, _ := st.Keys(id)
	exists, err := rc.Exists(ctx, key).Result()
	if err != nil || exists == 0 {
		return 0, false, err
	}
	s, err := st.State(ctx, id, r.Alg)
	if err != nil {
		return 0, true, err
	}
	switch r.Algorithm {
	case "fixed_window":
		return s.W[1], true, nil // "ws count"
	case "sliding_log":
		return int64(len(s.Log)), true, nil
	}
	return 0, true, fmt.Errorf("rule %q: the test cannot count the units of %s", rule, r.Algorithm)
}

// stored is redisUnits for a running Redis: the units counted for id, -1 when it has no state.
func stored(t *testing.T, ts *testServer, rc redis.UniversalClient, rule, id string) int64 {
	t.Helper()
	n, ok, err := redisUnits(context.Background(), ts, rc, rule, id)
	if err != nil {
		t.Fatalf("Redis state of %s: %v", id, err)
	}
	if !ok {
		return -1
	}
	return n
}

// expectRedis sends n requests from ip, which Redis must decide (a fail policy writes no
// RateLimit headers): each passes, and RateLimit-Remaining counts down from limit − used.
func expectRedis(t *testing.T, ts *testServer, ip string, limit, used, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		r := get(t, ts.proxy+"/", ip)
		if want := strconv.Itoa(limit - used - i); r.status != 200 || r.header.Get("RateLimit-Remaining") != want {
			t.Fatalf("request %d from %s: status %d, RateLimit-Remaining %q; want 200 and %s from Redis", i, ip, r.status, r.header.Get("RateLimit-Remaining"), want)
		}
	}
}

// TestClusterMode runs one per-IP cluster rule through the proxy and the decision API: both
// count in Redis, exactly, with the usual headers and denial.
func TestClusterMode(t *testing.T) {
	rs := redistest.Start(t)
	rc := rs.Client()
	ts := startFile(t, clusterConfig(exactTimeout, "1s", `  - name: per-ip
    by: [ip]
    mode: cluster
    on_error: closed
    limit: {algorithm: sliding_log, limit: 5, window: 1h}
`, rs.Addr))

	const a, b = "192.0.2.1", "192.0.2.2"
	for i := 1; i <= 5; i++ {
		r := get(t, ts.proxy+"/", a)
		if r.status != 200 || r.header.Get("RateLimit-Limit") != "5" || r.header.Get("RateLimit-Remaining") != strconv.Itoa(5-i) ||
			r.header.Get("RateLimit-Reset") == "" {
			t.Fatalf("request %d: status %d, headers %v; want 200, limit 5, remaining %d", i, r.status, r.header, 5-i)
		}
	}
	r := get(t, ts.proxy+"/", a)
	if r.status != http.StatusTooManyRequests || r.header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("request 6: status %d, headers %v; want 429, remaining 0", r.status, r.header)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 3600 {
		t.Errorf("Retry-After %q, want 1..3600 seconds", r.header.Get("Retry-After"))
	}
	var body struct {
		Message    string
		RetryAfter int `json:"retry_after"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || body.Message != rules.DefaultMessage || body.RetryAfter != ra {
		t.Errorf("429 body %s (%v)", r.body, err)
	}
	if n := stored(t, ts, rc, "per-ip", "per-ip|"+a); n != 5 {
		t.Errorf("Redis logs %d admissions of %s, want 5", n, a)
	}

	// The decision API counts in the same place: a is spent, b has its own 5.
	if _, res := postCheck(t, ts, `{"client_ip":"`+a+`"}`, ""); res == nil || res.Allowed || res.Status != 429 || res.Limit != 5 || res.Remaining != 0 {
		t.Errorf("/v1/check for %s: %+v, want a 429 denial with limit 5", a, res)
	}
	for i := 1; i <= 5; i++ {
		if _, res := postCheck(t, ts, `{"client_ip":"`+b+`"}`, ""); res == nil || !res.Allowed || res.Rule != "per-ip" || res.Remaining != int64(5-i) {
			t.Fatalf("/v1/check %d for %s: %+v, want allowed with remaining %d", i, b, res, 5-i)
		}
	}
	if _, res := postCheck(t, ts, `{"client_ip":"`+b+`"}`, ""); res == nil || res.Allowed || res.RetryAfter == nil || *res.RetryAfter < 1 {
		t.Errorf("/v1/check 6 for %s: %+v, want denied with a retry_after", b, res)
	}
	if r := get(t, ts.proxy+"/", b); r.status != 429 {
		t.Errorf("proxy after %s spent its limit through /v1/check: %d, want 429", b, r.status)
	}
	if n := stored(t, ts, rc, "per-ip", "per-ip|"+b); n != 5 {
		t.Errorf("Redis logs %d admissions of %s, want 5", n, b)
	}
	if got := metric(t, ts, `diana_backend_errors_total{rule="per-ip"}`); got != 0 {
		t.Errorf("%v decisions came from the fail policy, want all from Redis", got)
	}
	// One round trip per decision of a single rule (the first one's NOSCRIPT retry included).
	if got := metric(t, ts, redisTrips); got != 14 {
		t.Errorf("%v round trips to Redis for 14 decisions", got)
	}
}

// startThree runs three dianad servers on yaml: each has its own Redis client.
func startThree(t *testing.T, yaml string) []*testServer {
	return []*testServer{startFile(t, yaml), startFile(t, yaml), startFile(t, yaml)}
}

// hammer sends perWorker requests on each of workers goroutines per server, all starting
// together, each goroutine going through ips from its own offset, and returns the statuses by
// client IP. A request that fails is an error of t.
func hammer(t *testing.T, servers []*testServer, workers, perWorker int, ips []string) map[string]map[int]int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]map[int]int{}
	var failures []string
	start := make(chan struct{})
	for s, ts := range servers {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range perWorker {
					ip := ips[(s*workers+w+i)%len(ips)]
					r, err := do(http.MethodGet, ts.proxy+"/", ip, nil, "")
					mu.Lock()
					if err != nil {
						failures = append(failures, err.Error())
					} else {
						if got[ip] == nil {
							got[ip] = map[int]int{}
						}
						got[ip][r.status]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d requests failed, e.g. %s", len(failures), failures[0])
	}
	return got
}

// sum returns the number of requests in statuses.
func sum(statuses map[int]int) int {
	n := 0
	for _, c := range statuses {
		n += c
	}
	return n
}

// clientIPs returns n documentation addresses.
func clientIPs(n int) []string {
	ips := make([]string, n)
	for i := range ips {
		ips[i] = "198.51.100." + strconv.Itoa(i+1)
	}
	return ips
}

// TestThreeInstances runs three dianad servers on one Redis under concurrent load: for an exact
// algorithm, every client gets exactly its limit of 200s in all, never one more.
func TestThreeInstances(t *testing.T) {
	const limit = 20
	tests := []struct{ name, limit string }{
		{"sliding_log", `{algorithm: sliding_log, limit: 20, window: 1h}`},
		{"fixed_window", `{algorithm: fixed_window, limit: 20, window: ` + forever + `}`},
		// One token back every 18 days: none during the test.
		{"token_bucket", `{algorithm: token_bucket, rate: 20, period: 365d}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := redistest.Start(t)
			servers := startThree(t, clusterConfig(exactTimeout, "1s", `  - name: per-ip
    by: [ip]
    mode: cluster
    on_error: closed
    limit: `+tt.limit+"\n", rs.Addr))
			ips := clientIPs(5)
			// 3 servers × 8 goroutines × 20 requests: 96 per client, 20 of them admissible.
			got := hammer(t, servers, 8, 20, ips)
			for _, ip := range ips {
				if got[ip][200] != limit || got[ip][429] != 96-limit || len(got[ip]) != 2 {
					t.Errorf("%s: statuses %v, want exactly %d × 200 and %d × 429", ip, got[ip], limit, 96-limit)
				}
			}
			for i, ts := range servers {
				if n := metric(t, ts, `diana_backend_errors_total{rule="per-ip"}`); n != 0 {
					t.Errorf("server %d: %v decisions came from the fail policy, want all from Redis", i, n)
				}
			}
		})
	}
}

// multiRules are a global and a per-IP cluster rule, both fixed windows so that Redis's counts
// can be read.
func multiRules(global, perIP int) string {
	return `  - name: global
    mode: cluster
    on_error: closed
    limit: {algorithm: fixed_window, limit: ` + strconv.Itoa(global) + `, window: ` + forever + `}
  - name: per-ip
    by: [ip]
    mode: cluster
    on_error: closed
    limit: {algorithm: fixed_window, limit: ` + strconv.Itoa(perIP) + `, window: ` + forever + `}
`
}

// TestThreeInstancesMultiRule checks, across three servers, that a request one rule denies
// takes nothing from the other rule, and that under concurrent load each rule counts exactly
// the requests admitted, never more than its limit.
func TestThreeInstancesMultiRule(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		rs := redistest.Start(t)
		rc := rs.Client()
		servers := startThree(t, clusterConfig(exactTimeout, "1s", multiRules(10, 3), rs.Addr))
		next := 0
		send := func(ip string, want int, limit string) {
			t.Helper()
			ts := servers[next%3] // the servers take turns
			next++
			r := get(t, ts.proxy+"/", ip)
			if r.status != want || r.header.Get("RateLimit-Limit") != limit {
				t.Fatalf("request %d from %s: status %d, RateLimit-Limit %q; want %d from the rule with limit %s",
					next, ip, r.status, r.header.Get("RateLimit-Limit"), want, limit)
			}
		}
		units := func(rule, id string) int64 { return stored(t, servers[0], rc, rule, id) }

		// x spends its 3; the per-IP rule denies 3 more, which the global rule does not count.
		const x = "192.0.2.10"
		for range 3 {
			send(x, 200, "3")
		}
		for range 3 {
			send(x, 429, "3")
		}
		if g, p := units("global", "global"), units("per-ip", "per-ip|"+x); g != 3 || p != 3 {
			t.Fatalf("Redis counts global %d, per-ip %s %d; want 3 and 3", g, x, p)
		}
		for _, ip := range []string{"192.0.2.11", "192.0.2.12"} {
			for range 3 {
				send(ip, 200, "3")
			}
		}
		// The global rule's last unit, then its denial, which the per-IP rule does not count.
		const y = "192.0.2.13"
		send(y, 200, "10")
		send(y, 429, "10")
		if g, p := units("global", "global"), units("per-ip", "per-ip|"+y); g != 10 || p != 1 {
			t.Errorf("Redis counts global %d, per-ip %s %d; want 10 and 1", g, y, p)
		}
		const z = "192.0.2.14"
		send(z, 429, "10")
		if p := units("per-ip", "per-ip|"+z); p != -1 {
			t.Errorf("Redis counts %d for %s, denied on its first request: want no state", p, z)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		rs := redistest.Start(t)
		rc := rs.Client()
		const global, perIP = 40, 6
		servers := startThree(t, clusterConfig(exactTimeout, "1s", multiRules(global, perIP), rs.Addr))
		ips := clientIPs(10) // 10 × 6 = 60 per-IP units: the global limit binds
		got := hammer(t, servers, 8, 15, ips)
		total := 0
		for _, ip := range ips {
			total += got[ip][200]
			if got[ip][200] > perIP || got[ip][200]+got[ip][429] != sum(got[ip]) {
				t.Errorf("%s: statuses %v, want at most %d × 200, the rest 429", ip, got[ip], perIP)
			}
			// Both rules are decided in one script call, all or nothing (rules.Together): Redis
			// counts the admissions exactly. (-1: no state, for a client the global limit refused
			// from the start.)
			if n := max(stored(t, servers[0], rc, "per-ip", "per-ip|"+ip), 0); n != int64(got[ip][200]) {
				t.Errorf("%s: Redis counts %d, with %d admitted; want them equal", ip, n, got[ip][200])
			}
		}
		if total > global || total == 0 {
			t.Errorf("%d requests admitted in all, want 1..%d", total, global)
		}
		if n := stored(t, servers[0], rc, "global", "global"); n != int64(total) {
			t.Errorf("Redis counts %d global units, with %d admitted; want them equal", n, total)
		}
		t.Logf("admitted %d of %d (global limit %d)", total, 3*8*15, global)
	})
}

// TestClusterTopology runs dianad on a Redis Cluster (one node serving every slot), reached
// through one address with redis.cluster set, as a cluster's configuration endpoint is; the
// client routes by slot as on a real cluster, where a script whose keys spanned slots would
// fail with CROSSSLOT. A request under two rules (two identities, two slots) and a banning rule
// (a state key and a ban key in one script) must be decided in Redis, with no error.
func TestClusterTopology(t *testing.T) {
	rs := redistest.StartCluster(t)
	rc := rs.Client()
	ts := startFile(t, strings.Replace(clusterConfig(exactTimeout, "1s", `  - name: global
    mode: cluster
    on_error: closed
    limit: {algorithm: fixed_window, limit: 100, window: `+forever+`}
  - name: per-ip
    by: [ip]
    mode: cluster
    on_error: closed
    ban: 1h
    limit: {algorithm: sliding_log, limit: 3, window: 1h}
`, rs.Addr)+"", "  breaker_failures: 3\n", "  breaker_failures: 3\n  cluster: true\n", 1))
	if _, ok := ts.rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("dianad's Redis client is a %T, want a *redis.ClusterClient", ts.rdb)
	}

	const x, y = "192.0.2.1", "192.0.2.2"
	for i := 1; i <= 3; i++ {
		if r := get(t, ts.proxy+"/", x); r.status != 200 || r.header.Get("RateLimit-Remaining") != strconv.Itoa(3-i) {
			t.Fatalf("request %d: status %d, RateLimit-Remaining %q, body %s", i, r.status, r.header.Get("RateLimit-Remaining"), r.body)
		}
	}
	if r := get(t, ts.proxy+"/", x); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("request 4: status %d, headers %v; want 429 from Redis", r.status, r.header)
	}
	if r := get(t, ts.proxy+"/", y); r.status != 200 || r.header.Get("RateLimit-Remaining") != "2" {
		t.Fatalf("another client: status %d, RateLimit-Remaining %q", r.status, r.header.Get("RateLimit-Remaining"))
	}
	if _, res := postCheck(t, ts, `{"client_ip":"`+y+`"}`, ""); res == nil || !res.Allowed || res.Remaining != 1 {
		t.Fatalf("/v1/check: %+v, want allowed with remaining 1", res)
	}
	for _, rule := range []string{"global", "per-ip"} {
		if got := metric(t, ts, `diana_backend_errors_total{rule="`+rule+`"}`); got != 0 {
			t.Errorf("rule %s: %v decisions came from the fail policy (a Redis error such as CROSSSLOT), want none", rule, got)
		}
	}
	if g, px, py := stored(t, ts, rc, "global", "global"), stored(t, ts, rc, "per-ip", "per-ip|"+x), stored(t, ts, rc, "per-ip", "per-ip|"+y); g != 5 || px != 3 || py != 2 {
		t.Errorf("Redis counts global %d, %s %d, %s %d; want 5, 3, 2", g, x, px, y, py)
	}
	_, ban := redisstore.New(rc, redisstore.Options{}).Keys("per-ip|" + x)
	if n, err := rc.Exists(context.Background(), ban).Result(); err != nil || n != 1 {
		t.Errorf("ban key %s: exists %d (%v), want the denial's ban", ban, n, err)
	}
}

// TestMutualTLS: dianad reaches a Redis that asks for client certificates (tls-auth-clients)
// with tls_cert_file and tls_key_file, and decides there; with on_error closed, a decision
// that did not come from Redis would be a denial.
func TestMutualTLS(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{TLS: true, ClientAuth: true})
	tlsConf := "  breaker_failures: 3\n  tls: true\n  tls_ca_file: " + rs.CAFile +
		"\n  tls_cert_file: " + rs.ClientCertFile + "\n  tls_key_file: " + rs.ClientKeyFile + "\n"
	ts := startFile(t, strings.Replace(clusterConfig(exactTimeout, "1s", `  - name: per-ip
    by: [ip]
    mode: cluster
    on_error: closed
    limit: {algorithm: fixed_window, limit: 2, window: 1h}
`, rs.Addr), "  breaker_failures: 3\n", tlsConf, 1))
	const x = "192.0.2.1"
	for i, want := range []int{200, 200, 429} {
		if r := get(t, ts.proxy+"/", x); r.status != want {
			t.Fatalf("request %d: status %d, want %d (body %s)", i+1, r.status, want, r.body)
		}
	}
	if got := metric(t, ts, `diana_backend_errors_total{rule="per-ip"}`); got != 0 {
		t.Errorf("%v decisions came from the fail policy, want every one from Redis", got)
	}
}

// failPolicy is an on_error policy of the fault tests' rule (fixed window, limit 30, nodes 3).
type failPolicy struct {
	name string
	// passes is how many requests of a new client pass while Redis cannot decide: all (open),
	// none (closed), or this node's share of the limit, 30/3 (local).
	passes int
}

var failPolicies = []failPolicy{{"open", math.MaxInt}, {"closed", 0}, {"local", 10}}

// faultRule is the fault tests' rule under on_error policy.
func faultRule(policy string) string {
	return `  - name: per-ip
    by: [ip]
    mode: cluster
    on_error: ` + policy + `
    nodes: 3
    limit: {algorithm: fixed_window, limit: 30, window: ` + forever + `}
`
}

// freshOK reports whether status is what a new client's first request may get under p: while
// Redis cannot decide (down), only p's answer; around a fault, that or Redis's 200.
func (p failPolicy) freshOK(status int, down bool) bool {
	want := 200
	if p.passes == 0 {
		want = 429
	}
	return status == want || !down && status == 200
}

// expectDown sends n requests from the new client ip while Redis cannot decide: p decides them,
// so the first p.passes pass and the others get 429, without rate-limit headers (the policy's
// numbers are not Redis's).
func expectDown(t *testing.T, ts *testServer, p failPolicy, ip string, n int) {
	t.Helper()
	for i := range n {
		r := get(t, ts.proxy+"/", ip)
		want := 429
		if i < p.passes {
			want = 200
		}
		if r.status != want || r.header.Get("RateLimit-Limit") != "" {
			t.Fatalf("on_error %s, request %d of %s with Redis down: status %d, RateLimit-Limit %q; want %d from the policy, no header",
				p.name, i+1, ip, r.status, r.header.Get("RateLimit-Limit"), want)
		}
	}
}

// freshRequest sends a request from a new client, which must get p.freshOK, never a 5xx or a
// connection error.
func freshRequest(t *testing.T, ts *testServer, p failPolicy, down bool) {
	t.Helper()
	ip := freshIP(ts)
	r, err := do(http.MethodGet, ts.proxy+"/", ip, nil, "")
	if err != nil {
		t.Fatalf("on_error %s: request from %s: %v", p.name, ip, err)
	}
	if !p.freshOK(r.status, down) {
		t.Fatalf("on_error %s: request from %s (Redis down: %v): status %d %s", p.name, ip, down, r.status, r.body)
	}
}

// clusterLoad sends requests from new clients to a server on several goroutines until finished.
type clusterLoad struct {
	stop     atomic.Bool
	wg       sync.WaitGroup
	sent     atomic.Int64
	mu       sync.Mutex
	statuses map[int]int
	failures []string
}

func startLoad(t *testing.T, ts *testServer, workers int) *clusterLoad {
	l := &clusterLoad{statuses: map[int]int{}}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stop.Load() {
				r, err := do(http.MethodGet, ts.proxy+"/", freshIP(ts), nil, "")
				l.mu.Lock()
				if err != nil {
					l.failures = append(l.failures, err.Error())
				} else {
					l.statuses[r.status]++
				}
				l.mu.Unlock()
				l.sent.Add(1)
			}
		}()
	}
	t.Cleanup(l.finish) // before the server stops, should the test end early
	return l
}

// finish stops the load and waits for its requests; safe to call twice.
func (l *clusterLoad) finish() {
	l.stop.Store(true)
	l.wg.Wait()
}

// expect finishes the load and checks that every request got p.freshOK, none failed.
func (l *clusterLoad) expect(t *testing.T, p failPolicy, what string, down bool) {
	t.Helper()
	l.finish()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) > 0 {
		t.Errorf("on_error %s, %s: %d requests failed, e.g. %s", p.name, what, len(l.failures), l.failures[0])
	}
	for status, n := range l.statuses {
		if !p.freshOK(status, down) {
			t.Errorf("on_error %s, %s: %d requests got %d", p.name, what, n, status)
		}
	}
	t.Logf("on_error %s, %s: statuses %v", p.name, what, l.statuses)
}

// TestFaultRedisKilled kills Redis under load: every request is answered by the rule's policy,
// and once the breaker is open no request goes to Redis at all.
func TestFaultRedisKilled(t *testing.T) {
	for _, p := range failPolicies {
		t.Run(p.name, func(t *testing.T) {
			rs := redistest.Start(t)
			rc := rs.Client()
			// Once open, the breaker stays open for the rest of the test (no probe is due): a round
			// trip counted then would be a request waiting on Redis.
			ts := startFile(t, clusterConfig(faultTimeout, "1h", faultRule(p.name), rs.Addr))
			const a = "192.0.2.1"
			expectRedis(t, ts, a, 30, 0, 5)
			if n := stored(t, ts, rc, "per-ip", "per-ip|"+a); n != 5 {
				t.Fatalf("Redis counts %d for %s, want 5", n, a)
			}

			l := startLoad(t, ts, 4)
			eventually(t, "the load runs", func() bool { return l.sent.Load() >= 20 })
			rs.Stop()
			eventually(t, "the breaker opens", func() bool { return metric(t, ts, breakerOpen) == 1 })
			sent := l.sent.Load()
			eventually(t, "more load with the breaker open", func() bool { return l.sent.Load() >= sent+40 })
			l.expect(t, p, "Redis killed under load", false)

			trips := metric(t, ts, redisTrips)
			expectDown(t, ts, p, "192.0.2.2", 15)
			l = startLoad(t, ts, 4)
			eventually(t, "load with the breaker open", func() bool { return l.sent.Load() >= 60 })
			l.expect(t, p, "breaker open", true)
			if got := metric(t, ts, redisTrips); got != trips {
				t.Errorf("%v round trips to Redis while the breaker was open, want none", got-trips)
			}
			if got := metric(t, ts, breakerOpen); got != 1 {
				t.Errorf("%s = %v, want 1", breakerOpen, got)
			}
			if got := metric(t, ts, `diana_backend_errors_total{rule="per-ip"}`); got < 15 {
				t.Errorf("%v decisions from the fail policy, want at least the 15 of %s", got, "192.0.2.2")
			}
		})
	}
}

// TestFaultRedisPaused stops the Redis process (SIGSTOP): it accepts connections and never
// answers. Requests are answered by the policy once the timeout passes, the breaker opens, and
// once Redis resumes, a probe closes the breaker and Redis decides again, its counts intact.
func TestFaultRedisPaused(t *testing.T) {
	for _, p := range failPolicies {
		t.Run(p.name, func(t *testing.T) {
			rs := redistest.Start(t)
			rc := rs.Client()
			ts := startFile(t, clusterConfig(faultTimeout, "200ms", faultRule(p.name), rs.Addr))
			const a = "192.0.2.1"
			expectRedis(t, ts, a, 30, 0, 5)

			rs.Pause()
			eventually(t, "the breaker opens", func() bool {
				freshRequest(t, ts, p, true)
				return metric(t, ts, breakerOpen) == 1
			})
			// While open, only the probes go to Redis, one per open period of 200ms.
			trips := metric(t, ts, redisTrips)
			began := time.Now()
			expectDown(t, ts, p, "192.0.2.2", 15)
			for range 45 {
				freshRequest(t, ts, p, true)
			}
			got := metric(t, ts, redisTrips) - trips
			if probes := float64(time.Since(began)/(200*time.Millisecond)) + 2; got > probes {
				t.Errorf("%v round trips to Redis during 60 requests with the breaker open, want only the probes, at most %v", got, probes)
			}
			t.Logf("on_error %s: %v probes during 60 requests with the breaker open", p.name, got)

			rs.Resume()
			eventually(t, "the breaker closes", func() bool {
				freshRequest(t, ts, p, false)
				return metric(t, ts, breakerOpen) == 0
			})
			// a's count was kept in Redis: its next request continues from it.
			expectRedis(t, ts, a, 30, 5, 1)
			if n := stored(t, ts, rc, "per-ip", "per-ip|"+a); n != 6 {
				t.Errorf("Redis counts %d for %s, want 6", n, a)
			}
		})
	}
}

// TestFaultRedisRestarted restarts Redis (its state and scripts gone): cluster mode resumes by
// itself, without restarting dianad, both when the breaker stayed closed and when it opened.
func TestFaultRedisRestarted(t *testing.T) {
	for _, p := range failPolicies {
		t.Run(p.name, func(t *testing.T) {
			rs := redistest.Start(t)
			rc := rs.Client()
			ts := startFile(t, clusterConfig(faultTimeout, "200ms", faultRule(p.name), rs.Addr))
			const a, b = "192.0.2.1", "192.0.2.2"
			// decidedInRedis sends a request from a new client and reports whether Redis counted it.
			decidedInRedis := func() bool {
				ip := freshIP(ts)
				r, err := do(http.MethodGet, ts.proxy+"/", ip, nil, "")
				if err != nil || !p.freshOK(r.status, false) {
					t.Fatalf("on_error %s: request from %s: %v %v %s", p.name, ip, err, r.status, r.body)
				}
				_, ok, err := redisUnits(context.Background(), ts, rc, "per-ip", "per-ip|"+ip)
				return err == nil && ok && r.status == 200 && r.header.Get("RateLimit-Limit") == "30"
			}
			expectRedis(t, ts, a, 30, 0, 5)

			// Restarted at once: the next round trips find no script (redisstore sends it again)
			// and no state.
			rs.Restart()
			eventually(t, "Redis decides after a restart", decidedInRedis)
			expectRedis(t, ts, a, 30, 0, 1)

			// Down long enough for the breaker to open, then restarted.
			rs.Stop()
			eventually(t, "the breaker opens", func() bool {
				freshRequest(t, ts, p, true)
				return metric(t, ts, breakerOpen) == 1
			})
			expectDown(t, ts, p, b, 12)
			rs.Restart()
			eventually(t, "a probe closes the breaker and Redis decides again", func() bool {
				return decidedInRedis() && metric(t, ts, breakerOpen) == 0
			})
			// Redis, not the local share, decides for a and b again: a from scratch (the
			// restart lost its state), b from what this node admitted alone while Redis was
			// down, which on_error local writes back first (issue 28).
			used := 0
			if p.name == "local" {
				used = p.passes
			}
			expectRedis(t, ts, a, 30, 0, 1)
			expectRedis(t, ts, b, 30, used, 1)
			if n := stored(t, ts, rc, "per-ip", "per-ip|"+b); n != int64(used)+1 {
				t.Errorf("Redis counts %d for %s, want %d", n, b, used+1)
			}
		})
	}
}

// At start dianad says whether Redis can be used, and if not, why, as Redis says it: a wrong
// password is WRONGPASS, a missing one NOAUTH, a closed port a refused connection.
func TestRedisStartCheck(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{Users: []string{"diana on >secret ~* +@all"}})
	closed := redistest.Start(t)
	closedAddr := closed.Addr
	closed.Stop()
	for _, c := range []struct{ redis, want string }{
		{`{addrs: "` + srv.Addr + `", username: diana, password: secret}`, `level=INFO msg="Redis answers"`},
		{`{addrs: "` + srv.Addr + `", username: diana, password: wrong}`, "WRONGPASS"},
		{`{addrs: "` + srv.Addr + `"}`, "NOAUTH"},
		{`{addrs: "` + closedAddr + `"}`, "connection refused"},
	} {
		cfg, err := Parse([]byte(header+"redis: "+c.redis+"\n"), "c.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var logs logbuf.Buffer
		s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), ShutdownTimeout: waitFor})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		eventually(t, "the start-up check of "+c.redis, func() bool {
			return strings.Contains(logs.String(), "Redis")
		})
		cancel()
		<-done
		if out := logs.String(); !strings.Contains(out, c.want) {
			t.Errorf("redis %s: logs lack %q:\n%s", c.redis, c.want, out)
		}
	}
}

// TestUnsplitWarning: a warm_up rule that would be split among nodes while Redis is down
// (on_error local) starts, with a warning naming its field.
func TestUnsplitWarning(t *testing.T) {
	rs := redistest.Start(t)
	cfg, err := Parse([]byte(clusterConfig(exactTimeout, "1s", `  - name: warm
    mode: cluster
    on_error: local
    nodes: 3
    limit: {algorithm: warm_up, rate: 10, period: 1s, warmup: 10s}
`, rs.Addr)), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), ShutdownTimeout: waitFor})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if out := logs.String(); !strings.Contains(out, `level=WARN msg="config: warm_up does not split across nodes`) ||
		!strings.Contains(out, `field=rules[0].on_error rule=warm`) {
		t.Errorf("no warning naming rules[0].on_error:\n%s", out)
	}
}
