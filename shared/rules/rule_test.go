package rules_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// decode decodes a config document holding a rules list, as a front end does.
func decode(t *testing.T, doc string) ([]*rules.Rule, *conf.Errors) {
	t.Helper()
	v, err := conf.ParseJSON([]byte(doc))
	if err != nil {
		t.Fatalf("test document is not JSON: %v\n%s", err, doc)
	}
	errs := &conf.Errors{Source: "test.json"}
	o := conf.Read(v, errs)
	rs := rules.Decode(o)
	o.Done()
	return rs, errs
}

// mustDecode decodes a document that must be valid.
func mustDecode(t *testing.T, doc string) []*rules.Rule {
	t.Helper()
	rs, errs := decode(t, doc)
	if err := errs.Err(); err != nil {
		t.Fatalf("decode: %v\n%s", err, doc)
	}
	return rs
}

// mustRule decodes a document of one valid rule.
func mustRule(t *testing.T, rule string) *rules.Rule {
	t.Helper()
	rs := mustDecode(t, `{"rules": [`+rule+`]}`)
	if len(rs) != 1 {
		t.Fatalf("decoded %d rules, want 1", len(rs))
	}
	return rs[0]
}

// script returns the Script of an algorithm built directly, for comparison with a decoded one
// (an error makes a Script that compares unequal, naming the error).
func script[A algos.Algorithm](a A, err error) algos.Script {
	if err != nil {
		return algos.Script{Name: "cannot build the expected algorithm: " + err.Error()}
	}
	return a.Script()
}

// banned returns s as a ban of dur µs wraps it.
func banned(s algos.Script, dur int64) algos.Script {
	s.Ban = dur
	return s
}

