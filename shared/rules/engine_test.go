package rules_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// start is the test clock's first reading: a whole number of days, so fixed windows start with it.
const start = 20000 * algos.Day

// clock is a test clock for memstore, moved only by the test.
type clock struct{ now atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.now.Store(start)
	return c
}

func (c *clock) Now() int64    { return c.now.Load() }
func (c *clock) Add(d int64)   { c.now.Add(d) }
func (c *clock) Since() string { return conf.FormatDuration(c.Now() - start) }

// observation is one call of Options.Observe.
type observation struct {
	rule    string
	outcome rules.Outcome
	err     error
}

// env is an engine over a memstore driven by a test clock, recording what it observes.
type env struct {
	t     *testing.T
	clock *clock
	store *memstore.Store
	local rules.Store
	eng   *rules.Engine
	rules map[string]*rules.Rule

	mu  sync.Mutex
	obs []observation
}

// newEnv decodes doc ({"rules": [...]}) and builds an engine with a memstore as its local store.
func newEnv(t *testing.T, doc string) *env {
	t.Helper()
	e := &env{t: t, clock: newClock(), rules: map[string]*rules.Rule{}}
	e.store = memstore.New(memstore.Options{Clock: e.clock.Now})
	e.local = rules.Each(e.store.Decide)
	e.build(mustDecode(t, doc), rules.Options{})
	return e
}

// build (re)builds the engine over rs with o, filling in the local store and the observer.
func (e *env) build(rs []*rules.Rule, o rules.Options) {
	e.t.Helper()
	if o.Local == nil {
		o.Local = e.local
	}
	o.Observe = func(r *rules.Rule, _ *rules.Input, oc rules.Outcome, err error) {
		e.mu.Lock()
		e.obs = append(e.obs, observation{r.Name, oc, err})
		e.mu.Unlock()
	}
	eng, err := rules.New(rs, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.eng = eng
	for _, r := range rs {
		e.rules[r.Name] = r
	}
}

func (e *env) check(in *rules.Input) rules.Result {
	return e.eng.Check(context.Background(), in)
}

// observed returns and forgets the observations so far, as "rule:outcome" strings.
func (e *env) observed() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, o := range e.obs {
		out = append(out, o.rule+":"+o.outcome.String())
	}
	e.obs = nil
	return out
}

// remaining peeks at the units rule name has left for in's identity, taking nothing: it decides
// a copy of the rule with cost 0 on the same store (the key is the same: it starts with the name).
func (e *env) remaining(name string, in *rules.Input) int64 {
	e.t.Helper()
	r, ok := e.rules[name]
	if !ok {
		e.t.Fatalf("no rule %q", name)
	}
	peek := *r
	peek.Cost, peek.Action = 0, rules.Reject
	eng, err := rules.New([]*rules.Rule{&peek}, rules.Options{Local: e.local, Cluster: e.local})
	if err != nil {
		e.t.Fatal(err)
	}
	res := eng.Check(context.Background(), in)
	if res.Rule == nil {
		e.t.Fatalf("rule %s does not apply to %+v", name, in)
	}
	return res.Decision.Remaining
}

// expect checks a result: allowed or not, and the reported rule ("" for none).
func (e *env) expect(res rules.Result, allowed bool, rule string) {
	e.t.Helper()
	got := ""
	if res.Rule != nil {
		got = res.Rule.Name
	}
	if res.Allowed != allowed || got != rule {
		e.t.Fatalf("at +%s: Allowed = %v, Rule = %q (%+v); want %v, %q", e.clock.Since(), res.Allowed, got, res.Decision, allowed, rule)
	}
}

func ip(addr string) *rules.Input { return &rules.Input{Method: "GET", Path: "/", ClientIP: addr} }

// bothOrders returns the documents {"rules": [a, b]} and {"rules": [b, a]}.
func bothOrders(a, b string) map[string]string {
	return map[string]string{
		"a,b": `{"rules": [` + a + `, ` + b + `]}`,
		"b,a": `{"rules": [` + b + `, ` + a + `]}`,
	}
}

// A request denied by one rule takes nothing from the others, whichever rule denies it and in
// whichever order the rules come.
func TestEngineDeniedTakesNothing(t *testing.T) {
	perIP := `{"name": "per_ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 2, "period": "1h"}}`
	global := `{"name": "global", "limit": {"algorithm": "token_bucket", "rate": 5, "period": "1h"}}`
	for order, doc := range bothOrders(perIP, global) {
		t.Run(order, func(t *testing.T) {
			e := newEnv(t, doc)
			a, b, c, d := ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"), ip("10.0.0.4")

			e.expect(e.check(a), true, "per_ip") // per_ip 1 left, global 4: per_ip is closer
			e.expect(e.check(a), true, "per_ip")
			// per_ip denies: global keeps its 3.
			for range 3 {
				e.expect(e.check(a), false, "per_ip")
			}
			if got := e.remaining("global", a); got != 3 {
				t.Fatalf("global has %d left after per_ip's denials, want 3", got)
			}

			e.expect(e.check(b), true, "per_ip") // per_ip 1 left, global 2
			e.expect(e.check(b), true, "per_ip") // per_ip 0, global 1
			e.expect(e.check(c), true, "global") // per_ip 1, global 0
			// global denies: per_ip of d and c keep their units.
			e.expect(e.check(d), false, "global")
			e.expect(e.check(d), false, "global")
			e.expect(e.check(c), false, "global")
			if got := e.remaining("per_ip", d); got != 2 {
				t.Errorf("per_ip of d has %d left after global's denials, want 2", got)
			}
			if got := e.remaining("per_ip", c); got != 1 {
				t.Errorf("per_ip of c has %d left after global's denial, want 1", got)
			}
		})
	}
}

