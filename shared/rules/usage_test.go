package rules_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
	"github.com/diana-gw/diana/store/memstore"
)

// tokens is a token budget: 1000 tokens per minute per API key, the cost read from the
// response's usage.total_tokens, the estimate from the request's max_tokens.
const tokens = `{"name": "tokens", "by": ["header:X-Api-Key"],
	"usage": {"body": "usage.total_tokens", "estimate_body": "max_tokens", "estimate": 10},
	"limit": {"algorithm": "token_bucket", "rate": 1000, "period": "1m"}}`

func TestDecodeUsage(t *testing.T) {
	r := mustRule(t, tokens)
	u := r.Usage
	if u == nil || u.Body.String() != "usage.total_tokens" || u.Header != nil || u.EstimateBody.String() != "max_tokens" ||
		u.Estimate != 10 || u.Fallback != -1 {
		t.Fatalf("usage %+v", u)
	}
	h := mustRule(t, `{"name": "h", "usage": {"header": "x-in + x-out", "fallback": 500}, "limit": {"algorithm": "fixed_window", "limit": 5, "window": "1m"}}`)
	if h.Usage.Header.String() != "x-in + x-out" || h.Usage.Estimate != 1 || h.Usage.Fallback != 500 {
		t.Fatalf("usage %+v", h.Usage)
	}
	mustRule(t, `{"name": "s", "usage": {"body": "usage.total_tokens"}, "limit": {"algorithm": "sliding_window", "limit": 5, "window": "1m", "subwindows": 1}}`)
	if rd := rules.ReadsOf([]*rules.Rule{r}); !rd.Body {
		t.Error("a rule with estimate_body does not read the body")
	}
	if rd := rules.ReadsOf([]*rules.Rule{h}); rd.Body {
		t.Error("a rule without estimate_body reads the body")
	}
}

func TestDecodeUsageInvalid(t *testing.T) {
	const tb = `"limit": {"algorithm": "token_bucket", "rate": 10}`
	for _, tt := range []struct {
		name, rule, path, reason string
	}{
		{"neither header nor body", rule(tb, `"usage": {"estimate": 5}`), "rules[0].usage", "needs header, body or format"},
		{"both", rule(tb, `"usage": {"header": "x-t", "body": "usage.t"}`), "rules[0].usage.body", "header, body and format cannot be combined"},
		{"bad path", rule(tb, `"usage": {"body": "usage..t"}`), "rules[0].usage.body", "empty key"},
		{"bad header", rule(tb, `"usage": {"header": "x t"}`), "rules[0].usage.header", "cannot have"},
		{"bad estimate path", rule(tb, `"usage": {"body": "u.t", "estimate_body": "a+a"}`), "rules[0].usage.estimate_body", "named twice"},
		{"negative estimate", rule(tb, `"usage": {"body": "u.t", "estimate": -1}`), "rules[0].usage.estimate", "between 0 and"},
		{"negative fallback", rule(tb, `"usage": {"body": "u.t", "fallback": -1}`), "rules[0].usage.fallback", "between 0 and"},
		{"unknown field", rule(tb, `"usage": {"body": "u.t", "path": "x"}`), "rules[0].usage.path", "unknown field"},
		{"not an object", rule(tb, `"usage": "usage.total_tokens"`), "rules[0].usage", "must be an object"},
		{"with cost", rule(tb, `"cost": 5, "usage": {"body": "u.t"}`), "rules[0].cost", "the cost comes from the response"},
		{"sliding log", `{"name": "r", "usage": {"body": "u.t"}, "limit": {"algorithm": "sliding_log", "limit": 5, "window": "1m"}}`,
			"rules[0].limit.algorithm", "sliding_log cannot settle a cost read from the response (usage): use one of fixed_window, "},
		{"concurrency", `{"name": "r", "usage": {"body": "u.t"}, "limit": {"algorithm": "concurrency", "max": 5}}`,
			"rules[0].limit.algorithm", "concurrency cannot settle"},
		{"subwindows", `{"name": "r", "usage": {"body": "u.t"}, "limit": {"algorithm": "sliding_window", "limit": 5, "window": "1m", "subwindows": 4}}`,
			"rules[0].limit.subwindows", "remove subwindows"},
		{"delay", rule(tb, `"usage": {"body": "u.t"}, "action": "delay", "max_delay": "1s"`), "rules[0].action", "delay cannot hold a request whose cost comes from its response"},
		{"batch", rule(tb, `"usage": {"body": "u.t"}, "mode": "cluster", "batch": {"max": 10}`), "rules[0].batch", "cannot be combined with usage"},
		{"unlimited", `{"name": "r", "unlimited": true, "match": {"paths": ["/a"]}, "usage": {"body": "u.t"}}`, "rules[0].usage", "does not apply to an unlimited rule"},
		{"stream_usage unknown", rule(tb, `"usage": {"body": "u.t", "stream_usage": "first"}`), "rules[0].usage.stream_usage", "must be one of once, last"},
		{"stream_usage with header", rule(tb, `"usage": {"header": "x-t", "stream_usage": "last"}`), "rules[0].usage.stream_usage", "a header is read once"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := decode(t, `{"rules": [`+tt.rule+`]}`)
			if len(errs.List) != 1 {
				t.Fatalf("got %d errors, want 1 at %s:\n%v", len(errs.List), tt.path, errs.Err())
			}
			if e := errs.List[0]; e.Path != tt.path || !strings.Contains(e.Reason, tt.reason) {
				t.Errorf("error %s: %s\nwant    %s: ...%s...", e.Path, e.Reason, tt.path, tt.reason)
			}
		})
	}
}