func TestDecodeAlgorithms(t *testing.T) {
	tests := []struct {
		name     string
		rule     string
		algType  any // the decoded algorithm's concrete type
		script   algos.Script
		leases   bool
		fallback *algos.Script // the per-node share, for cluster rules with on_error local
	}{
		{
			name:    "token_bucket",
			rule:    `{"name": "tb", "limit": {"algorithm": "token_bucket", "rate": 100, "period": "1m", "burst": 20}}`,
			algType: &algos.GCRA{},
			script:  script(algos.NewGCRA(100, algos.Minute, 20)),
		},
		{
			name:    "token_bucket burst defaults to rate, period to 1s",
			rule:    `{"name": "tb", "limit": {"algorithm": "token_bucket", "rate": 7}}`,
			algType: &algos.GCRA{},
			script:  script(algos.NewGCRA(7, algos.Second, 7)),
		},
		{
			name:    "warm_up",
			rule:    `{"name": "wu", "limit": {"algorithm": "warm_up", "rate": 10, "period": "1s", "warmup": "30s"}}`,
			algType: &algos.WarmUp{},
			script:  script(algos.NewWarmUp(10, algos.Second, 30*algos.Second)),
		},
		{
			name:    "leaky_bucket with delay",
			rule:    `{"name": "lb", "limit": {"algorithm": "leaky_bucket", "rate": 5, "period": "1s", "burst": 10, "delay": 3}}`,
			algType: &algos.LeakyBucket{},
			script:  script(algos.NewLeakyBucket(5, algos.Second, 10, 3)),
		},
		{
			name:    "leaky_bucket nodelay",
			rule:    `{"name": "lb", "limit": {"algorithm": "leaky_bucket", "rate": 5, "burst": 10, "nodelay": true}}`,
			algType: &algos.LeakyBucket{},
			script:  script(algos.NewLeakyBucket(5, algos.Second, 10, algos.NoDelay)),
		},
		{
			name:    "leaky_bucket defaults: no burst, every excess delayed",
			rule:    `{"name": "lb", "limit": {"algorithm": "leaky_bucket", "rate": 5, "nodelay": false}}`,
			algType: &algos.LeakyBucket{},
			script:  script(algos.NewLeakyBucket(5, algos.Second, 0, algos.DelayAll)),
		},
		{
			name:    "fixed_window",
			rule:    `{"name": "fw", "limit": {"algorithm": "fixed_window", "limit": 100, "window": "1h"}}`,
			algType: &algos.FixedWindow{},
			script:  script(algos.NewFixedWindow(100, algos.Hour)),
		},
		{
			name:    "sliding_window",
			rule:    `{"name": "sw", "limit": {"algorithm": "sliding_window", "limit": 50, "window": "10s"}}`,
			algType: &algos.SlidingWindow{},
			script:  script(algos.NewSlidingWindow(50, 10*algos.Second)),
		},
		{
			name:    "sliding_log",
			rule:    `{"name": "sl", "limit": {"algorithm": "sliding_log", "limit": 20, "window": "1500ms"}}`,
			algType: &algos.SlidingLog{},
			script:  script(algos.NewSlidingLog(20, 1500*algos.Millisecond)),
		},
		{
			name:    "concurrency",
			rule:    `{"name": "cc", "limit": {"algorithm": "concurrency", "max": 8, "lease": "30s"}}`,
			algType: &algos.Concurrency{},
			script:  script(algos.NewConcurrency(8, 30*algos.Second)),
			leases:  true,
		},
		{
			name:    "concurrency lease defaults to 1m",
			rule:    `{"name": "cc", "limit": {"algorithm": "concurrency", "max": 8}}`,
			algType: &algos.Concurrency{},
			script:  script(algos.NewConcurrency(8, algos.Minute)),
			leases:  true,
		},
		{
			name:    "ban wraps the algorithm",
			rule:    `{"name": "b", "ban": "10m", "limit": {"algorithm": "fixed_window", "limit": 3, "window": "1s"}}`,
			algType: &algos.Ban{},
			script:  banned(script(algos.NewFixedWindow(3, algos.Second)), 10*algos.Minute),
		},
		{
			name: "cluster with on_error local: each node's share",
			rule: `{"name": "c", "mode": "cluster", "on_error": "local", "nodes": 4,
				"limit": {"algorithm": "token_bucket", "rate": 100, "period": "1s", "burst": 50}}`,
			algType:  &algos.GCRA{},
			script:   script(algos.NewGCRA(100, algos.Second, 50)),
			fallback: ptr(script(algos.NewGCRA(25, algos.Second, 12))), // 100/4 per second, exactly
		},
		{
			name: "cluster share of a window rounds down, never below 1",
			rule: `{"name": "c", "mode": "cluster", "on_error": "local", "nodes": 3,
				"limit": {"algorithm": "sliding_window", "limit": 2, "window": "1s"}}`,
			algType:  &algos.SlidingWindow{},
			script:   script(algos.NewSlidingWindow(2, algos.Second)),
			fallback: ptr(script(algos.NewSlidingWindow(1, algos.Second))),
		},
		{
			name: "cluster share of a leaky bucket with a ban",
			rule: `{"name": "c", "mode": "cluster", "on_error": "local", "nodes": 2, "ban": "1m",
				"limit": {"algorithm": "leaky_bucket", "rate": 10, "burst": 9, "delay": 4}}`,
			algType:  &algos.Ban{},
			script:   banned(script(algos.NewLeakyBucket(10, algos.Second, 9, 4)), algos.Minute),
			fallback: ptr(banned(script(algos.NewLeakyBucket(5, algos.Second, 4, 2)), algos.Minute)),
		},
		{
			name: "cluster share of concurrency",
			rule: `{"name": "c", "mode": "cluster", "on_error": "local", "nodes": 5,
				"limit": {"algorithm": "concurrency", "max": 12, "lease": "10s"}}`,
			algType:  &algos.Concurrency{},
			script:   script(algos.NewConcurrency(12, 10*algos.Second)),
			leases:   true,
			fallback: ptr(script(algos.NewConcurrency(2, 10*algos.Second))),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRule(t, tt.rule)
			if got := reflect.TypeOf(r.Alg); got != reflect.TypeOf(tt.algType) {
				t.Errorf("Alg is a %v, want %T", got, tt.algType)
			}
			if got := r.Alg.Script(); !reflect.DeepEqual(got, tt.script) {
				t.Errorf("Alg.Script() = %+v, want %+v", got, tt.script)
			}
			if r.Leases != tt.leases {
				t.Errorf("Leases = %v, want %v", r.Leases, tt.leases)
			}
			switch {
			case tt.fallback == nil && r.Fallback != nil:
				t.Errorf("Fallback = %+v, want none", r.Fallback.Script())
			case tt.fallback != nil && r.Fallback == nil:
				t.Errorf("no Fallback, want %+v", *tt.fallback)
			case tt.fallback != nil && !reflect.DeepEqual(r.Fallback.Script(), *tt.fallback):
				t.Errorf("Fallback.Script() = %+v, want %+v", r.Fallback.Script(), *tt.fallback)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestDecodeFullRule(t *testing.T) {
	r := mustRule(t, `{
		"name": "api-keys.v2_x",
		"match": {
			"methods": ["GET", "POST"],
			"paths": ["/api/**", "/login"],
			"hosts": ["API.Example.com", "*.example.org"],
			"headers": {"X-Env": "prod", "X-Api-Key": "*"}
		},
		"by": ["ip", "header:X-Api-Key"],
		"cost": 2,
		"limit": {"algorithm": "token_bucket", "rate": 100, "period": "1m", "burst": 20},
		"mode": "cluster",
		"action": "delay",
		"max_delay": "500ms",
		"ban": "10m",
		"on_error": "closed",
		"nodes": 4,
		"reply": {"status": 503, "message": "slow down", "headers": false, "legacy_headers": true}
	}`)
	want := rules.Rule{
		Name: "api-keys.v2_x",
		Match: rules.Match{
			Methods: []string{"GET", "POST"},
			Paths:   []string{"/api/**", "/login"},
			Hosts:   []string{"api.example.com", "*.example.org"},
			Headers: []rules.HeaderMatch{{Name: "X-Env", Value: "prod"}, {Name: "X-Api-Key", Value: "*"}},
		},
		By:        []string{"ip", "header:X-Api-Key"},
		Cost:      2,
		Algorithm: "token_bucket",
		Window:    algos.Minute,
		Mode:      rules.Cluster,
		Action:    rules.Delay,
		MaxDelay:  500 * algos.Millisecond,
		Ban:       10 * algos.Minute,
		OnError:   rules.FailClosed,
		Nodes:     4,
		Reply:     rules.Reply{Status: 503, Message: "slow down", Headers: rules.NoHeaders, Legacy: true},
	}
	checkRule(t, r, want)
	if got, want := r.Alg.Script(), banned(script(algos.NewGCRA(100, algos.Minute, 20)), 10*algos.Minute); !reflect.DeepEqual(got, want) {
		t.Errorf("Alg.Script() = %+v, want %+v", got, want)
	}
	if r.Fallback != nil {
		t.Errorf("Fallback set for on_error closed")
	}
}

// checkRule compares the exported configuration fields of r with want.
func checkRule(t *testing.T, r *rules.Rule, want rules.Rule) {
	t.Helper()
	got := *r
	got.Alg, got.Fallback = nil, nil
	got.Leases = false
	gm, wm := got.Match, want.Match
	got.Match, want.Match = rules.Match{}, rules.Match{}
	if !reflect.DeepEqual(gm.Methods, wm.Methods) || !reflect.DeepEqual(gm.Paths, wm.Paths) ||
		!reflect.DeepEqual(gm.Hosts, wm.Hosts) || !reflect.DeepEqual(gm.Headers, wm.Headers) {
		t.Errorf("Match = %+v, want %+v", gm, wm)
	}
	// Compare field by field, leaving out the unexported (compiled) parts.
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := 0; i < g.NumField(); i++ {
		if !g.Type().Field(i).IsExported() {
			continue
		}
		if !reflect.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
			t.Errorf("%s = %#v, want %#v", g.Type().Field(i).Name, g.Field(i).Interface(), w.Field(i).Interface())
		}
	}
}

func TestDecodeDefaults(t *testing.T) {
	r := mustRule(t, `{"name": "d", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}`)
	checkRule(t, r, rules.Rule{
		Name:      "d",
		By:        []string{"global"},
		Cost:      1,
		Algorithm: "fixed_window",
		Window:    algos.Second,
		Mode:      rules.Local,
		Action:    rules.Reject,
		OnError:   rules.FailOpen,
		Nodes:     1,
		Reply:     rules.Reply{Status: 429, Message: rules.DefaultMessage, Headers: rules.Draft},
	})
	if rules.DefaultMessage != "API rate limit exceeded" {
		t.Errorf("DefaultMessage = %q", rules.DefaultMessage)
	}
	// Nulls read as absent: the defaults apply.
	r = mustRule(t, `{"name": "d", "by": null, "cost": null, "mode": null, "action": null, "reply": null,
		"match": null, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}`)
	if r.Cost != 1 || r.Mode != rules.Local || r.Action != rules.Reject || r.Reply.Status != 429 || len(r.By) != 1 {
		t.Errorf("nulls did not give the defaults: %+v", r)
	}
	// A local rule ignores on_error local: it has no share to fall back to.
	r = mustRule(t, `{"name": "d", "on_error": "local", "nodes": 10, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}`)
	if r.Fallback != nil {
		t.Errorf("local rule has a Fallback")
	}
	// No rules at all is a valid (if idle) config.
	if rs := mustDecode(t, `{}`); len(rs) != 0 {
		t.Errorf("decoded %d rules from an empty document", len(rs))
	}
	if rs := mustDecode(t, `{"rules": []}`); len(rs) != 0 {
		t.Errorf("decoded %d rules from an empty list", len(rs))
	}
	// Enum and status extremes.
	r = mustRule(t, `{"name": "x", "action": "shadow", "on_error": "local", "mode": "cluster", "reply": {"status": 400},
		"limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}`)
	if r.Action != rules.Shadow || r.OnError != rules.FailLocal || r.Mode != rules.Cluster || r.Reply.Status != 400 {
		t.Errorf("got %+v", r)
	}
	if r.OnError.String() != "local" || rules.FailOpen.String() != "open" || rules.FailClosed.String() != "closed" {
		t.Errorf("FailPolicy names: %v %v %v", rules.FailOpen, rules.FailClosed, r.OnError)
	}
	r = mustRule(t, `{"name": "x", "reply": {"status": 599}, "cost": 0, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}`)
	if r.Reply.Status != 599 || r.Cost != 0 {
		t.Errorf("got %+v", r)
	}
}

// Rule fragments for the invalid-config table.
const (
	tb = `"limit": {"algorithm": "token_bucket", "rate": 10}`
	fw = `"limit": {"algorithm": "fixed_window", "limit": 10, "window": "1s"}`
)

// rule returns a rule named "r" with the given fields.
func rule(fields ...string) string { return `{"name": "r", ` + strings.Join(fields, ", ") + `}` }

// limit returns a rule named "r" with the given limit object fields.
func limit(fields string) string { return `{"name": "r", "limit": {` + fields + `}}` }

func TestDecodeInvalid(t *testing.T) {
	tests := []struct {
		name   string
		rule   string // one entry of the rules list
		path   string
		reason string // a substring of the error's reason
	}{
		// Unknown fields, at every level.
		{"unknown rule field", rule(tb, `"colour": "red"`), "rules[0].colour", "unknown field"},
		{"unknown match field", rule(tb, `"match": {"method": ["GET"]}`), "rules[0].match.method", "unknown field"},
		{"unknown limit field", limit(`"algorithm": "token_bucket", "rate": 10, "brust": 5`), "rules[0].limit.brust", "unknown field"},
		{"parameter of another algorithm", limit(`"algorithm": "fixed_window", "limit": 10, "window": "1s", "rate": 5`), "rules[0].limit.rate", "unknown field"},
		{"warm_up has no burst", limit(`"algorithm": "warm_up", "rate": 10, "warmup": "10s", "burst": 5`), "rules[0].limit.burst", "unknown field"},
		{"unknown reply field", rule(tb, `"reply": {"code": 503}`), "rules[0].reply.code", "unknown field"},

		// Wrong types.
		{"rule not an object", `5`, "rules[0]", "must be an object, got the number 5"},
		{"rule null", `null`, "rules[0]", "must be an object, got null"},
		{"name not a string", `{"name": 5, ` + tb + `}`, "rules[0].name", "must be a string, got the number 5"},
		{"match not an object", rule(tb, `"match": ["GET"]`), "rules[0].match", "must be an object, got a list"},
		{"methods not a list", rule(tb, `"match": {"methods": 5}`), "rules[0].match.methods", "must be a list of strings, got the number 5"},
		{"method not a string", rule(tb, `"match": {"methods": ["GET", 5]}`), "rules[0].match.methods[1]", "must be a string, got the number 5"},
		{"header value not a string", rule(tb, `"match": {"headers": {"X-A": 1}}`), "rules[0].match.headers.X-A", "must be a string, got the number 1"},
		{"headers a list", rule(tb, `"match": {"headers": ["X-A"]}`), "rules[0].match.headers", "must be an object of strings"},
		{"by not a list", rule(tb, `"by": {"ip": true}`), "rules[0].by", "must be a list of strings, got an object"},
		{"by entry not a string", rule(tb, `"by": ["ip", 5]`), "rules[0].by[1]", "must be a string, got the number 5"},
		{"cost a string", rule(tb, `"cost": "1"`), "rules[0].cost", `must be an integer, got the string "1"`},
		{"cost a fraction", rule(tb, `"cost": 1.5`), "rules[0].cost", "must be an integer between 0 and 1000000000000000, got 1.5"},
		{"cost negative", rule(tb, `"cost": -1`), "rules[0].cost", "must be between 0 and 1000000000000000, got -1"},
		{"limit not an object", `{"name": "r", "limit": "10/s"}`, "rules[0].limit", `must be an object, got the string "10/s"`},
		{"rate a string", limit(`"algorithm": "token_bucket", "rate": "10"`), "rules[0].limit.rate", `must be an integer, got the string "10"`},
		{"period a number", limit(`"algorithm": "token_bucket", "rate": 10, "period": 60`), "rules[0].limit.period", `must be a duration with a unit such as "500ms", "1s" or "1m", got the number 60`},
		{"nodelay a string", limit(`"algorithm": "leaky_bucket", "rate": 10, "nodelay": "yes"`), "rules[0].limit.nodelay", `must be true or false, got the string "yes"`},
		{"algorithm not a string", limit(`"algorithm": 5`), "rules[0].limit.algorithm", "must be a string, got the number 5"},
		{"reply not an object", rule(tb, `"reply": 429`), "rules[0].reply", "must be an object, got the number 429"},
		{"status a string", rule(tb, `"reply": {"status": "429"}`), "rules[0].reply.status", `must be an integer, got the string "429"`},
		{"message not a string", rule(tb, `"reply": {"message": 5}`), "rules[0].reply.message", "must be a string, got the number 5"},
		{"headers not a style", rule(tb, `"reply": {"headers": "on"}`), "rules[0].reply.headers", `must be one of draft, kong, structured, none, envoy, got "on"`},
		{"headers a number", rule(tb, `"reply": {"headers": 1}`), "rules[0].reply.headers", `must be a string, got the number 1`},
		{"legacy_headers with structured", rule(tb, `"reply": {"headers": "structured", "legacy_headers": true}`), "rules[0].reply.legacy_headers", `which headers "structured" replaces`},
		{"legacy_headers not a bool", rule(tb, `"reply": {"legacy_headers": 1}`), "rules[0].reply.legacy_headers", "must be true or false, got the number 1"},

		// Names.
		{"name missing", `{` + tb + `}`, "rules[0].name", "is required"},
		{"name null", `{"name": null, ` + tb + `}`, "rules[0].name", "is required"},
		{"name empty", `{"name": "", ` + tb + `}`, "rules[0].name", "cannot be empty"},
		{"name with a space", `{"name": "a b", ` + tb + `}`, "rules[0].name", `may hold only letters, digits and . _ - (it starts the keys), got "a b"`},
		{"name with a bar", `{"name": "a|b", ` + tb + `}`, "rules[0].name", `got "a|b"`},
		{"name with a colon", `{"name": "a:b", ` + tb + `}`, "rules[0].name", `got "a:b"`},
		{"name too long", `{"name": "` + strings.Repeat("a", 65) + `", ` + tb + `}`, "rules[0].name", "must be at most 64 bytes long, got 65"},

		// Limit and algorithm.
		{"limit missing", `{"name": "r"}`, "rules[0].limit", "is required"},
		{"limit null", `{"name": "r", "limit": null}`, "rules[0].limit", "is required"},
		{"algorithm missing", limit(`"rate": 10`), "rules[0].limit.algorithm", "is required"},
		{"algorithm unknown", limit(`"algorithm": "gcra", "rate": 10`), "rules[0].limit.algorithm", `must be one of ` + strings.Join(rules.Algorithms(), ", ") + `, got "gcra"`},
		{"algorithm empty", limit(`"algorithm": "", "rate": 10`), "rules[0].limit.algorithm", `got ""`},
		{"algorithm in upper case", limit(`"algorithm": "TOKEN_BUCKET", "rate": 10`), "rules[0].limit.algorithm", `got "TOKEN_BUCKET"`},

		// token_bucket.
		{"tb rate missing", limit(`"algorithm": "token_bucket"`), "rules[0].limit.rate", "is required"},
		{"tb rate zero", limit(`"algorithm": "token_bucket", "rate": 0`), "rules[0].limit.rate", "must be between 1 and 1000000000000000, got 0"},
		{"tb rate negative", limit(`"algorithm": "token_bucket", "rate": -3`), "rules[0].limit.rate", "must be between 1 and 1000000000000000, got -3"},
		{"tb rate above 2^53", limit(`"algorithm": "token_bucket", "rate": 9007199254740993`), "rules[0].limit.rate", "must be between 1 and 1000000000000000, got 9007199254740993"},
		{"tb rate above 10^15", limit(`"algorithm": "token_bucket", "rate": 1000000000000001`), "rules[0].limit.rate", "must be between 1 and 1000000000000000, got 1000000000000001"},
		{"tb period no unit", limit(`"algorithm": "token_bucket", "rate": 10, "period": "10"`), "rules[0].limit.period", `must be a duration such as "500ms", "1s", "1m30s" or "1d" (units y (365d), w, d, h, m, s, ms, us), got "10"`},
		{"tb period bad unit", limit(`"algorithm": "token_bucket", "rate": 10, "period": "1x"`), "rules[0].limit.period", `got "1x"`},
		{"tb period empty", limit(`"algorithm": "token_bucket", "rate": 10, "period": ""`), "rules[0].limit.period", `must be a duration such as "500ms"`},
		{"tb period with a space", limit(`"algorithm": "token_bucket", "rate": 10, "period": "5 s"`), "rules[0].limit.period", `got "5 s"`},
		{"tb period zero", limit(`"algorithm": "token_bucket", "rate": 10, "period": "0s"`), "rules[0].limit.period", "must be between 1us and 10y, got 0s"},
		{"tb period negative", limit(`"algorithm": "token_bucket", "rate": 10, "period": "-1s"`), "rules[0].limit.period", `must be a duration such as`},
		{"tb period too long", limit(`"algorithm": "token_bucket", "rate": 10, "period": "10000d"`), "rules[0].limit.period", "must be between 1us and 10y, got 10000d"},
		{"tb period overflow", limit(`"algorithm": "token_bucket", "rate": 10, "period": "99999999999999999d"`), "rules[0].limit.period", `is too long: "99999999999999999d"`},
		{"tb burst zero", limit(`"algorithm": "token_bucket", "rate": 10, "burst": 0`), "rules[0].limit.burst", "must be between 1 and 1000000000000000, got 0"},
		{"tb burst × period too large", limit(`"algorithm": "token_bucket", "rate": 10, "period": "1d", "burst": 1000000`), "rules[0].limit.burst", "the bucket would take burst × period / rate = about 273 years to refill, more than 10 years"},

		// warm_up.
		{"wu warmup missing", limit(`"algorithm": "warm_up", "rate": 10`), "rules[0].limit.warmup", "is required"},
		{"wu rate missing", limit(`"algorithm": "warm_up", "warmup": "10s"`), "rules[0].limit.rate", "is required"},
		{"wu warmup zero", limit(`"algorithm": "warm_up", "rate": 10, "warmup": "0s"`), "rules[0].limit.warmup", "must be between 1us and"},
		{"wu warmup no unit", limit(`"algorithm": "warm_up", "rate": 10, "warmup": "10"`), "rules[0].limit.warmup", `got "10"`},
		{"wu warmup too long for the rate", limit(`"algorithm": "warm_up", "rate": 1000000, "period": "1us", "warmup": "1000d"`), "rules[0].limit.warmup", "must be at most about 16 minutes at this rate"},

		// leaky_bucket.
		{"lb rate missing", limit(`"algorithm": "leaky_bucket", "burst": 5`), "rules[0].limit.rate", "is required"},
		{"lb rate zero", limit(`"algorithm": "leaky_bucket", "rate": 0`), "rules[0].limit.rate", "must be between 1 and"},
		{"lb burst negative", limit(`"algorithm": "leaky_bucket", "rate": 10, "burst": -1`), "rules[0].limit.burst", "must be between 0 and 999999999999999, got -1"},
		{"lb delay negative", limit(`"algorithm": "leaky_bucket", "rate": 10, "burst": 5, "delay": -1`), "rules[0].limit.delay", "must be between 0 and 1000000000000000, got -1"},
		{"lb nodelay with delay", limit(`"algorithm": "leaky_bucket", "rate": 10, "burst": 5, "delay": 2, "nodelay": true`), "rules[0].limit.nodelay", "cannot be combined with delay"},
		{"lb period bad", limit(`"algorithm": "leaky_bucket", "rate": 10, "period": "1 s"`), "rules[0].limit.period", `got "1 s"`},
		{"lb burst too large", limit(`"algorithm": "leaky_bucket", "rate": 10, "period": "1d", "burst": 100000000`), "rules[0].limit.burst", "a full bucket would take (burst + 1) × period / rate = about 27397 years to drain"},

		// Windows.
		{"fw limit missing", limit(`"algorithm": "fixed_window", "window": "1s"`), "rules[0].limit.limit", "is required"},
		{"fw window missing", limit(`"algorithm": "fixed_window", "limit": 10`), "rules[0].limit.window", "is required"},
		{"fw limit zero", limit(`"algorithm": "fixed_window", "limit": 0, "window": "1s"`), "rules[0].limit.limit", "must be between 1 and"},
		{"fw limit negative", limit(`"algorithm": "fixed_window", "limit": -10, "window": "1s"`), "rules[0].limit.limit", "got -10"},
		{"fw window no unit", limit(`"algorithm": "fixed_window", "limit": 10, "window": "10"`), "rules[0].limit.window", `got "10"`},
		{"fw window zero", limit(`"algorithm": "fixed_window", "limit": 10, "window": "0ms"`), "rules[0].limit.window", "must be between 1us and"},
		{"fw limit too large", limit(`"algorithm": "fixed_window", "limit": 9007199254740992, "window": "1s"`), "rules[0].limit.limit", "must be between 1 and 1000000000000000, got 9007199254740992"},
		{"sw limit above 10^15", limit(`"algorithm": "sliding_window", "limit": 1000000000000001, "window": "1d"`), "rules[0].limit.limit", "must be between 1 and 1000000000000000"},
		{"sw window above 10 years", limit(`"algorithm": "sliding_window", "limit": 10, "window": "11y"`), "rules[0].limit.window", "must be between 1us and 10y, got 11y"},
		{"sw window bad", limit(`"algorithm": "sliding_window", "limit": 10, "window": "1x"`), "rules[0].limit.window", `got "1x"`},
		{"sl limit above the log bound", limit(`"algorithm": "sliding_log", "limit": 10001, "window": "1s"`), "rules[0].limit.limit", "must be between 1 and 10000, got 10001"},
		{"sl window missing", limit(`"algorithm": "sliding_log", "limit": 10`), "rules[0].limit.window", "is required"},

		// concurrency.
		{"cc max missing", limit(`"algorithm": "concurrency", "lease": "10s"`), "rules[0].limit.max", "is required"},
		{"cc max zero", limit(`"algorithm": "concurrency", "max": 0`), "rules[0].limit.max", "must be between 1 and"},
		{"cc max too large", limit(`"algorithm": "concurrency", "max": 10001`), "rules[0].limit.max", "must be between 1 and 10000, got 10001"},
		{"cc lease zero", limit(`"algorithm": "concurrency", "max": 5, "lease": "0s"`), "rules[0].limit.lease", "must be between 1us and"},
		{"cc lease no unit", limit(`"algorithm": "concurrency", "max": 5, "lease": "30"`), "rules[0].limit.lease", `got "30"`},

		// Rule options.
		{"mode unknown", rule(tb, `"mode": "global"`), "rules[0].mode", `must be one of local, cluster, got "global"`},
		{"mode not a string", rule(tb, `"mode": 1`), "rules[0].mode", "must be a string, got the number 1"},
		{"action unknown", rule(tb, `"action": "drop"`), "rules[0].action", `must be one of reject, delay, shadow, got "drop"`},
		{"on_error unknown", rule(tb, `"on_error": "fail"`), "rules[0].on_error", `must be one of open, closed, local, got "fail"`},
		{"delay without max_delay", rule(tb, `"action": "delay"`), "rules[0].max_delay", "is required (above 0) when action is delay"},
		{"delay with max_delay 0", rule(tb, `"action": "delay", "max_delay": "0s"`), "rules[0].max_delay", "is required (above 0) when action is delay"},
		{"max_delay no unit", rule(tb, `"action": "delay", "max_delay": "10"`), "rules[0].max_delay", `got "10"`},
		{"max_delay too long", rule(tb, `"action": "delay", "max_delay": "30000d"`), "rules[0].max_delay", "must be between 0s and 10y, got 30000d"},
		{"ban bad", rule(tb, `"ban": "1x"`), "rules[0].ban", `got "1x"`},
		{"ban negative", rule(tb, `"ban": "-1m"`), "rules[0].ban", `must be a duration such as`},
		{"ban too long", rule(tb, `"ban": "30000d"`), "rules[0].ban", "must be between 0s and"},
		{"nodes zero", rule(tb, `"nodes": 0`), "rules[0].nodes", "must be between 1 and 10000, got 0"},
		{"nodes too many", rule(tb, `"nodes": 10001`), "rules[0].nodes", "must be between 1 and 10000, got 10001"},
		{"status below 400", rule(tb, `"reply": {"status": 200}`), "rules[0].reply.status", "must be between 400 and 599, got 200"},
		{"status 399", rule(tb, `"reply": {"status": 399}`), "rules[0].reply.status", "must be between 400 and 599, got 399"},
		{"status 600", rule(tb, `"reply": {"status": 600}`), "rules[0].reply.status", "must be between 400 and 599, got 600"},
		{
			"cluster share invalid",
			rule(`"limit": {"algorithm": "token_bucket", "rate": 1, "period": "1000d", "burst": 1}`, `"mode": "cluster"`, `"on_error": "local"`, `"nodes": 100`),
			"rules[0].nodes", "the limit divided by 100 nodes is invalid: token_bucket: period: must be at most 10 years, got about 273 years",
		},
		{
			"cluster share of warm_up invalid",
			rule(`"limit": {"algorithm": "warm_up", "rate": 1, "period": "1y", "warmup": "1s"}`, `"mode": "cluster"`, `"on_error": "local"`, `"nodes": 20`),
			"rules[0].nodes", "the limit divided by 20 nodes is invalid: warm_up: period: must be at most 10 years, got about 20 years",
		},

		// Match patterns.
		{"method lower case", rule(tb, `"match": {"methods": ["get"]}`), "rules[0].match.methods", `must be upper-case method names, got "get"`},
		{"method empty", rule(tb, `"match": {"methods": [""]}`), "rules[0].match.methods", `got ""`},
		{"path relative", rule(tb, `"match": {"paths": "api"}`), "rules[0].match.paths", `a path pattern starts with /, got "api"`},
		{"path empty", rule(tb, `"match": {"paths": [""]}`), "rules[0].match.paths", `a path pattern starts with /, got ""`},
		{"path control character", rule(tb, `"match": {"paths": ["/a%09"]}`), "rules[0].match.paths", `control character`},
		{"path ** inside", rule(tb, `"match": {"paths": ["/a/**/b"]}`), "rules[0].match.paths", `** may only end a pattern, got "/a/**/b"`},
		{"path * in a segment", rule(tb, `"match": {"paths": ["/a*"]}`), "rules[0].match.paths", `* must be a whole segment, got "/a*"`},
		{"path ** in a segment", rule(tb, `"match": {"paths": ["/api/v1**"]}`), "rules[0].match.paths", `* must be a whole segment, got "/api/v1**"`},
		{"host empty", rule(tb, `"match": {"hosts": [""]}`), "rules[0].match.hosts", `must be a host name (no port), *.domain or a bracketed IPv6 address, got ""`},
		{"host star inside", rule(tb, `"match": {"hosts": ["a*.example.com"]}`), "rules[0].match.hosts", `got "a*.example.com"`},
		{"host star without dot", rule(tb, `"match": {"hosts": ["*example.com"]}`), "rules[0].match.hosts", `got "*example.com"`},
		{"host star alone", rule(tb, `"match": {"hosts": ["*"]}`), "rules[0].match.hosts", `got "*"`},
		{"host star dot", rule(tb, `"match": {"hosts": ["*."]}`), "rules[0].match.hosts", `got "*."`},
		{"host two stars", rule(tb, `"match": {"hosts": ["*.*.example.com"]}`), "rules[0].match.hosts", `got "*.*.example.com"`},
		{"host with port", rule(tb, `"match": {"hosts": ["example.com:8080"]}`), "rules[0].match.hosts", `got "example.com:8080"`},
		{"host URL", rule(tb, `"match": {"hosts": ["http://example.com"]}`), "rules[0].match.hosts", `got "http://example.com"`},
		{"host with a space", rule(tb, `"match": {"hosts": ["exa mple.com"]}`), "rules[0].match.hosts", `got "exa mple.com"`},
		{"host empty label", rule(tb, `"match": {"hosts": ["example..com"]}`), "rules[0].match.hosts", `got "example..com"`},
		{"host IPv6 without brackets", rule(tb, `"match": {"hosts": ["::1"]}`), "rules[0].match.hosts", `got "::1"`},
		{"host IPv6 with port", rule(tb, `"match": {"hosts": ["[::1]:80"]}`), "rules[0].match.hosts", `got "[::1]:80"`},
		{"header name invalid", rule(tb, `"match": {"headers": {"bad name": "x"}}`), "rules[0].match.headers.bad name", "is not a valid header name"},
		{"header value empty", rule(tb, `"match": {"headers": {"X-A": ""}}`), "rules[0].match.headers.X-A", `cannot be empty (use "*"`},

		// Clients, consumers and exceptions.
		{"client not an address", rule(tb, `"match": {"clients": ["10.0.0.0/8", "ten"]}`), "rules[0].match.clients[1]", `must be an IP address or a CIDR block such as 10.0.0.0/8, got "ten"`},
		{"client with a port", rule(tb, `"match": {"clients": ["10.0.0.1:80"]}`), "rules[0].match.clients[0]", `got "10.0.0.1:80"`},
		{"client with a zone", rule(tb, `"match": {"clients": ["fe80::1%eth0"]}`), "rules[0].match.clients[0]", `got "fe80::1%eth0"`},
		{"client block too long", rule(tb, `"match": {"clients": ["10.0.0.0/33"]}`), "rules[0].match.clients[0]", `got "10.0.0.0/33"`},
		{"client block with host bits", rule(tb, `"match": {"clients": ["10.1.2.3/8"]}`), "rules[0].match.clients[0]", `has bits set past its length: write "10.0.0.0/8"`},
		{"client mapped block too short", rule(tb, `"match": {"clients": ["::ffff:0.0.0.0/80"]}`), "rules[0].match.clients[0]", "IPv4-mapped block shorter than /96"},
		{"consumer empty", rule(tb, `"match": {"consumers": ["a", ""]}`), "rules[0].match.consumers", "cannot hold an empty name"},
		{"exception empty", rule(tb, `"match": {"not": [{"paths": ["/x"]}, {}]}`), "rules[0].match.not", "an empty exception matches every request"},
		{"exception empty object", rule(tb, `"match": {"not": {}}`), "rules[0].match.not", "an empty exception matches every request"},
		{"exception not an object", rule(tb, `"match": {"not": [5]}`), "rules[0].match.not[0]", "must be an object, got the number 5"},
		{"exception of an exception", rule(tb, `"match": {"not": {"paths": ["/x"], "not": {"paths": ["/y"]}}}`), "rules[0].match.not.not", "an exception cannot hold exceptions"},
		{"exception field wrong", rule(tb, `"match": {"not": {"clients": ["x"]}}`), "rules[0].match.not.clients[0]", `got "x"`},
		{"exception unknown field", rule(tb, `"match": {"not": [{"path": ["/x"]}]}`), "rules[0].match.not[0].path", "unknown field"},

		// Unlimited rules.
		{"unlimited without match", `{"name": "u", "unlimited": true}`, "rules[0].match", "an unlimited rule exempts the requests it matches from every rule: without a match"},
		{"unlimited with a limit", `{"name": "u", "unlimited": true, "match": {"clients": ["10.0.0.0/8"]}, ` + tb + `}`, "rules[0].limit", "does not apply to an unlimited rule"},
		{"unlimited with by", `{"name": "u", "unlimited": true, "match": {"paths": ["/x"]}, "by": "ip"}`, "rules[0].by", "does not apply to an unlimited rule"},
		{"unlimited with shadow", `{"name": "u", "unlimited": true, "match": {"paths": ["/x"]}, "action": "shadow"}`, "rules[0].action", "does not apply to an unlimited rule"},
		{"unlimited not a boolean", `{"name": "u", "unlimited": "yes", ` + tb + `}`, "rules[0].unlimited", "must be true or false"},
		{"unlimited without a name", `{"unlimited": true, "match": {"paths": ["/x"]}}`, "rules[0].name", "is required"},
		{"unlimited false needs a limit", `{"name": "u", "unlimited": false}`, "rules[0].limit", "is required"},

		// Dimensions.
		{"dimension unknown", rule(tb, `"by": ["account"]`), "rules[0].by[0]", `must be one of ` + strings.Join(rules.Dimensions(), ", ") + ` (NAME or NAME:ARG), got "account"`},
		{"dimension unknown, one string", rule(tb, `"by": "account"`), "rules[0].by[0]", `got "account"`},
		{"dimension in upper case", rule(tb, `"by": ["ip", "IP"]`), "rules[0].by[1]", `got "IP"`},
		{"dimension argument not taken", rule(tb, `"by": ["ip:x"]`), "rules[0].by[0]", `takes no argument, got "x"`},
		{"global argument", rule(tb, `"by": ["global:all"]`), "rules[0].by[0]", `takes no argument, got "all"`},
		{"header without a name", rule(tb, `"by": ["header:"]`), "rules[0].by[0]", "has nothing after the colon"},
		{"header bare", rule(tb, `"by": ["header"]`), "rules[0].by[0]", "needs a header name: header:NAME"},
		{"header bad name", rule(tb, `"by": ["header:bad name"]`), "rules[0].by[0]", `is not a valid header name: "bad name"`},
		{"device bad name", rule(tb, `"by": ["device:a:b"]`), "rules[0].by[0]", `is not a valid header name: "a:b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := decode(t, `{"rules": [`+tt.rule+`]}`)
			if len(errs.List) != 1 {
				t.Fatalf("got %d errors, want 1 at %s:\n%v", len(errs.List), tt.path, errs.Err())
			}
			e := errs.List[0]
			if e.Path != tt.path || !strings.Contains(e.Reason, tt.reason) {
				t.Errorf("error %s: %s\nwant    %s: ...%s...", e.Path, e.Reason, tt.path, tt.reason)
			}
			if want := "test.json: " + tt.path + ": "; !strings.HasPrefix(errs.Error(), want) {
				t.Errorf("Error() = %q, want it to start with %q", errs.Error(), want)
			}
		})
	}
}

// The errors of a document are all reported, each on its own line, in document order.
func TestDecodeReportsEveryError(t *testing.T) {
	_, errs := decode(t, `{
		"rules": [
			{"name": "a b", "limit": {"algorithm": "token_bucket"}},
			{"name": "x", "mode": "global", "limit": {"algorithm": "nope", "rate": 5}},
			{"name": "x", "by": ["ip", "planet"], "reply": {"status": 200, "colour": 1},
			 "limit": {"algorithm": "fixed_window", "limit": 0, "window": "10"}},
			{"limit": {"algorithm": "concurrency", "max": 1}},
			{"limit": {"algorithm": "concurrency", "max": 1}},
			{"name": "y", "match": {"paths": ["api", "/ok", "/a*"], "hosts": ["a:1", "ok.com"]}, "action": "delay",
			 "limit": {"algorithm": "sliding_log", "limit": 1, "window": "1s", "extra": true}}
		],
		"typo": 1
	}`)
	want := []string{
		"rules[0].name: may hold only letters",
		"rules[0].limit.rate: is required",
		"rules[1].mode: must be one of local, cluster",
		"rules[1].limit.algorithm: must be one of",
		"rules[2].by[1]: must be one of",
		"rules[2].reply.status: must be between 400 and 599",
		"rules[2].reply.colour: unknown field",
		"rules[2].limit.limit: must be between 1 and",
		"rules[2].limit.window: must be a duration",
		"rules[2].name: another rule has the name \"x\"",
		"rules[3].name: is required",
		"rules[4].name: is required", // not also a duplicate of rules[3]'s missing name
		"rules[5].match.paths: a path pattern starts with /, got \"api\"",
		"rules[5].match.paths: * must be a whole segment, got \"/a*\"",
		"rules[5].match.hosts: must be a host name",
		"rules[5].max_delay: is required (above 0) when action is delay",
		"rules[5].limit.extra: unknown field",
		"typo: unknown field",
	}
	if len(errs.List) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs.List), len(want), errs.Err())
	}
	lines := strings.Split(errs.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("Error() has %d lines, want %d", len(lines), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], "test.json: "+w) {
			t.Errorf("line %d = %q, want it to start with %q", i, lines[i], "test.json: "+w)
		}
	}
}

func TestDecodeRulesNotAList(t *testing.T) {
	for doc, want := range map[string]string{
		`{"rules": {"name": "x"}}`: "test.json: rules: must be a list, got an object",
		`{"rules": "x"}`:           `test.json: rules: must be a list, got the string "x"`,
		`[]`:                       "test.json: must be an object, got a list",
	} {
		rs, errs := decode(t, doc)
		if len(rs) != 0 || errs.Err() == nil || errs.Error() != want {
			t.Errorf("%s: %d rules, error %v; want %q", doc, len(rs), errs.Err(), want)
		}
	}
}

// Every rule the registry lists is documented and decodes from a minimal config.
func TestRegistryLists(t *testing.T) {
	for _, name := range []string{"concurrency", "fixed_window", "leaky_bucket", "sliding_log", "sliding_window", "token_bucket", "warm_up"} {
		if !contains(rules.Algorithms(), name) {
			t.Errorf("Algorithms() = %v, lacks %s", rules.Algorithms(), name)
		}
	}
	for _, name := range []string{"consumer", "device", "global", "header", "host", "ip", "method", "path", "route"} {
		if !contains(rules.Dimensions(), name) {
			t.Errorf("Dimensions() = %v, lacks %s", rules.Dimensions(), name)
		}
	}
	for _, l := range [][]string{rules.Algorithms(), rules.Dimensions()} {
		for i := 1; i < len(l); i++ {
			if l[i-1] >= l[i] {
				t.Errorf("not sorted: %v", l)
			}
		}
	}
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

// TestWarnings: a rule whose algorithm does not split across nodes (warm_up) warns, at its
// on_error, when Redis's outage would split it (cluster, on_error local); not otherwise.
func TestWarnings(t *testing.T) {
	const warm = `"limit": {"algorithm": "warm_up", "rate": 10, "period": "1s", "warmup": "10s"}`
	cases := []struct {
		doc  string
		want string // the warned path; "" none
	}{
		{`{"name": "w", "mode": "cluster", "on_error": "local", "nodes": 3, ` + warm + `}`, "rules[0].on_error"},
		{`{"name": "w", "mode": "cluster", "on_error": "open", ` + warm + `}`, ""},
		{`{"name": "w", ` + warm + `}`, ""},
		{`{"name": "t", "mode": "cluster", "on_error": "local", "nodes": 3, "limit": {"algorithm": "token_bucket", "rate": 10, "period": "1s"}}`, ""},
	}
	for _, c := range cases {
		r := mustRule(t, c.doc)
		ws := r.Warnings("rules[0]")
		switch {
		case c.want == "" && len(ws) != 0:
			t.Errorf("%s: warnings %v, want none", c.doc, ws)
		case c.want != "" && (len(ws) != 1 || ws[0].Path != c.want || !strings.Contains(ws[0].Reason, "does not split")):
			t.Errorf("%s: warnings %v, want one at %s", c.doc, ws, c.want)
		}
	}
}