// The denying rule with a ban is committed, so the ban starts, while the other rules are
// untouched.
func TestEngineBan(t *testing.T) {
	perIP := `{"name": "per_ip", "by": ["ip"], "ban": "1m", "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1s"}}`
	global := `{"name": "global", "limit": {"algorithm": "token_bucket", "rate": 100, "period": "1000h"}}` // no refill to speak of
	for order, doc := range bothOrders(perIP, global) {
		t.Run(order, func(t *testing.T) {
			e := newEnv(t, doc)
			a, b := ip("10.0.0.1"), ip("10.0.0.2")
			e.expect(e.check(a), true, "per_ip")
			res := e.check(a)
			e.expect(res, false, "per_ip")
			if res.Decision.RetryAfter != algos.Minute {
				t.Errorf("RetryAfter of the denial that starts the ban = %d, want 1m", res.Decision.RetryAfter)
			}
			if got := e.remaining("global", a); got != 99 {
				t.Errorf("global has %d left, want 99", got)
			}
			// Without the ban, a would get a unit back after 1s.
			e.clock.Add(2 * algos.Second)
			res = e.check(a)
			e.expect(res, false, "per_ip")
			if res.Decision.RetryAfter != 58*algos.Second {
				t.Errorf("RetryAfter during the ban = %s, want 58s", conf.FormatDuration(res.Decision.RetryAfter))
			}
			if got := e.remaining("global", a); got != 99 {
				t.Errorf("global has %d left during the ban, want 99", got)
			}
			e.expect(e.check(b), true, "per_ip") // another identity is not banned
			e.clock.Add(59 * algos.Second)
			e.expect(e.check(a), true, "per_ip")
			if got := e.remaining("global", a); got != 97 {
				t.Errorf("global has %d left, want 97", got)
			}
		})
	}
}

func TestEngineShadow(t *testing.T) {
	t.Run("never denies, observed as shadow_denied", func(t *testing.T) {
		e := newEnv(t, `{"rules": [
			{"name": "watch", "action": "shadow", "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1h"}},
			{"name": "per_ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 2, "period": "1h"}}
		]}`)
		a := ip("10.0.0.1")
		e.expect(e.check(a), true, "per_ip")
		if got, want := e.observed(), []string{"watch:allowed", "per_ip:allowed"}; !equal(got, want) {
			t.Errorf("observed %q, want %q", got, want)
		}
		e.expect(e.check(a), true, "per_ip") // watch would deny
		if got, want := e.observed(), []string{"watch:shadow_denied", "per_ip:allowed"}; !equal(got, want) {
			t.Errorf("observed %q, want %q", got, want)
		}
		if got := e.remaining("per_ip", a); got != 0 {
			t.Errorf("per_ip has %d left, want 0", got)
		}
		e.expect(e.check(a), false, "per_ip")
		if got, want := e.observed(), []string{"watch:shadow_denied", "per_ip:denied"}; !equal(got, want) {
			t.Errorf("observed %q, want %q", got, want)
		}
	})
	t.Run("consumes only when the request goes through", func(t *testing.T) {
		e := newEnv(t, `{"rules": [
			{"name": "watch", "action": "shadow", "limit": {"algorithm": "token_bucket", "rate": 5, "period": "1h"}},
			{"name": "per_ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1h"}}
		]}`)
		a, b := ip("10.0.0.1"), ip("10.0.0.2")
		e.expect(e.check(a), true, "per_ip")
		e.expect(e.check(a), false, "per_ip")
		if got := e.remaining("watch", a); got != 4 {
			t.Errorf("watch has %d left after a denied request, want 4", got)
		}
		e.expect(e.check(b), true, "per_ip")
		if got := e.remaining("watch", a); got != 3 {
			t.Errorf("watch has %d left, want 3", got)
		}
	})
	t.Run("alone", func(t *testing.T) {
		e := newEnv(t, `{"rules": [{"name": "watch", "action": "shadow", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1m"}}]}`)
		for i := range 3 {
			res := e.check(ip("10.0.0.1"))
			e.expect(res, true, "") // a shadow rule is never the one reported
			if (res.Shadow != nil) != (i > 0) || i > 0 && res.Shadow.Name != "watch" {
				t.Errorf("request %d: Result.Shadow = %v", i, res.Shadow)
			}
		}
		if got, want := e.observed(), []string{"watch:allowed", "watch:shadow_denied", "watch:shadow_denied"}; !equal(got, want) {
			t.Errorf("observed %q, want %q", got, want)
		}
	})
}

