package rules

import (
	"context"
	"errors"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/usage"
)

// A cost known only from the response (an LLM's tokens): a rule with a Usage.
//
// Admission reserves an estimate: the request's cost is the estimate (Usage.Estimate, or the
// field Usage.EstimateBody of the request's JSON body, read from the bounded prefix in
// Input.Body), at most the rule's limit, so that a request is admitted while the budget has room
// for it (the default estimate 1: while the budget is above zero). The front end then reads the
// usage from the response (Meter: a header or a trailer, a JSON body or the event of a stream
// that carries it) and, once the response has ended, Engine.Settle charges each rule the actual cost in one
// store call per rule (algos.Settle: one Redis script in cluster mode): the difference is debited
// or credited, without a check, so a budget may go below zero, and later requests are then
// denied with the Retry-After of the debt. A response without a usable usage (an upstream error,
// a client gone, a field missing, a hostile value: shared/usage's errors) is charged the rule's
// fallback (default: the estimate), and Options.Settled is told why, for a metric and a log line.
//
// A settlement is an op like the others, so it goes through every store stack: memstore,
// slotstore, store/failover (a settlement Redis cannot take is settled by the rule's fail policy:
// in process memory for on_error local, dropped for open and closed), store/batch (which passes it
// through: a usage rule cannot be batched) and redisstore. The token bucket, the fixed window and
// the (two-window) sliding window settle; the others are refused at config time, as are action
// delay and batch.
//
// Exactness in cluster mode: every admission and every settlement is one atomic script, so the
// units spent across all nodes are at most the budget plus what is in flight: the actual costs,
// beyond their estimates, of the requests not settled yet. A node that dies between admission and settlement loses those requests' settlements: at
// most its in-flight requests' actual costs beyond their estimates.

// UsageSpec is where a rule's cost is read from the response, as given.
type UsageSpec struct {
	Header string // response headers whose values add up to the cost: "x-usage-total-tokens"
	Body   string // JSON paths of the response body, or of its stream's usage event: "usage.total_tokens"
	// Estimate is the units reserved at admission (default 1), and EstimateBody a JSON path of
	// the request body to take it from instead ("max_tokens"), when the body's first
	// MaxPeek bytes hold it.
	Estimate     int64
	EstimateBody string
	// Fallback is the cost of a response whose usage cannot be read; -1 (the default): the
	// request's estimate.
	Fallback int64
	// StreamUsage is which events of a text/event-stream carry Body's usage: one (the default;
	// a second is an error) or the last of many (a running total in every event).
	StreamUsage usage.Events
}

// NewUsageSpec returns a UsageSpec holding the defaults: estimate 1, fallback the estimate.
func NewUsageSpec() UsageSpec { return UsageSpec{Estimate: 1, Fallback: -1} }

// Usage is a rule's cost from the response, checked and parsed.
type Usage struct {
	Header, Body *usage.Fields // one of them
	Estimate     int64
	EstimateBody *usage.Fields // nil: Estimate
	Fallback     int64         // -1: the request's estimate
	StreamUsage  usage.Events  // which events of a stream carry Body's usage
}

// MaxPeek is the most bytes of a request body a front end reads ahead for Usage.EstimateBody
// (and keeps, to forward them): an estimate further into the body is not seen, and Estimate
// applies.
const MaxPeek = 64 << 10

// CannotSettle is in the reason of every error on an algorithm that cannot settle a usage rule's
// cost, for a front end that adapts such a rule rather than refuse it (the Kong plugin).
const CannotSettle = "cannot settle a cost read from the response (usage)"

// SettlingAlgorithms lists the registered algorithms a usage rule may have: those whose
// algorithm settles a late cost (algos.Settles); sliding_window only without subwindows.
func SettlingAlgorithms() []string {
	return AlgorithmsWhere(func(k AlgorithmKind) bool {
		a, err := k.Build(k.Resolve(k.Example()), 1)
		return err == nil && algos.Settles(a)
	})
}

// readUsage reads the usage object of a rule.
func readUsage(o *conf.Obj) *UsageSpec {
	if !o.Has("usage") || o.IsNull("usage") {
		o.Obj("usage") // marks it read
		return nil
	}
	uo := o.Obj("usage")
	if o.Failed("usage") {
		return nil
	}
	u := NewUsageSpec()
	u.Header = uo.String("header", "")
	u.Body = uo.String("body", "")
	u.Estimate = uo.Int("estimate", u.Estimate, costBounds[0], costBounds[1])
	u.EstimateBody = uo.String("estimate_body", "")
	u.Fallback = uo.Int("fallback", u.Fallback, costBounds[0], costBounds[1])
	u.StreamUsage = usage.Events(uo.EnumIndex("stream_usage", usage.EventsNames...))
	uo.Done()
	o.Refuse("cost", "the cost comes from the response (usage): usage.estimate is what admission reserves")
	return &u
}

