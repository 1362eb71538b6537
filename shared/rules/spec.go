package rules

import (
	"sort"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
)

// Spec is a rule as an operator states it, in plain Go values: the one model every config
// format fills. A YAML or JSON document is read into it (ReadSpec), the Kong plugin fills it
// from its typed fields, the rate limit service from a descriptor; Build then checks it and
// makes the Rule. A document reader checks only what a document can get wrong and a Spec cannot
// hold (types, unknown keys, fields another field rules out); every check on the values is
// Build's, so a rule means the same whatever it was written in.
//
// Start from NewSpec, which holds the defaults: the zero values of some fields are valid
// settings of their own (cost 0 peeks).
type Spec struct {
	Name string
	// Unlimited: the rule counts nothing; a request it matches is limited by no rule (an
	// allowlist). It has a Name and a Match only.
	Unlimited bool
	Match     Match
	By        []string   // dimensions, e.g. ["ip"], ["ip", "path"], ["header:X-Api-Key"]; none: global
	Cost      int64      // units one request takes
	Usage     *UsageSpec // the cost comes from the response (LLM tokens); nil: Cost
	Limit     LimitSpec
	Mode      Mode
	Action    Action
	MaxDelay  int64 // µs a request may be held under Delay
	Ban       int64 // µs an identity is blocked after a denial; 0: no ban
	OnError   FailPolicy
	Nodes     int64      // cluster mode: gateway nodes sharing the limit, for FailLocal
	Batch     *BatchSpec // cluster mode: batched units; nil: every request decided in Redis
	Reply     Reply
}

// LimitSpec is a rule's algorithm and its parameters as given: a parameter absent from Params
// takes its default (see AlgorithmKind.Resolve).
type LimitSpec struct {
	Algorithm string
	Params    Params
}

// BatchSpec is a rule's batched mode: each node takes units from Redis in batches of Min to Max
// (Min 0: 1), held at most MaxAge µs (0: the algorithm's default).
type BatchSpec struct {
	Min, Max, MaxAge int64
}

// NewSpec returns a Spec holding every default: cost 1, one node, local mode, reject, fail
// open, and a 429 reply with Kong's message and the draft's headers.
func NewSpec() Spec {
	return Spec{Cost: 1, Nodes: 1, Reply: Reply{Status: 429, Message: DefaultMessage, Headers: Draft}}
}

// The bounds of a rule's numeric fields, which the document reader reads with and Build checks.
var (
	costBounds   = [2]int64{0, algos.MaxCount}
	spanBounds   = [2]int64{0, algos.MaxSpan} // max_delay, ban, batch.max_age
	nodesBounds  = [2]int64{1, 10000}
	statusBounds = [2]int64{400, 599}
	batchBounds  = [2]int64{1, MaxBatch}
)

// maxName bounds a rule's name, in bytes: it starts every key.
const maxName = 64

// Rule checks s and returns the rule it states, or every error, each with its field path as a
// document would have it ("limit.burst", "reply.status").
func (s Spec) Rule() (*Rule, error) {
	errs := &conf.Errors{}
	r := s.Build(conf.At("", errs))
	return r, errs.Err()
}