// TestMeterStreamUsage: stream_usage says which events of a stream carry the usage: by default
// one (a second is an error, charged the fallback), with "last" the last of them (vLLM's running
// total); two rules reading the same path each way each read theirs.
func TestMeterStreamUsage(t *testing.T) {
	const tb = `"limit": {"algorithm": "token_bucket", "rate": 10}`
	once := mustRule(t, `{"name": "once", "usage": {"body": "usage.total_tokens", "stream_usage": "once"}, `+tb+`}`)
	last := mustRule(t, `{"name": "last", "usage": {"body": "usage.total_tokens", "stream_usage": "last"}, `+tb+`}`)
	def := mustRule(t, `{"name": "default", "usage": {"body": "usage.total_tokens"}, `+tb+`}`)
	if once.Usage.StreamUsage != usage.OneEvent || def.Usage.StreamUsage != usage.OneEvent || last.Usage.StreamUsage != usage.LastEvent {
		t.Fatalf("stream_usage: once %v, default %v, last %v", once.Usage.StreamUsage, def.Usage.StreamUsage, last.Usage.StreamUsage)
	}
	m := rules.NewMeter([]*rules.Rule{once, last, def}, usage.Limits{}, "/")
	m.Header(func(name string) []string {
		if name == "content-type" {
			return []string{"text/event-stream"}
		}
		return nil
	})
	for _, total := range []int{5, 9, 14} {
		m.Write([]byte(`data: {"choices":[],"usage":{"total_tokens":` + strconv.Itoa(total) + "}}\n\n"))
	}
	m.Write([]byte("data: [DONE]\n\n"))
	for _, c := range []struct {
		r    *rules.Rule
		cost int64
		err  error
	}{{once, 0, usage.ErrDuplicate}, {last, 14, nil}, {def, 0, usage.ErrDuplicate}} {
		if n, err := m.Cost(c.r); n != c.cost || !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("%s: (%d, %v), want (%d, %v)", c.r.Name, n, err, c.cost, c.err)
		}
	}
}