func TestEngineDelay(t *testing.T) {
	shape := `{"name": "shape", "action": "delay", "max_delay": "2s", "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1s"}}`
	global := `{"name": "global", "limit": {"algorithm": "token_bucket", "rate": 100, "period": "1h"}}`
	docs := bothOrders(shape, global)
	docs["alone"] = `{"rules": [` + shape + `]}`
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, doc)
			a := ip("10.0.0.1")
			// Each admission reserves its unit: the next request waits one period longer.
			for i, want := range []int64{0, algos.Second, 2 * algos.Second} {
				res := e.check(a)
				e.expect(res, true, "shape")
				if res.Delay != want {
					t.Fatalf("request %d: Delay = %s, want %s", i, conf.FormatDuration(res.Delay), conf.FormatDuration(want))
				}
			}
			res := e.check(a) // would wait 3s > max_delay
			e.expect(res, false, "shape")
			// Retry-After is when it would pass without a delay.
			if res.Delay != 0 || res.Decision.RetryAfter != 3*algos.Second {
				t.Errorf("denial: Delay = %d, RetryAfter = %d; want 0, 3s", res.Delay, res.Decision.RetryAfter)
			}
			e.clock.Add(algos.Second)
			if res := e.check(a); !res.Allowed || res.Delay != 2*algos.Second {
				t.Errorf("after 1s: Allowed = %v, Delay = %d; want true, 2s", res.Allowed, res.Delay)
			}
			if _, ok := e.rules["global"]; ok {
				if got := e.remaining("global", a); got != 96 {
					t.Errorf("global has %d left, want 96 (4 admitted)", got)
				}
			}
		})
	}
	t.Run("denied by another rule: no delay, nothing reserved", func(t *testing.T) {
		e := newEnv(t, `{"rules": [`+shape+`, {"name": "per_ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`)
		e.expect(e.check(ip("10.0.0.1")), true, "shape") // both 0 left: the first is reported
		res := e.check(ip("10.0.0.1"))                   // shape would hold it 1s; per_ip denies
		e.expect(res, false, "per_ip")
		if res.Delay != 0 {
			t.Errorf("denied request: Delay = %d, want 0", res.Delay)
		}
		if res := e.check(ip("10.0.0.2")); !res.Allowed || res.Delay != algos.Second {
			t.Errorf("next request: Allowed = %v, Delay = %s; want true, 1s (the denied one reserved nothing)", res.Allowed, conf.FormatDuration(res.Delay))
		}
	})
}

// Result.Rule and Decision report the denying rule, or the admitting rule closest to its limit.
func TestEngineReportedRule(t *testing.T) {
	wide := `{"name": "wide", "limit": {"algorithm": "token_bucket", "rate": 10, "period": "1h"}}`
	narrow := `{"name": "narrow", "limit": {"algorithm": "token_bucket", "rate": 3, "period": "1h"}}`
	for order, doc := range bothOrders(wide, narrow) {
		t.Run(order, func(t *testing.T) {
			e := newEnv(t, doc)
			res := e.check(ip("10.0.0.1"))
			e.expect(res, true, "narrow")
			if d := res.Decision; d.Limit != 3 || d.Remaining != 2 {
				t.Errorf("Decision = %+v, want narrow's: Limit 3, Remaining 2", d)
			}
		})
	}
	// Of two denying rules, the one that holds the request longer is reported.
	short := `{"name": "short", "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1s"}}`
	long := `{"name": "long", "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1h"}}`
	for order, doc := range bothOrders(short, long) {
		t.Run("denied "+order, func(t *testing.T) {
			e := newEnv(t, doc)
			e.check(ip("10.0.0.1"))
			res := e.check(ip("10.0.0.1"))
			e.expect(res, false, "long")
			if res.Decision.RetryAfter != algos.Hour {
				t.Errorf("RetryAfter = %d, want 1h", res.Decision.RetryAfter)
			}
		})
	}
	// A cost above a rule's capacity is denied for ever: that rule is reported.
	never := `{"name": "never", "cost": 5, "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1s"}}`
	for order, doc := range bothOrders(never, long) {
		t.Run("never "+order, func(t *testing.T) {
			e := newEnv(t, doc)
			e.check(ip("10.0.0.1"))
			res := e.check(ip("10.0.0.1"))
			e.expect(res, false, "never")
			if res.Decision.RetryAfter != algos.Never {
				t.Errorf("RetryAfter = %d, want Never", res.Decision.RetryAfter)
			}
		})
	}
	t.Run("no rule applies", func(t *testing.T) {
		e := newEnv(t, `{"rules": [{"name": "c", "match": {"consumers": ["alice"]}, "by": ["consumer"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}},
			{"name": "p", "match": {"paths": ["/api/**"]}, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}]}`)
		for range 3 {
			res := e.check(ip("10.0.0.1")) // no consumer, path "/"
			e.expect(res, true, "")
			if res.Decision != (algos.Decision{}) || res.Delay != 0 || res.Err != nil {
				t.Errorf("result without rules = %+v", res)
			}
		}
		if got := e.observed(); len(got) != 0 {
			t.Errorf("observed %q for a request no rule applies to", got)
		}
		// With a consumer, rule c applies.
		in := ip("10.0.0.1")
		in.Consumer = "alice"
		e.expect(e.check(in), true, "c")
		e.expect(e.check(in), false, "c")
	})
}