// Build checks s and returns the rule it states, recording every error on o under the path
// of its field; a field on which o already holds an error (the document reader's: a wrong
// type, a missing field) is not checked again.
func (s Spec) Build(o *conf.Obj) *Rule {
	r := &Rule{Name: s.Name, Unlimited: s.Unlimited, Cost: s.Cost, Mode: s.Mode, Action: s.Action,
		MaxDelay: s.MaxDelay, Ban: s.Ban, OnError: s.OnError, Nodes: s.Nodes, Reply: s.Reply}
	if !o.Failed("name") {
		switch {
		case r.Name == "":
			o.Fail("name", "cannot be empty")
		case len(r.Name) > maxName:
			o.Fail("name", "must be at most "+strconv.Itoa(maxName)+" bytes long, got "+strconv.Itoa(len(r.Name)))
		case !validName(r.Name):
			o.Fail("name", "may hold only letters, digits and . _ - (it starts the keys), got "+quote(r.Name))
		}
	}
	r.Match = s.Match.build(o.Obj("match"), true)
	if s.Unlimited {
		if r.Match.IsEmpty() && !o.Failed("match") {
			o.Fail("match", "an unlimited rule exempts the requests it matches from every rule: without a match nothing would be limited")
		}
		if len(s.By) > 0 || s.Limit.Algorithm != "" || s.Batch != nil {
			o.Fail("unlimited", "an unlimited rule counts nothing: it takes no by, limit or batch")
		}
		return r
	}

	r.By = s.By
	if len(r.By) == 0 {
		r.By = []string{"global"}
	}
	for i, spec := range r.By {
		d, reason := newDimension(spec)
		if reason != "" {
			o.Fail("by["+strconv.Itoa(i)+"]", reason)
			continue
		}
		r.dims = append(r.dims, d)
	}
	o.CheckInt("cost", r.Cost, costBounds[0], costBounds[1])
	r.buildUsage(o, s.Usage)
	if o.CheckDuration("max_delay", r.MaxDelay, spanBounds[0], spanBounds[1]) &&
		r.Action == Delay && r.MaxDelay == 0 && !o.Failed("max_delay") {
		o.Fail("max_delay", "is required (above 0) when action is delay")
	}
	banOK := o.CheckDuration("ban", r.Ban, spanBounds[0], spanBounds[1])
	nodesOK := o.CheckInt("nodes", r.Nodes, nodesBounds[0], nodesBounds[1])

	rep := o.Obj("reply")
	rep.CheckInt("status", int64(r.Reply.Status), statusBounds[0], statusBounds[1])
	switch {
	case r.Reply.Legacy && r.Reply.Headers == Structured:
		rep.Fail("legacy_headers", "adds Kong's older X-RateLimit-Limit and X-RateLimit-Remaining to the RateLimit-* headers, "+
			"which headers \"structured\" replaces: remove one of them")
	case r.Reply.Legacy && r.Reply.Headers == Envoy:
		rep.Fail("legacy_headers", "adds X-RateLimit-Limit and X-RateLimit-Remaining, which headers \"envoy\" sends already: remove one of them")
	}

	if banOK && nodesOK {
		r.buildLimit(o, s.Limit)
	}
	r.buildBatch(o, s.Batch)
	r.checkUsage(o)
	return r
}

// buildLimit checks the limit and builds the algorithm (and its per-node share).
func (r *Rule) buildLimit(o *conf.Obj, l LimitSpec) {
	lo := o.Obj("limit")
	r.Algorithm = l.Algorithm
	kind, ok := algorithms[l.Algorithm]
	switch {
	case ok:
	case o.Failed("limit") || lo.Failed("algorithm"): // missing, or not a string: said so already
		return
	default:
		lo.Fail("algorithm", "must be one of "+strings.Join(Algorithms(), ", ")+", got "+quote(l.Algorithm))
		return
	}
	r.Leases, r.Learns = kind.Leases, kind.Latency
	if r.Mode == Cluster && kind.LocalOnly {
		o.Fail("mode", r.Algorithm+" is local only: its limit is learned from the latencies this node sees; use mode local on each node")
	}
	if r.Action == Delay && !kind.Waits {
		o.Fail("action", "delay needs an algorithm that can hold requests ("+strings.Join(AlgorithmsWhere(func(k AlgorithmKind) bool { return k.Waits }), ", ")+"); "+r.Algorithm+" cannot")
	}
	params := kind.check(lo, l.Params)
	if p, ok := kind.Param(Window); ok && !kind.Leases {
		r.Window = params[p.Name]
	}
	if o.FailedWithin("limit") {
		return // the parameters are reported already; building would repeat the errors
	}
	r.params = params
	var err error
	if r.Alg, err = r.build(kind, params, 1); err != nil {
		failParam(lo, err)
		return
	}
	if r.Mode == Cluster && r.OnError == FailLocal {
		if r.Fallback, err = r.build(kind, params, r.Nodes); err != nil {
			o.Fail("nodes", "the limit divided by "+strconv.FormatInt(r.Nodes, 10)+" nodes is invalid: "+err.Error())
		}
	}
}

// Check is check for the readers outside this package (the rate limit service's descriptors).
func (k AlgorithmKind) Check(lo *conf.Obj, p Params) Params { return k.check(lo, p) }