// TestSettlingAlgorithms: the algorithms a usage rule may have.
func TestSettlingAlgorithms(t *testing.T) {
	got := rules.SettlingAlgorithms()
	for _, name := range []string{"fixed_window", "sliding_window", "token_bucket"} {
		if !slices.Contains(got, name) {
			t.Errorf("%s does not settle: %v", name, got)
		}
	}
	for _, name := range []string{"adaptive", "concurrency", "leaky_bucket", "sliding_log", "warm_up"} {
		if slices.Contains(got, name) {
			t.Errorf("%s settles: %v", name, got)
		}
	}
}

// settleEnv is an engine over a memstore with one usage rule, recording what Settle charged.
type settleEnv struct {
	*env
	settled []rules.Settled
}

func newSettleEnv(t *testing.T, rule string) *settleEnv {
	s := &settleEnv{env: &env{t: t, clock: newClock(), rules: map[string]*rules.Rule{}}}
	s.store = memstore.New(memstore.Options{Clock: s.clock.Now})
	s.local = rules.Each(s.store.Decide)
	s.build(mustDecode(t, `{"rules": [`+rule+`]}`), rules.Options{
		Settled: func(st rules.Settled) { s.settled = append(s.settled, st) },
		Clock:   s.clock.Now,
	})
	return s
}

// request is a request of API key key whose body, read whole, asks for max tokens (none if
// max < 0).
func request(key string, max int) *rules.Input {
	in := &rules.Input{Method: "POST", Path: "/v1/chat/completions", Headers: header{"X-Api-Key": key}, BodyState: rules.BodyWhole}
	in.Body = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if max >= 0 {
		in.Body = `{"model":"m","max_tokens":` + itoa(max) + `,"messages":[{"role":"user","content":"hi"}]}`
	}
	return in
}

type header map[string]string

func (h header) Get(k string) string { return h[k] }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

func cost(n int64) func(*rules.Rule) (int64, error) {
	return func(*rules.Rule) (int64, error) { return n, nil }
}

// TestSettle: admission reserves the request's max_tokens (at most the budget), settlement
// charges the actual cost; a budget below zero makes later requests wait until it has
// recovered, with a Retry-After of the debt.
func TestSettle(t *testing.T) {
	e := newSettleEnv(t, tokens)
	ctx := context.Background()
	res := e.check(request("a", 300))
	if !res.Allowed || res.Decision.Remaining != 700 || !res.Settles() {
		t.Fatalf("first request: %+v", res)
	}
	e.eng.Settle(ctx, &res, cost(120)) // 180 come back
	if res.Settles() {
		t.Error("settled twice")
	}
	if got := e.check(request("a", 0)); got.Decision.Remaining != 880 {
		t.Fatalf("after a settlement of 120 on 300: remaining %d, want 880", got.Decision.Remaining)
	}
	// A request asking for more than the budget reserves the whole budget.
	big := e.check(request("b", 5000))
	if !big.Allowed || big.Decision.Remaining != 0 {
		t.Fatalf("a request above the budget: %+v", big)
	}
	e.eng.Settle(ctx, &big, cost(3000)) // 2000 below zero
	next := e.check(request("b", 1))
	// 2000 tokens of debt and 1 more: 2001 tokens at 1000 a minute.
	if next.Allowed || next.Decision.RetryAfter != 2001*algos.Minute/1000 {
		t.Fatalf("after a debt of 2000: %+v", next)
	}
	e.clock.Add(2001 * algos.Minute / 1000)
	if got := e.check(request("b", 1)); !got.Allowed {
		t.Fatalf("after the debt was paid back: %+v", got)
	}
	// Without a max_tokens in the body's first bytes, the rule's estimate (10) is reserved.
	est := e.check(request("c", -1))
	if est.Decision.Remaining != 990 {
		t.Fatalf("estimate of a request without max_tokens: remaining %d", est.Decision.Remaining)
	}
	if len(e.settled) != 2 || e.settled[0].Cost != 120 || e.settled[1].Cost != 3000 || e.settled[0].Err != nil {
		t.Fatalf("settled %+v", e.settled)
	}
}