// buildUsage checks the usage and sets r.Usage; the rule's algorithm, action and batch are
// checked against it after they are built.
func (r *Rule) buildUsage(o *conf.Obj, s *UsageSpec) {
	if s == nil {
		return
	}
	uo := o.Obj("usage")
	u := &Usage{Estimate: s.Estimate, Fallback: s.Fallback, StreamUsage: s.StreamUsage}
	switch {
	case s.Header == "" && s.Body == "" && !uo.Failed("header", "body"):
		o.Fail("usage", "needs header or body: where the response tells the cost")
	case s.Header != "" && s.Body != "":
		uo.Fail("body", "cannot be combined with header: the cost is read from one of them")
	case s.Header != "":
		f, err := usage.ParseHeaders(s.Header)
		if err != nil {
			uo.Fail("header", err.Error())
		}
		u.Header = f
		if s.StreamUsage != usage.OneEvent {
			uo.Fail("stream_usage", "applies to a body's stream of events: a header is read once")
		}
	case s.Body != "":
		f, err := usage.ParsePaths(s.Body)
		if err != nil {
			uo.Fail("body", err.Error())
		}
		u.Body = f
	}
	if s.EstimateBody != "" {
		f, err := usage.ParsePaths(s.EstimateBody)
		if err != nil {
			uo.Fail("estimate_body", err.Error())
		}
		u.EstimateBody = f
	}
	uo.CheckInt("estimate", s.Estimate, costBounds[0], costBounds[1])
	if s.Fallback != -1 {
		uo.CheckInt("fallback", s.Fallback, costBounds[0], costBounds[1])
	}
	r.Usage = u
}

// checkUsage refuses what a usage rule cannot have: an algorithm without a settlement, a
// delay, a batch. Called once the algorithm is built.
func (r *Rule) checkUsage(o *conf.Obj) {
	if r.Usage == nil {
		return
	}
	if r.Action == Delay {
		o.Fail("action", "delay cannot hold a request whose cost comes from its response (usage): use reject")
	}
	if r.Alg == nil {
		return // the limit's errors are reported already
	}
	if _, batched := r.Alg.(*Batched); batched {
		o.Fail("batch", "cannot be combined with usage: a cost known from the response is settled in the shared store, not in batches")
		return
	}
	if !algos.Settles(r.Alg) {
		lo := o.Obj("limit")
		if r.Algorithm == "sliding_window" && r.params["subwindows"] > 1 {
			lo.Fail("subwindows", "sliding_window with subwindows "+CannotSettle+": remove subwindows")
			return
		}
		lo.Fail("algorithm", r.Algorithm+" "+CannotSettle+": use one of "+strings.Join(SettlingAlgorithms(), ", "))
	}
}

// estimate returns the units a request reserves under r at admission: the field of its body, or
// the rule's estimate, at most the rule's limit (a request never waits for more than a full
// budget).
func (u *Usage) estimate(alg algos.Algorithm, in *Input) int64 {
	est := u.Estimate
	if u.EstimateBody != nil && in.Body != "" {
		if n, err := u.EstimateBody.Prefix(in.Body); err == nil {
			est = n
		}
	}
	return min(est, alg.Script().Limit)
}

// reservation is an estimate a request reserved under a usage rule, to settle.
type reservation struct {
	rule     *Rule
	key      string
	estimate int64 // 0 when a fail policy admitted it and no store reserved it
	at       int64 // the engine's clock before the admission, µs
}

// Settles reports whether res reserved estimates that Settle must settle when the response ends.
func (r *Result) Settles() bool { return len(r.reserved) > 0 }

// Settled is what Settle charged one rule.
type Settled struct {
	Rule *Rule
	Cost int64 // the units charged in all: the actual cost, or the fallback
	// Err is why the response's usage was not read (wrapping a shared/usage error class), and
	// the fallback charged; nil when Cost is the response's.
	Err error
	// StoreErr is the store's error when the settlement came from the rule's fail policy.
	StoreErr error
}