func TestEngineLeases(t *testing.T) {
	cc := `{"name": "cc", "limit": {"algorithm": "concurrency", "max": 2, "lease": "1m"}}`
	perIP := `{"name": "per_ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1h"}}`
	for order, doc := range bothOrders(cc, perIP) {
		t.Run(order, func(t *testing.T) {
			e := newEnv(t, doc)
			ctx := context.Background()
			a, b, c := ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3")
			resA := e.check(a)
			e.expect(resA, true, "per_ip")
			if got := e.remaining("cc", a); got != 1 {
				t.Fatalf("cc has %d left, want 1", got)
			}
			// Denied by per_ip: holds no lease.
			denied := e.check(a)
			e.expect(denied, false, "per_ip")
			e.eng.Release(ctx, &denied)
			if got := e.remaining("cc", a); got != 1 {
				t.Fatalf("cc has %d left after a denied request, want 1", got)
			}
			resB := e.check(b) // cc and per_ip both have 0 left: the first in order is reported
			if !resB.Allowed {
				t.Fatalf("b denied: %+v", resB)
			}
			deniedC := e.check(c)
			e.expect(deniedC, false, "cc")
			e.eng.Release(ctx, &deniedC)
			if got := e.remaining("per_ip", c); got != 1 {
				t.Fatalf("per_ip of c has %d left after cc's denial, want 1", got)
			}
			// Release frees a's lease: c gets in.
			e.eng.Release(ctx, &resA)
			e.eng.Release(ctx, &resA) // a second release is a no-op
			if got := e.remaining("cc", a); got != 1 {
				t.Fatalf("cc has %d left after a release, want 1", got)
			}
			resC := e.check(c)
			if !resC.Allowed {
				t.Fatalf("c denied after a release: %+v", resC)
			}
			e.eng.Release(ctx, &resB)
			e.eng.Release(ctx, &resC)
			if got := e.remaining("cc", a); got != 2 {
				t.Fatalf("cc has %d left after every release, want 2", got)
			}
		})
	}
	t.Run("a lease not released expires", func(t *testing.T) {
		e := newEnv(t, `{"rules": [`+cc+`]}`)
		e.check(ip("10.0.0.1"))
		e.check(ip("10.0.0.1"))
		e.expect(e.check(ip("10.0.0.1")), false, "cc")
		e.clock.Add(algos.Minute)
		e.expect(e.check(ip("10.0.0.1")), true, "cc")
	})
	t.Run("lease ids come from LeaseID", func(t *testing.T) {
		e := newEnv(t, `{"rules": [`+cc+`, `+perIP+`]}`)
		var ids atomic.Int64
		e.build(mustDecode(t, `{"rules": [`+cc+`, `+perIP+`]}`), rules.Options{LeaseID: func() int64 { return ids.Add(1) }})
		res := e.check(ip("10.0.0.1"))
		e.check(ip("10.0.0.2"))
		if ids.Load() != 2 {
			t.Errorf("LeaseID called %d times for 2 requests, want 2", ids.Load())
		}
		e.eng.Release(context.Background(), &res)
		e.expect(e.check(ip("10.0.0.3")), true, "cc")
	})
}

func TestEngineObserve(t *testing.T) {
	e := newEnv(t, `{"rules": [
		{"name": "a", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "b", "limit": {"algorithm": "fixed_window", "limit": 5, "window": "1h"}},
		{"name": "s", "action": "shadow", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "other", "match": {"methods": ["POST"]}, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}
	]}`)
	e.check(ip("10.0.0.1"))
	if got, want := e.observed(), []string{"a:allowed", "b:allowed", "s:allowed"}; !equal(got, want) {
		t.Errorf("admitted: observed %q, want %q", got, want)
	}
	// Refused by a: b took nothing and is not observed; s would have refused it.
	e.check(ip("10.0.0.1"))
	if got, want := e.observed(), []string{"a:denied", "s:shadow_denied"}; !equal(got, want) {
		t.Errorf("refused: observed %q, want %q", got, want)
	}
	for o, want := range map[rules.Outcome]string{rules.Allowed: "allowed", rules.Denied: "denied", rules.ShadowDenied: "shadow_denied"} {
		if o.String() != want {
			t.Errorf("Outcome %d String() = %q, want %q", o, o.String(), want)
		}
	}
}