// TestSettleFallback: a response whose usage cannot be read is charged the fallback, by default
// the request's worst case (here its max_tokens, which the provider stops at), and Settled says
// why.
func TestSettleFallback(t *testing.T) {
	ctx := context.Background()
	missing := func(*rules.Rule) (int64, error) { return 0, errors.New("no usage: " + usage.ErrMissing.Error()) }
	e := newSettleEnv(t, tokens)
	res := e.check(request("a", 300))
	e.eng.Settle(ctx, &res, missing)
	if got := e.check(request("a", 0)); got.Decision.Remaining != 700 {
		t.Fatalf("without a usage, the estimate stays: remaining %d, want 700", got.Decision.Remaining)
	}
	if len(e.settled) != 1 || e.settled[0].Cost != 300 || e.settled[0].Err == nil {
		t.Fatalf("settled %+v", e.settled)
	}
	f := newSettleEnv(t, strings.Replace(tokens, `"estimate": 10`, `"estimate": 10, "fallback": 800`, 1))
	res = f.check(request("a", 300))
	f.eng.Settle(ctx, &res, missing)
	if got := f.check(request("a", 0)); got.Decision.Remaining != 200 {
		t.Fatalf("with a fallback of 800: remaining %d, want 200", got.Decision.Remaining)
	}
	// A fallback below the reservation gives nothing back: the 300 reserved stay charged.
	g := newSettleEnv(t, strings.Replace(tokens, `"estimate": 10`, `"estimate": 10, "fallback": 50`, 1))
	res = g.check(request("a", 300))
	g.eng.Settle(ctx, &res, missing)
	if got := g.check(request("a", 0)); got.Decision.Remaining != 700 || g.settled[0].Cost != 300 {
		t.Fatalf("with a fallback of 50: remaining %d, charged %d, want 700 and 300", got.Decision.Remaining, g.settled[0].Cost)
	}
}

// TestSettleDenied: a request refused by another rule reserves nothing and settles nothing.
func TestSettleDenied(t *testing.T) {
	e := newSettleEnv(t, tokens+`, {"name": "few", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1m"}}`)
	ctx := context.Background()
	first := e.check(request("a", 100))
	second := e.check(request("a", 100))
	if !first.Allowed || second.Allowed || second.Settles() {
		t.Fatalf("first %+v\nsecond %+v", first, second)
	}
	e.eng.Settle(ctx, &second, cost(500))
	e.eng.Settle(ctx, &first, cost(100))
	if len(e.settled) != 1 {
		t.Fatalf("settled %+v", e.settled)
	}
}

// TestSettleWindows: the fixed and the sliding window settle too, in the window of admission.
func TestSettleWindows(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []string{`"algorithm": "fixed_window", "limit": 1000, "window": "1m"`, `"algorithm": "sliding_window", "limit": 1000, "window": "1m"`} {
		e := newSettleEnv(t, `{"name": "tokens", "usage": {"body": "usage.total_tokens", "estimate_body": "max_tokens"}, "limit": {`+alg+`}}`)
		res := e.check(request("a", 400))
		e.clock.Add(algos.Second)
		e.eng.Settle(ctx, &res, cost(1500))
		if got := e.check(request("a", 1)); got.Allowed || got.Decision.Remaining != 0 {
			t.Fatalf("%s: after 1500 of 1000: %+v", alg, got)
		}
		e.clock.Add(2 * algos.Minute)
		res = e.check(request("a", 400))
		e.eng.Settle(ctx, &res, cost(100))
		if got := e.check(request("a", 0)); got.Decision.Remaining != 900 {
			t.Fatalf("%s: after 100 on 400: remaining %d, want 900", alg, got.Decision.Remaining)
		}
	}
}

