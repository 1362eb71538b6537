package rules_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// TestAdaptiveRule drives an adaptive rule through the engine: the latency given to Finish moves
// its limit, which the decisions report.
func TestAdaptiveRule(t *testing.T) {
	doc := `{"rules": [{"name": "ad", "limit": {"algorithm": "adaptive", "percentile": 90, "slo": "5ms", "min_limit": 2, "max_limit": 50,
		"interval": "100ms", "smoothing": 100}},
		{"name": "per_ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1h"}}]}`
	e := newEnv(t, doc)
	ctx := context.Background()
	// Rounds every 25 ms of as many requests as the limit admits, each from a new client (per_ip
	// admits one per client), finished after latency.
	n := 0
	rounds := func(k int, latency int64, dropped bool) int64 {
		var limit int64
		for range k {
			var held []rules.Result
			for {
				n++
				res := e.check(ip("10.0." + strconv.Itoa(n/250) + "." + strconv.Itoa(n%250)))
				if !res.Allowed {
					e.expect(res, false, "ad")
					limit = res.Decision.Limit
					break
				}
				held = append(held, res)
			}
			e.clock.Add(latency)
			for i := range held {
				e.eng.Finish(ctx, &held[i], latency, dropped)
			}
			e.clock.Add(25*algos.Millisecond - latency)
		}
		return limit
	}
	if got := rounds(1, algos.Millisecond, false); got != 2 {
		t.Fatalf("limit %d at first, want min_limit 2", got)
	}
	if got := rounds(30, algos.Millisecond, false); got != 50 {
		t.Fatalf("limit %d after 1 ms latencies under an SLO of 5 ms, want max_limit 50", got)
	}
	// A round of dropped requests (failed fast) cuts it by backoff, 90%, once.
	rounds(1, algos.Millisecond, true)
	if got := rounds(1, algos.Millisecond, false); got != 45 {
		t.Fatalf("limit %d after a round of drops, want 45", got)
	}
	if got := rounds(30, 20*algos.Millisecond, false); got != 2 {
		t.Fatalf("limit %d after 20 ms latencies, want min_limit 2", got)
	}
	// A request refused by per_ip takes no slot of ad; Release (no latency) gives slots back.
	a := ip("192.0.2.1")
	resA := e.check(a)
	e.expect(e.check(a), false, "per_ip")
	e.eng.Release(ctx, &resA)
	if got := e.remaining("ad", ip("192.0.2.2")); got != 2 {
		t.Errorf("ad has %d left, want 2", got)
	}
}

func TestAdaptiveConfig(t *testing.T) {
	for rule, want := range map[string]string{
		`{"name": "r", "mode": "cluster", "limit": {"algorithm": "adaptive"}}`:                        "test.json: rules[0].mode: adaptive is local only",
		`{"name": "r", "limit": {"algorithm": "adaptive", "slo": "10ms", "tolerance": 20}}`:           "test.json: rules[0].limit.slo: cannot be combined with tolerance",
		`{"name": "r", "limit": {"algorithm": "adaptive", "min_limit": 10, "max_limit": 5}}`:          "test.json: rules[0].limit.max_limit: must be at least min_limit (10), got 5",
		`{"name": "r", "limit": {"algorithm": "adaptive", "interval": "1s", "probe_every": "500ms"}}`: "test.json: rules[0].limit.probe_every: must be at least interval (1000000 µs), got 500000 µs",
		`{"name": "r", "limit": {"algorithm": "adaptive", "percentile": 100}}`:                        "test.json: rules[0].limit.percentile:",
		`{"name": "r", "limit": {"algorithm": "adaptive", "slo": "2m"}}`:                              "test.json: rules[0].limit.slo:",
	} {
		_, errs := decode(t, `{"rules": [`+rule+`]}`)
		if errs.Err() == nil || !strings.HasPrefix(errs.Error(), want) {
			t.Errorf("%s: error %v, want %q", rule, errs.Err(), want)
		}
	}
	mustDecode(t, `{"rules": [{"name": "r", "limit": {"algorithm": "adaptive", "percentile": 90, "slo": "250ms"}}]}`)
	// min_limit's default (4) is at most max_limit.
	rs := mustDecode(t, `{"rules": [{"name": "r", "limit": {"algorithm": "adaptive", "max_limit": 2}}]}`)
	if l := rs[0].Alg.(*algos.Adaptive).Limit(&algos.State{}); l != 2 {
		t.Errorf("max_limit 2: a fresh state's limit (min_limit) is %d, want 2", l)
	}
}

// TestAdaptiveLimitHook: Options.Limit reports an adaptive rule's limit after its decisions and
// releases, and never another rule's.
func TestAdaptiveLimitHook(t *testing.T) {
	doc := `{"rules": [{"name": "ad", "limit": {"algorithm": "adaptive", "percentile": 90, "slo": "5ms", "min_limit": 3}},
		{"name": "tb", "limit": {"algorithm": "token_bucket", "rate": 100}}]}`
	e := newEnv(t, doc)
	var got []string
	e.build(mustDecode(t, doc), rules.Options{Limit: func(r *rules.Rule, l int64) { got = append(got, r.Name+":"+strconv.FormatInt(l, 10)) }})
	res := e.check(ip("10.0.0.1"))
	e.eng.Finish(context.Background(), &res, algos.Millisecond, false)
	if strings.Join(got, " ") != "ad:3 ad:3" {
		t.Errorf("reported %v, want ad:3 twice (the decision and the release)", got)
	}
}