// An unlimited rule exempts the requests it matches from every rule, before or after it, and
// is observed; the others are limited as before. Peek shows the exemption.
func TestEngineUnlimited(t *testing.T) {
	internal := `{"name": "internal", "unlimited": true, "match": {"clients": ["10.0.0.0/8"], "not": {"paths": ["/login"]}}}`
	limit := `{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}`
	for order, doc := range bothOrders(internal, limit) {
		t.Run(order, func(t *testing.T) {
			e := newEnv(t, doc)
			in := func(a, path string) *rules.Input {
				in := &rules.Input{Method: "GET", Path: path}
				in.SetClient(netip.MustParseAddr(a), 64)
				return in
			}
			for range 3 {
				res := e.check(in("10.1.2.3", "/x"))
				e.expect(res, true, "")
				if res.Unlimited == nil || res.Unlimited.Name != "internal" {
					t.Errorf("Unlimited = %v, want the rule internal", res.Unlimited)
				}
				if got, want := e.observed(), []string{"internal:unlimited"}; !equal(got, want) {
					t.Errorf("observed %q, want %q", got, want)
				}
			}
			// The exception of the exemption, and a client outside it, are limited.
			e.expect(e.check(in("10.1.2.3", "/login")), true, "per-ip")
			e.expect(e.check(in("10.1.2.3", "//login/")), false, "per-ip")
			e.expect(e.check(in("192.0.2.1", "/x")), true, "per-ip")
			e.expect(e.check(in("192.0.2.1", "/x")), false, "per-ip")
			e.expect(e.check(in("::ffff:10.9.9.9", "/y")), true, "")

			got, ok := e.eng.Peek(context.Background(), in("10.1.2.3", "/x"))
			if !ok || len(got) != 1 || got[0].Rule.Name != "internal" || !got[0].Decision.Allowed || got[0].Key != "" {
				t.Errorf("Peek of an exempt request = %+v, %v; want the rule internal alone, allowed", got, ok)
			}
		})
	}
	if rules.Exempted.String() != "unlimited" {
		t.Errorf("Exempted String() = %q", rules.Exempted.String())
	}
}

// A request without the value a rule counts by is limited all the same: by its address, or
// with every request that has none. Leaving out the header does not escape the limit.
func TestEngineMissingValues(t *testing.T) {
	e := newEnv(t, `{"rules": [{"name": "per-key", "by": ["header:X-Api-Key"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}}]}`)
	keyed := func(k string) *rules.Input {
		return &rules.Input{Method: "GET", Path: "/", ClientIP: "192.0.2.1", Headers: hdr("X-Api-Key", k)}
	}
	e.expect(e.check(keyed("k1")), true, "per-key")
	e.expect(e.check(keyed("k1")), true, "per-key")
	e.expect(e.check(keyed("k1")), false, "per-key")
	e.expect(e.check(keyed("")), true, "per-key") // by address 192.0.2.1, a count apart from k1's
	e.expect(e.check(keyed("")), true, "per-key")
	e.expect(e.check(keyed("")), false, "per-key")
	e.expect(e.check(ip("192.0.2.2")), true, "per-key")
	noAddr := &rules.Input{Method: "GET", Path: "/"}
	e.expect(e.check(noAddr), true, "per-key")
	e.expect(e.check(&rules.Input{Method: "GET", Path: "/"}), true, "per-key")
	e.expect(e.check(&rules.Input{Method: "GET", Path: "/"}), false, "per-key")
}

func TestNew(t *testing.T) {
	local := rules.Each(memstore.New(memstore.Options{}).Decide)
	cluster := mustDecode(t, `{"rules": [{"name": "shared", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}]}`)
	localRules := mustDecode(t, `{"rules": [{"name": "mine", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}]}`)
	tests := []struct {
		name  string
		rules []*rules.Rule
		o     rules.Options
		err   string
	}{
		{"cluster rule without a cluster store", cluster, rules.Options{Local: local}, `rules: rule "shared" is in cluster mode, which has no store`},
		{"local rule without a local store", localRules, rules.Options{Cluster: local}, `rules: rule "mine" is in local mode, which has no store`},
		{"rule without an algorithm", []*rules.Rule{{Name: "bare"}}, rules.Options{Local: local}, `rules: rule "bare" has no algorithm`},
		{"no rules", nil, rules.Options{}, ""},
		{"cluster rule with its store", cluster, rules.Options{Cluster: local}, ""},
	}
	for _, tt := range tests {
		eng, err := rules.New(tt.rules, tt.o)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.err)
		case tt.err != "" && eng != nil:
			t.Errorf("%s: an engine with the error", tt.name)
		case err == nil && len(eng.Rules()) != len(tt.rules):
			t.Errorf("%s: Rules() = %v", tt.name, eng.Rules())
		}
	}
}

// recorder is a cluster Store for the routing tests: it records the ops the engine sends it and
// decides them on a memstore, or fails them as a Redis store would when Redis is down.
type recorder struct {
	mu    sync.Mutex
	calls []string
	inner rules.Store
	fail  error // when set, every op gets this error and the rule's fail-open decision
}

func (s *recorder) Decide(ctx context.Context, ops []*rules.Op) {
	var parts []string
	for _, op := range ops {
		p := op.Key
		switch {
		case op.Req.Release:
			p += " release"
		case op.Req.DryRun:
			p += " dry"
		}
		if op.OnError == rules.FailLocal && op.Fallback != nil {
			p += " +fallback"
		}
		parts = append(parts, p)
	}
	s.mu.Lock()
	s.calls = append(s.calls, strings.Join(parts, ", "))
	s.mu.Unlock()
	if s.fail != nil {
		for _, op := range ops {
			op.Err = s.fail
			op.Dec = algos.Decision{Allowed: true, Limit: op.Alg.Script().Limit}
		}
		return
	}
	s.inner.Decide(ctx, ops)
}