// TestBodyDimension: body:model counts each model of the request body apart; a request without
// one counts by its address; a model given twice shares one count with every such request.
func TestBodyDimension(t *testing.T) {
	e := newSettleEnv(t, `{"name": "per-model", "by": ["body:model"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}`)
	if rd := e.eng.Reads(); !rd.Body {
		t.Fatal("a rule by body:model does not read the body")
	}
	in := func(body, addr string) *rules.Input {
		i := &rules.Input{Method: "POST", Path: "/", Body: body}
		i.SetClient(netip.MustParseAddr(addr), 64)
		return i
	}
	for _, c := range []struct {
		body, addr string
		allowed    bool
	}{
		{`{"model":"a","messages":[]}`, "192.0.2.1", true},
		{`{"model":"a"}`, "192.0.2.2", false}, // the same model from another client
		{`{"model":"b"}`, "192.0.2.1", true},
		{`{"messages":[]}`, "192.0.2.3", true}, // no model: by address
		{`{"messages":[]}`, "192.0.2.3", false},
		{`{"model":"c","model":"d"}`, "192.0.2.4", true},
		{`{"model":"e","model":"f"}`, "192.0.2.5", false}, // every duplicate shares one count
	} {
		if got := e.check(in(c.body, c.addr)).Allowed; got != c.allowed {
			t.Errorf("%s from %s: allowed %v, want %v", c.body, c.addr, got, c.allowed)
		}
	}
	for _, bad := range []string{"body", "body:", "body:a..b", "body:a+b"} {
		_, errs := decode(t, `{"rules": [{"name": "r", "by": ["`+bad+`"], "limit": {"algorithm": "token_bucket", "rate": 1}}]}`)
		if errs.Err() == nil {
			t.Errorf("by %q accepted", bad)
		}
	}
}

// TestMeterTrailer: a header rule's usage is read from the headers and the trailers together: in
// either, summed across them, and given twice when in both (the fallback, neither value wins).
func TestMeterTrailer(t *testing.T) {
	one, err := usage.ParseHeaders("x-tokens")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := usage.ParseHeaders("x-in+x-out")
	if err != nil {
		t.Fatal(err)
	}
	fields := func(kv ...string) func(string) []string {
		return func(name string) []string {
			var vs []string
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == name {
					vs = append(vs, kv[i+1])
				}
			}
			return vs
		}
	}
	for _, tc := range []struct {
		name              string
		f                 *usage.Fields
		headers, trailers []string // nil trailers: Trailer is not called
		want              int64
		err               error
	}{
		{"header only", one, []string{"x-tokens", "7"}, nil, 7, nil},
		{"header, trailers without it", one, []string{"x-tokens", "7"}, []string{"grpc-status", "0"}, 7, nil},
		{"trailer only", one, nil, []string{"x-tokens", "9"}, 9, nil},
		{"sum across both", sum, []string{"x-in", "3"}, []string{"x-out", "4"}, 7, nil},
		{"in both", one, []string{"x-tokens", "7"}, []string{"x-tokens", "7"}, 0, usage.ErrDuplicate},
		{"twice in the trailers", one, nil, []string{"x-tokens", "1", "x-tokens", "2"}, 0, usage.ErrDuplicate},
		{"bad trailer", one, nil, []string{"x-tokens", "-3"}, 0, usage.ErrValue},
		{"in neither", one, []string{"content-type", "text/plain"}, []string{"grpc-status", "0"}, 0, usage.ErrMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &rules.Rule{Name: "t", Usage: &rules.Usage{Header: tc.f}}
			m := rules.NewMeter([]*rules.Rule{r}, usage.Limits{}, "/")
			m.Header(fields(tc.headers...))
			if tc.trailers != nil {
				m.Trailer(fields(tc.trailers...))
				m.Trailer(fields("x-tokens", "1000", "x-in", "1000", "x-out", "1000")) // a second call is ignored
			}
			n, err := m.Cost(r)
			if n != tc.want || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("cost %d, %v; want %d, %v", n, err, tc.want, tc.err)
			}
			if tc.name == "in both" && !strings.Contains(err.Error(), "in the response's headers and in its trailers") {
				t.Fatalf("error %q does not say where", err)
			}
		})
	}
}