// Settle charges the request res admitted its actual cost under each usage rule it reserved an
// estimate under: cost(rule) is the cost read from the response, or an error, when the
// rule's fallback is charged. Call it once the response has ended, whatever its outcome (an
// upstream error, a client gone): nothing is free. It is a no-op for a result without
// reservations, and settles each reservation once.
func (e *Engine) Settle(ctx context.Context, res *Result, cost func(r *Rule) (int64, error)) {
	if len(res.reserved) == 0 {
		return
	}
	now := e.clock()
	s := e.scratch.Get().(*scratch)
	defer e.put(s)
	s.ops = s.ops[:0]
	settled := make([]Settled, 0, len(res.reserved))
	for _, rv := range res.reserved {
		r := rv.rule
		n, err := cost(r)
		if err != nil {
			n = r.Usage.Fallback
			if n < 0 {
				n = rv.estimate
			}
		}
		age := now - rv.at
		op := Op{Key: rv.key, Alg: algos.NewSettle(r.Alg, rv.estimate, age), Req: algos.Request{Cost: n}, OnError: r.OnError}
		if r.Fallback != nil {
			op.Fallback = algos.NewSettle(r.Fallback, rv.estimate, age)
		}
		if op.Alg == nil { // Build refuses such a rule; a rule made by hand may still be one
			continue
		}
		s.ops = append(s.ops, op)
		settled = append(settled, Settled{Rule: r, Cost: n, Err: err})
	}
	res.reserved = nil
	// Each to its rule's store, as decide does; the ops name no rule, so that store/failover
	// settles one Redis cannot take with op.Fallback (a settlement), never with a learned
	// share's admission algorithm, and does not count it as traffic.
	s.local, s.clust = s.local[:0], s.clust[:0]
	for i := range s.ops {
		if settled[i].Rule.Mode == Cluster {
			s.clust = append(s.clust, &s.ops[i])
		} else {
			s.local = append(s.local, &s.ops[i])
		}
	}
	if len(s.local) > 0 {
		e.local.Decide(ctx, s.local)
	}
	if len(s.clust) > 0 {
		e.cluster.Decide(ctx, s.clust)
	}
	if e.settled != nil {
		for i := range settled {
			settled[i].StoreErr = s.ops[i].Err
			e.settled(settled[i])
		}
	}
}

// Meter reads a response's usage for the rules a result reserved under, as the response passes:
// Header once its headers are known, Write with each chunk of its body, Trailer with its
// trailers if it has any, then Cost for each rule, which Engine.Settle takes. Rules that read the
// same fields share one reader; nothing of the body is kept. A Meter is for one response and is
// not safe for concurrent use.
type Meter struct {
	rules    []*Rule
	costs    []int64
	errs     []error
	readers  []*usage.Reader // by rule; nil for a header rule or a body the meter does not read
	distinct []*usage.Reader
	lim      usage.Limits
	seen     map[string][]string // the header rules' fields as the headers gave them, for Trailer
	headers  bool                // Header was called
	trailers bool                // Trailer was called
	ended    bool
}

// Meter returns the meter of res's response, or nil when res reserved nothing. lim bounds each
// body reader.
func (r *Result) Meter(lim usage.Limits) *Meter {
	if len(r.reserved) == 0 {
		return nil
	}
	rs := make([]*Rule, len(r.reserved))
	for i, rv := range r.reserved {
		rs[i] = rv.rule
	}
	return NewMeter(rs, lim)
}

// NewMeter returns a meter for rules' usage (each rule needs only its Name and Usage): for a
// front end whose rules another process decided (the Envoy filter settling through dianad).
func NewMeter(rs []*Rule, lim usage.Limits) *Meter {
	m := &Meter{lim: lim, rules: rs}
	m.costs, m.errs, m.readers = make([]int64, len(m.rules)), make([]error, len(m.rules)), make([]*usage.Reader, len(m.rules))
	return m
}

// ReadsBody reports whether a rule of m reads the response body: a front end that can read it
// only at a cost (buffering, a body callback) asks first.
func (m *Meter) ReadsBody() bool {
	for _, r := range m.rules {
		if r.Usage.Body != nil {
			return true
		}
	}
	return false
}