// check checks the parameters p as given (each required one present, each in its bounds, no
// two that exclude each other) and returns them resolved, recording errors on lo.
func (k AlgorithmKind) check(lo *conf.Obj, p Params) Params {
	for _, d := range k.Params {
		v, has := p[d.Name]
		switch {
		case !has && d.Required && !lo.Failed(d.Name):
			lo.Fail(d.Name, "is required")
		case !has:
		case d.Type == Count:
			lo.CheckInt(d.Name, v, d.Min, d.Max)
		case d.Type == Duration:
			lo.CheckDuration(d.Name, v, d.Min, d.Max)
		}
		// A flag excludes only when set: "nodelay: false" beside a delay is harmless.
		if _, both := p[d.Excludes]; has && both && (d.Type != Flag || v == 1) {
			lo.Fail(d.Name, "cannot be combined with "+d.Excludes)
		}
	}
	var unknown []string
	for name := range p {
		if _, ok := k.param(name); !ok {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		lo.Fail(name, "is not a parameter of the algorithm")
	}
	return k.Resolve(p)
}

// Resolve returns the parameters p as given with every absent one at its default: Default, or
// the value of Same, at most the value of AtMost.
func (k AlgorithmKind) Resolve(p Params) Params {
	v := make(Params, len(k.Params))
	for _, d := range k.Params {
		v[d.Name] = d.Default
		if x, ok := p[d.Name]; ok {
			v[d.Name] = x
		}
	}
	for _, d := range k.Params {
		if _, ok := p[d.Name]; ok {
			continue
		}
		if d.Same != "" {
			v[d.Name] = v[d.Same]
		}
		if d.AtMost != "" {
			v[d.Name] = min(v[d.Name], v[d.AtMost])
		}
	}
	return v
}

// buildBatch checks the batch and puts the rule's algorithm in batched mode.
func (r *Rule) buildBatch(o *conf.Obj, b *BatchSpec) {
	if b == nil {
		return
	}
	bo := o.Obj("batch")
	if !b.check(bo) {
		return
	}
	switch {
	case r.Mode != Cluster:
		o.Fail("batch", "applies only to cluster mode: a local rule already decides in this process")
	case r.Action == Delay:
		o.Fail("batch", "cannot be combined with action delay: a node spending batched units cannot hold requests")
	case r.Alg == nil:
		// the limit's errors are reported already
	default:
		if a := b.wrap(o, r.Alg, r.Algorithm); a != nil {
			r.Alg = a
		}
	}
}

// check checks the batch's bounds, recording errors on bo.
func (b *BatchSpec) check(bo *conf.Obj) bool {
	n := len(bo.Errors().List)
	if b.Min != 0 {
		bo.CheckInt("min", b.Min, batchBounds[0], batchBounds[1])
	}
	bo.CheckInt("max", b.Max, batchBounds[0], batchBounds[1])
	bo.CheckDuration("max_age", b.MaxAge, spanBounds[0], spanBounds[1])
	if len(bo.Errors().List) > n {
		return false
	}
	if b.min() > b.Max {
		bo.Fail("min", "must be at most max ("+strconv.FormatInt(b.Max, 10)+"), got "+strconv.FormatInt(b.Min, 10))
		return false
	}
	return true
}

func (b *BatchSpec) min() int64 { return max(b.Min, 1) }

// wrap returns alg (of the algorithm named name) in batched mode, or nil with the reason
// recorded on o, the object holding the batch.
func (b *BatchSpec) wrap(o *conf.Obj, alg algos.Algorithm, name string) algos.Algorithm {
	l, ok := alg.(algos.Batcher)
	if !ok {
		o.Fail("batch", name+" cannot be batched (batched mode takes "+strings.Join(AlgorithmsWhere(AlgorithmKind.Batches), ", ")+")")
		return nil
	}
	batching, err := l.Batching(b.MaxAge)
	if err != nil {
		switch pe, ok := err.(*algos.ParamError); {
		case ok && pe.Param == "max_age":
			o.Obj("batch").Fail("max_age", pe.Reason)
		case ok:
			o.Fail("batch", name+" cannot be batched: "+pe.Param+" "+pe.Reason)
		default:
			o.Fail("batch", err.Error())
		}
		return nil
	}
	return &Batched{Algorithm: alg, Batching: batching, Min: b.min(), Max: b.Max}
}

// build checks m's patterns and compiles them, recording errors on o; an exception (top false)
// has no exceptions of its own.
func (m Match) build(o *conf.Obj, top bool) Match {
	m.Hosts = append([]string(nil), m.Hosts...) // compile lowers them: the Spec stays as given
	m.compile(o.Fail)
	if !top {
		if len(m.Not) > 0 {
			o.Fail("not", "an exception cannot hold exceptions: list them all in the rule's not")
		}
		return m
	}
	not := m.Not
	m.Not = make([]Match, len(not))
	empty := false
	for i, n := range not {
		m.Not[i] = n.build(o.Obj("not["+strconv.Itoa(i)+"]"), false)
		empty = empty || n.IsEmpty()
	}
	if empty && !o.FailedWithin("not") {
		o.Fail("not", "an empty exception matches every request: the rule would never apply")
	}
	return m
}