func (s *recorder) took() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

// Rules in cluster mode go to the cluster store, with their fail policy; local ones to the local
// store; both see the dry run, then the commit.
func TestEngineRouting(t *testing.T) {
	e := newEnv(t, `{"rules": []}`)
	loc := &recorder{inner: e.local}
	clu := &recorder{inner: rules.Each(memstore.New(memstore.Options{Clock: e.clock.Now}).Decide)}
	e.build(mustDecode(t, `{"rules": [
		{"name": "loc", "limit": {"algorithm": "token_bucket", "rate": 10, "period": "1h"}},
		{"name": "clu", "by": ["ip"], "mode": "cluster", "on_error": "local", "nodes": 2, "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1h"}},
		{"name": "conc", "by": ["ip"], "mode": "cluster", "limit": {"algorithm": "concurrency", "max": 5}}
	]}`), rules.Options{Local: loc, Cluster: clu})
	ctx := context.Background()
	res := e.check(ip("10.0.0.1"))
	e.expect(res, true, "clu")
	if got, want := loc.took(), []string{"loc dry", "loc"}; !equal(got, want) {
		t.Errorf("local store got %q, want %q", got, want)
	}
	if got, want := clu.took(), []string{"clu|10.0.0.1 dry +fallback, conc|10.0.0.1 dry", "clu|10.0.0.1 +fallback, conc|10.0.0.1"}; !equal(got, want) {
		t.Errorf("cluster store got %q, want %q", got, want)
	}
	e.eng.Release(ctx, &res)
	if got, want := clu.took(), []string{"conc|10.0.0.1 release"}; !equal(got, want) {
		t.Errorf("release: cluster store got %q, want %q", got, want)
	}
	if got := loc.took(); len(got) != 0 {
		t.Errorf("release: local store got %q", got)
	}
	// Denied by clu: the local rule sees only the dry run.
	e.expect(e.check(ip("10.0.0.1")), false, "clu")
	if got, want := loc.took(), []string{"loc dry"}; !equal(got, want) {
		t.Errorf("denied: local store got %q, want %q", got, want)
	}
	if got, want := clu.took(), []string{"clu|10.0.0.1 dry +fallback, conc|10.0.0.1 dry"}; !equal(got, want) {
		t.Errorf("denied: cluster store got %q, want %q", got, want)
	}
	e.observed()

	// The cluster store fails: its error is the result's and the observer's.
	down := errors.New("redis: connection refused")
	clu.fail = down
	res = e.check(ip("10.0.0.2"))
	if !res.Allowed || !errors.Is(res.Err, down) || res.ErrRule == nil || res.ErrRule.Mode != rules.Cluster {
		t.Errorf("store down: Allowed = %v, Err = %v, ErrRule = %v; want true, %v and a cluster rule", res.Allowed, res.Err, res.ErrRule, down)
	}
	e.mu.Lock()
	for _, o := range e.obs {
		if (o.rule == "loc") != (o.err == nil) {
			t.Errorf("observed %s with error %v", o.rule, o.err)
		}
	}
	e.mu.Unlock()

	// One cluster rule alone: a single call, no dry run.
	e.build(mustDecode(t, `{"rules": [{"name": "solo", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}]}`), rules.Options{Local: loc, Cluster: clu})
	clu.fail = nil
	clu.took()
	e.check(ip("10.0.0.1"))
	if got, want := clu.took(), []string{"solo"}; !equal(got, want) {
		t.Errorf("single rule: cluster store got %q, want %q", got, want)
	}
}

// hook is a Store that runs a function before deciding, to act between the engine's phases.
type hook struct {
	inner  rules.Store
	before func(ops []*rules.Op)
}

func (h hook) Decide(ctx context.Context, ops []*rules.Op) {
	h.before(ops)
	h.inner.Decide(ctx, ops)
}

// A denying rule with a ban that admits the request when committed (its unit came back between
// the phases) lets the request through, and the request is then committed to the other rules too.
func TestEngineBanCommitRace(t *testing.T) {
	e := newEnv(t, `{"rules": []}`)
	armed := false
	e.build(mustDecode(t, `{"rules": [
		{"name": "b", "ban": "1m", "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1s"}},
		{"name": "g", "limit": {"algorithm": "token_bucket", "rate": 100, "period": "1h"}}
	]}`), rules.Options{Local: hook{inner: e.local, before: func(ops []*rules.Op) {
		if armed && !ops[0].Req.DryRun {
			armed = false
			e.clock.Add(algos.Millisecond) // b's unit comes back
		}
	}}})
	in := ip("10.0.0.1")
	e.expect(e.check(in), true, "b")
	e.clock.Add(algos.Second - algos.Millisecond)
	armed = true
	res := e.check(in) // dry run: b denies, 1ms early; commit: b admits
	e.expect(res, true, "b")
	if got := e.remaining("g", in); got != 98 {
		t.Errorf("g has %d left, want 98: the admitted request must be committed to every rule", got)
	}
	if got, want := e.observed(), []string{"b:allowed", "g:allowed", "b:allowed", "g:allowed"}; !equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
}