// Header reads the response's headers, which get returns by name (every value): the costs of
// the header rules, and for the body rules how to read the body, by its Content-Type. A body
// with a Content-Encoding other than identity cannot be read: those rules get an error.
func (m *Meter) Header(get func(name string) []string) {
	first := func(name string) string {
		if v := get(name); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if m.headers {
		return
	}
	m.headers = true
	stream := usage.IsStream(first("content-type"))
	enc := first("content-encoding")
	for i, r := range m.rules {
		u := r.Usage
		if u.Header != nil {
			m.costs[i], m.errs[i] = u.Header.Header(func(name string) []string {
				v := get(name)
				if m.seen == nil {
					m.seen = map[string][]string{}
				}
				m.seen[name] = v
				return v
			})
			continue
		}
		if enc != "" && enc != "identity" {
			m.errs[i] = errEncoded(enc)
			continue
		}
		for j := range i {
			if o := m.rules[j].Usage; o.Body != nil && o.Body.String() == u.Body.String() && o.StreamUsage == u.StreamUsage && m.readers[j] != nil {
				m.readers[i] = m.readers[j]
			}
		}
		if m.readers[i] == nil {
			m.readers[i] = usage.NewReader(u.Body, stream, m.lim)
			m.readers[i].SetEvents(u.StreamUsage)
			m.distinct = append(m.distinct, m.readers[i])
		}
	}
}

// errEncoded is the error of a body whose Content-Encoding hides its usage.
func errEncoded(enc string) error {
	return &encodedError{enc}
}

type encodedError struct{ enc string }

func (e *encodedError) Error() string {
	return usage.ErrSyntax.Error() + ": the body has Content-Encoding " + e.enc
}
func (e *encodedError) Unwrap() error { return usage.ErrSyntax }

// Trailer reads the response's trailers, which get returns by name (every value), once the body
// has ended: a header rule's fields are looked for in the headers and the trailers together, so
// that an upstream that knows the usage only after the body (a gRPC or HTTP/2 stream) sends it
// as a trailer. A field in both is given twice (usage.ErrDuplicate), charged the fallback as a
// repeated header is: neither value wins, the upstream's intent being a guess.
func (m *Meter) Trailer(get func(name string) []string) {
	if !m.headers || m.trailers || m.ended {
		return
	}
	m.trailers = true
	for i, r := range m.rules {
		if r.Usage.Header == nil {
			continue
		}
		both := ""
		m.costs[i], m.errs[i] = r.Usage.Header.Header(func(name string) []string {
			h, t := m.seen[name], get(name)
			switch {
			case len(t) == 0:
				return h
			case len(h) == 0:
				return t
			}
			both = name
			return append(append([]string(nil), h...), t...)
		})
		if both != "" && errors.Is(m.errs[i], usage.ErrDuplicate) {
			m.errs[i] = &trailedError{both}
		}
	}
}

// trailedError is the error of a usage header given in both the headers and the trailers.
type trailedError struct{ name string }

func (e *trailedError) Error() string {
	return usage.ErrDuplicate.Error() + ": header " + e.name + ": in the response's headers and in its trailers"
}
func (e *trailedError) Unwrap() error { return usage.ErrDuplicate }

// Write reads the next chunk of the body. It never fails (see usage.Reader.Write).
func (m *Meter) Write(p []byte) (int, error) {
	for _, rd := range m.distinct {
		rd.Write(p)
	}
	return len(p), nil
}

// Cost returns what the response says rule r cost, or why it says nothing: for Engine.Settle,
// once the body has ended (a body that never started, as after a transport error, reads as
// empty). A rule the meter was not made for has ErrMissing.
func (m *Meter) Cost(r *Rule) (int64, error) {
	if !m.ended {
		m.ended = true
		for i, rd := range m.readers {
			switch {
			case !m.headers:
				m.errs[i] = errNoHeaders
			case rd != nil:
				m.costs[i], m.errs[i] = rd.End()
			}
		}
	}
	for i, mr := range m.rules {
		if mr == r {
			return m.costs[i], m.errs[i]
		}
	}
	return 0, errNoHeaders
}

// errNoHeaders is the error of a rule whose response never came (no headers, no body).
var errNoHeaders = &noResponse{}

type noResponse struct{}

func (*noResponse) Error() string { return usage.ErrMissing.Error() + ": no response" }
func (*noResponse) Unwrap() error { return usage.ErrMissing }

// Reservation is an estimate a result reserved under a usage rule, for a front end that settles
// it through another process than the one that admitted it (the Envoy filter through dianad's
// POST /v1/settle): Reserved carries it out, Resume brings it back as a result to Settle.
type Reservation struct {
	Rule     *Rule
	Key      string
	Estimate int64 // 0 when a fail policy admitted the request
	Age      int64 // µs since admission, as Reserved saw it
}

// Reserved returns the reservations of res, to settle later with Resume and Settle.
func (e *Engine) Reserved(res *Result) []Reservation {
	now := e.clock()
	out := make([]Reservation, len(res.reserved))
	for i, rv := range res.reserved {
		out[i] = Reservation{Rule: rv.rule, Key: rv.key, Estimate: rv.estimate, Age: now - rv.at}
	}
	return out
}

// Resume returns a result holding the reservations rv, which Settle settles, as if admitted rv's
// Age ago.
func (e *Engine) Resume(rv []Reservation) Result {
	now := e.clock()
	var res Result
	for _, x := range rv {
		res.reserved = append(res.reserved, reservation{rule: x.Rule, key: x.Key, estimate: x.Estimate, at: now - x.Age})
	}
	return res
}