// Many goroutines through the engine: each rule admits exactly its limit.
func TestEngineConcurrent(t *testing.T) {
	const goroutines, each = 32, 8
	tests := []struct {
		name     string
		doc      string
		ip       func(g int) string
		admitted int64
	}{
		{
			"per-ip limit binds",
			`{"rules": [{"name": "per_ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 10, "period": "1h"}},
				{"name": "global", "limit": {"algorithm": "token_bucket", "rate": 1000, "period": "1h"}}]}`,
			func(int) string { return "10.0.0.1" },
			10,
		},
		{
			"global limit binds",
			`{"rules": [{"name": "per_ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 10, "period": "1h"}},
				{"name": "global", "limit": {"algorithm": "token_bucket", "rate": 50, "period": "1h"}}]}`,
			func(g int) string { return fmt.Sprintf("10.0.0.%d", g) },
			50,
		},
		{
			"concurrency and a window",
			`{"rules": [{"name": "cc", "limit": {"algorithm": "concurrency", "max": 7}},
				{"name": "fw", "limit": {"algorithm": "fixed_window", "limit": 1000, "window": "1h"}}]}`,
			func(g int) string { return fmt.Sprintf("10.0.0.%d", g) },
			7,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.doc)
			var admitted, checked atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					in := &rules.Input{Method: "GET", Path: "/", ClientIP: tt.ip(g), Headers: http.Header{}}
					for range each {
						if res := e.eng.Check(context.Background(), in); res.Allowed {
							admitted.Add(1)
						}
						checked.Add(1)
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != tt.admitted {
				t.Errorf("admitted %d of %d, want exactly %d", got, checked.Load(), tt.admitted)
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Open–closed: a new dimension and a new algorithm are a registration each, from outside the
// package, with no edit to it.
func init() {
	rules.RegisterDimension("tenant", rules.DimensionKind{
		Doc: "the X-Tenant header, or the header tenant:NAME names",
		Arg: "[^ :]+",
		New: func(arg string) (rules.Dimension, string) {
			if arg == "" {
				arg = "X-Tenant"
			}
			if strings.ContainsAny(arg, " :") {
				return nil, "is not a header name: " + arg
			}
			return tenant(arg), ""
		},
	})
	rules.RegisterAlgorithm("per_minute", rules.AlgorithmKind{
		Doc:    "a fixed window of one minute",
		Params: []rules.Param{{Name: "limit", Type: rules.Count, Role: rules.Amount, Required: true, Min: 1, Max: 1_000_000}},
		Build: func(p rules.Params, nodes int64) (algos.Algorithm, error) {
			return algos.NewFixedWindow(max(p["limit"]/nodes, 1), algos.Minute)
		},
	})
}

type tenant string

func (h tenant) Value(in *rules.Input) (string, bool) {
	v := in.Headers.Get(string(h))
	return v, v != ""
}

func TestRegisteredKinds(t *testing.T) {
	if !contains(rules.Algorithms(), "per_minute") || !contains(rules.Dimensions(), "tenant") {
		t.Fatalf("registered kinds not listed: %v, %v", rules.Algorithms(), rules.Dimensions())
	}
	e := newEnv(t, `{"rules": []}`)
	e.build(mustDecode(t, `{"rules": [
		{"name": "tenants", "by": ["tenant"], "limit": {"algorithm": "per_minute", "limit": 2}},
		{"name": "tenant_ip", "by": ["tenant:X-Org", "ip"], "mode": "cluster", "on_error": "local", "nodes": 2,
		 "limit": {"algorithm": "per_minute", "limit": 5}}
	]}`), rules.Options{Cluster: rules.Each(memstore.New(memstore.Options{Clock: e.clock.Now}).Decide)})
	if r := e.rules["tenant_ip"]; r.Fallback == nil || r.Fallback.Script().Limit != 2 {
		t.Errorf("tenant_ip's per-node share is not the limit divided by 2")
	}
	in := func(tenant string) *rules.Input {
		return &rules.Input{Method: "GET", Path: "/", ClientIP: "10.0.0.1", Headers: hdr("X-Tenant", tenant)}
	}
	e.expect(e.check(in("acme")), true, "tenants")
	e.expect(e.check(in("acme")), true, "tenants")
	e.expect(e.check(in("acme")), false, "tenants")
	e.expect(e.check(in("globex")), true, "tenants")
	e.expect(e.check(in("")), true, "tenants") // no tenant: counted by its address
	e.expect(e.check(in("")), true, "tenants")
	e.expect(e.check(in("")), false, "tenants")
	e.clock.Add(algos.Minute)
	e.expect(e.check(in("acme")), true, "tenants")

	// Their config errors come with paths, as the built-in kinds'.
	for rule, want := range map[string]string{
		`{"name": "r", "by": ["tenant:a b"], "limit": {"algorithm": "per_minute", "limit": 1}}`: "test.json: rules[0].by[0]: is not a header name: a b",
		`{"name": "r", "limit": {"algorithm": "per_minute"}}`:                                   "test.json: rules[0].limit.limit: is required",
		`{"name": "r", "limit": {"algorithm": "per_minute", "limit": 1, "window": "1s"}}`:       "test.json: rules[0].limit.window: unknown field",
		`{"name": "r", "limit": {"algorithm": "per_hour", "limit": 1}}`:                         "test.json: rules[0].limit.algorithm: must be one of adaptive, concurrency, fixed_window, leaky_bucket, per_minute, sliding_log,",
	} {
		_, errs := decode(t, `{"rules": [`+rule+`]}`)
		if errs.Err() == nil || !strings.HasPrefix(errs.Error(), want) || len(errs.List) != 1 {
			t.Errorf("%s: error %v, want %q", rule, errs.Err(), want)
		}
	}
}

// Registering a name twice is a programming error, caught at init.
func TestRegisterTwicePanics(t *testing.T) {
	for name, register := range map[string]func(){
		"algorithm": func() { rules.RegisterAlgorithm("token_bucket", rules.AlgorithmKind{}) },
		"dimension": func() { rules.RegisterDimension("ip", rules.DimensionKind{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("registering the %s twice did not panic", name)
				}
			}()
			register()
		}()
	}
}

// A request's method is seen as an upstream that upper-cases it sees it, and GET's handler
// serves HEAD: "post" spends a rule on POST, HEAD a rule on GET, under both match and the
// "method" dimension (issue 25, items 1 and 2).
func TestEngineMethodCase(t *testing.T) {
	e := newEnv(t, `{"rules": [
		{"name": "post", "match": {"methods": ["POST"]}, "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}},
		{"name": "get", "match": {"methods": ["GET"]}, "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}},
		{"name": "by-method", "match": {"paths": ["/m"]}, "by": ["method"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}}
	]}`)
	req := func(method, path string) *rules.Input {
		return &rules.Input{Method: method, Path: path, ClientIP: "192.0.2.1"}
	}
	for _, tt := range []struct {
		method, path string
		allowed      bool
		rule         string
	}{
		{"POST", "/", true, "post"}, {"post", "/", true, "post"}, {"Post", "/", false, "post"}, {"pOST", "/", false, "post"},
		{"GET", "/", true, "get"}, {"HEAD", "/", true, "get"}, {"head", "/", false, "get"}, {"GET", "/", false, "get"},
		{"PUT", "/m", true, "by-method"}, {"put", "/m", true, "by-method"}, {"PUT", "/m", false, "by-method"},
	} {
		e.expect(e.check(req(tt.method, tt.path)), tt.allowed, tt.rule)
	}
	// The "method" dimension counts HEAD as GET; OPTIONS has a count of its own.
	e2 := newEnv(t, `{"rules": [{"name": "by-method", "by": ["method"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}}]}`)
	for i, m := range []string{"GET", "head", "HEAD"} {
		e2.expect(e2.check(req(m, "/")), i < 2, "by-method")
	}
	e2.expect(e2.check(req("options", "/")), true, "by-method")
}

// A control character in the path, raw or escaped, is refused with 400 before any rule is
// asked (issue 25, item 8); StripDotsSpaces makes /login. and /login%20 count as /login.
func TestEnginePathRefusedAndStripped(t *testing.T) {
	doc := `{"rules": [{"name": "login", "match": {"paths": ["/login"]}, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`
	e := newEnv(t, doc)
	for _, p := range []string{"/login%00", "/login%09", "/login\x00", "/login%7f", "/a%0d%0a/login"} {
		res := e.check(&rules.Input{Method: "GET", Path: p, ClientIP: "192.0.2.1"})
		if status, _ := res.Denial(); res.Allowed || !res.BadPath || status != 400 {
			t.Errorf("path %q: Allowed %v, BadPath %v, status %d; want refused with 400", p, res.Allowed, res.BadPath, status)
		}
		if _, ok := e.eng.Peek(context.Background(), &rules.Input{Path: p}); ok {
			t.Errorf("Peek accepted path %q", p)
		}
	}
	// By default the trailing dot is a name of its own; stripped, it is /login.
	e.expect(e.check(&rules.Input{Method: "GET", Path: "/login", ClientIP: "192.0.2.1"}), true, "login")
	e.expect(e.check(&rules.Input{Method: "GET", Path: "/login.", ClientIP: "192.0.2.1"}), true, "")
	e = newEnv(t, doc)
	e.build(mustDecode(t, doc), rules.Options{StripDotsSpaces: true})
	e.expect(e.check(&rules.Input{Method: "GET", Path: "/login", ClientIP: "192.0.2.1"}), true, "login")
	for _, p := range []string{"/login.", "/login%2e", "/login%20", "/login. "} {
		e.expect(e.check(&rules.Input{Method: "GET", Path: p, ClientIP: "192.0.2.1"}), false, "login")
	}
}
