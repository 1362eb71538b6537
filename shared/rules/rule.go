package rules

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
)

// Rule is one limit: which requests it applies to, what it counts them by, the algorithm, where
// the state lives, and what happens to a request over the limit.
type Rule struct {
	Name  string
	Match Match
	By    []string // dimensions, e.g. ["ip"], ["consumer"], ["ip", "path"], ["header:X-Api-Key"]
	Cost  int64    // units one request takes

	Algorithm string // a registered algorithm name
	Alg       algos.Algorithm
	Leases    bool // Alg holds units until the request ends (Engine.Release)
	Learns    bool // Alg learns its limit from latency (Engine.Finish): Options.Limit reports it

	// Window is the span the rule's limit counts over (its window or period, µs; 0 for a
	// concurrency limit): the headers that name a window state it.
	Window int64

	Mode     Mode
	Action   Action
	MaxDelay int64 // µs a request may be held under ActionDelay
	Ban      int64 // µs an identity is blocked after a denial; 0: no ban

	OnError  FailPolicy      // cluster mode: when Redis cannot decide
	Nodes    int64           // cluster mode: gateway nodes sharing the limit, for FailLocal
	Fallback algos.Algorithm // Alg with the limit divided by Nodes

	Reply Reply

	// Unlimited: the rule counts nothing; a request it matches is limited by no rule (an
	// allowlist). It has a Match and a Name only.
	Unlimited bool

	dims []Dimension

	params Params // the limit's parameters, for FallbackAt (its kind is Algorithm's)
}

// Mode says where a rule's state lives.
type Mode uint8

const (
	Local   Mode = iota // in this process (or this Envoy's shared data)
	Cluster             // in Redis, shared by every node
)

// ModeNames are the config names of the modes, by value.
var ModeNames = [...]string{Local: "local", Cluster: "cluster"}

func (m Mode) String() string { return ModeNames[m] }

// Action says what happens to a request over the limit.
type Action uint8

const (
	Reject Action = iota // deny it at once
	Delay                // hold it up to MaxDelay if the limit admits it by then, else deny
	Shadow               // let it through; only log and count the denial
)

// ActionNames are the config names of the actions, by value.
var ActionNames = [...]string{Reject: "reject", Delay: "delay", Shadow: "shadow"}

func (a Action) String() string { return ActionNames[a] }

// Reply is how a denial is answered.
type Reply struct {
	Status  int         // 429 by default; 503 is common too
	Message string      // in the JSON body
	Headers HeaderStyle // the rate-limit headers on replies (and Retry-After on a denial)
	Legacy  bool        // also Kong's older X-RateLimit-Limit / X-RateLimit-Remaining (not with Structured)
}

// DefaultMessage is the body message of a denial, as Kong words it.
const DefaultMessage = "API rate limit exceeded"

// Decode reads the rules list of a document ("rules" on o), checking every field; errors are
// recorded on o with their paths. Rule names must be unique: they start every key.
func Decode(o *conf.Obj) []*Rule {
	list := o.List("rules")
	rules := make([]*Rule, 0, len(list))
	seen := map[string]bool{}
	for _, ro := range list {
		r := DecodeRule(ro)
		if r.Name != "" && seen[r.Name] { // a missing name is reported once, as missing
			ro.Fail("name", "another rule has the name "+quote(r.Name))
		}
		seen[r.Name] = true
		rules = append(rules, r)
	}
	return rules
}

// DecodeRule reads one rule object.
func DecodeRule(o *conf.Obj) *Rule {
	r := &Rule{}
	r.Unlimited = o.Bool("unlimited", false)
	if r.Unlimited {
		o.Require("name")
	} else {
		o.Require("name", "limit")
	}
	r.Name = o.String("name", "")
	if o.Has("name") && !o.Failed("name") { // else it is missing, null or not a string, and said so
		switch {
		case r.Name == "":
			o.Fail("name", "cannot be empty")
		case len(r.Name) > maxName:
			o.Fail("name", "must be at most "+strconv.Itoa(maxName)+" bytes long, got "+strconv.Itoa(len(r.Name)))
		case !validName(r.Name):
			o.Fail("name", "may hold only letters, digits and . _ - (it starts the keys), got "+quote(r.Name))
		}
	}

	r.Match = DecodeMatch(o.Obj("match"))
	if r.Unlimited {
		r.decodeUnlimited(o)
		return r
	}

	r.By = o.Strings("by")
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
	r.Cost = o.Int("cost", 1, 0, algos.MaxCount)

	r.Mode = Mode(o.EnumIndex("mode", ModeNames[:]...))
	r.Action = Action(o.EnumIndex("action", ActionNames[:]...))
	r.MaxDelay = o.Duration("max_delay", 0, 0, algos.MaxSpan)
	if r.Action == Delay && r.MaxDelay == 0 && !o.Failed("max_delay") {
		o.Fail("max_delay", "is required (above 0) when action is delay")
	}
	r.Ban = o.Duration("ban", 0, 0, algos.MaxSpan)
	r.OnError = FailPolicy(o.EnumIndex("on_error", FailPolicyNames[:]...))
	r.Nodes = o.Int("nodes", 1, 1, 10000)

	rep := o.Obj("reply")
	r.Reply.Status = int(rep.Int("status", 429, 400, 599))
	r.Reply.Message = rep.String("message", DefaultMessage)
	r.Reply.Headers = decodeHeaderStyle(rep)
	r.Reply.Legacy = rep.Bool("legacy_headers", false)
	switch {
	case r.Reply.Legacy && r.Reply.Headers == Structured:
		rep.Fail("legacy_headers", "adds Kong's older X-RateLimit-Limit and X-RateLimit-Remaining to the RateLimit-* headers, "+
			"which headers \"structured\" replaces: remove one of them")
	case r.Reply.Legacy && r.Reply.Headers == Envoy:
		rep.Fail("legacy_headers", "adds X-RateLimit-Limit and X-RateLimit-Remaining, which headers \"envoy\" sends already: remove one of them")
	}
	rep.Done()

	r.decodeLimit(o)
	r.decodeBatch(o)
	o.Done()
	return r
}

// ConsumerFields returns the fields of r that read the request's consumer (a "by" entry,
// match.consumers, an exception's consumers), for a front end that may have no consumer to give.
func (r *Rule) ConsumerFields() []string {
	var fields []string
	for j, d := range r.By {
		if d == "consumer" {
			fields = append(fields, "by["+strconv.Itoa(j)+"]")
		}
	}
	if len(r.Match.Consumers) > 0 {
		fields = append(fields, "match.consumers")
	}
	for k, n := range r.Match.Not {
		if len(n.Consumers) > 0 {
			fields = append(fields, "match.not["+strconv.Itoa(k)+"].consumers")
		}
	}
	return fields
}

// unlimitedRefuses are the fields of a rule that count or answer, which an unlimited rule has none of.
var unlimitedRefuses = []string{"by", "cost", "limit", "mode", "action", "max_delay", "ban", "on_error", "nodes", "batch", "reply"}

// decodeUnlimited checks the rest of an unlimited rule: a match, and no field that counts.
func (r *Rule) decodeUnlimited(o *conf.Obj) {
	if r.Match.IsEmpty() && !o.Failed("match") {
		o.Fail("match", "an unlimited rule exempts the requests it matches from every rule: without a match nothing would be limited")
	}
	for _, k := range unlimitedRefuses {
		o.Refuse(k, "does not apply to an unlimited rule, which counts nothing (remove it, or unlimited)")
	}
	o.Done()
}

// decodeLimit reads the limit object and builds the algorithm (and its per-node share).
func (r *Rule) decodeLimit(o *conf.Obj) {
	lo := o.Obj("limit")
	if !o.Has("limit") || o.Failed("limit") { // missing, null or not an object: said so already
		return
	}
	lo.Require("algorithm")
	r.Algorithm = lo.String("algorithm", "")
	kind, ok := algorithms[r.Algorithm]
	if !ok {
		if lo.Has("algorithm") && !lo.Failed("algorithm") { // else missing or not a string: said so
			lo.Fail("algorithm", "must be one of "+strings.Join(Algorithms(), ", ")+", got "+quote(r.Algorithm))
		}
		return
	}
	r.Leases, r.Learns = kind.Leases, kind.Latency
	if r.Mode == Cluster && kind.LocalOnly {
		o.Fail("mode", r.Algorithm+" is local only: its limit is learned from the latencies this node sees; use mode local on each node")
	}
	if r.Action == Delay && !kind.Waits {
		o.Fail("action", "delay needs an algorithm that can hold requests ("+strings.Join(AlgorithmsWhere(func(k AlgorithmKind) bool { return k.Waits }), ", ")+"); "+r.Algorithm+" cannot")
	}
	errs := len(o.Errors().List)
	params := decodeParams(kind, lo)
	lo.Done()
	if p, ok := kind.Param(Window); ok && !kind.Leases {
		r.Window = params[p.Name]
	}
	if len(o.Errors().List) > errs {
		return // the parameters are already reported; building would repeat the errors
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

// decodeParams reads the parameters of kind from the limit object, recording errors on it.
func decodeParams(kind AlgorithmKind, lo *conf.Obj) Params {
	p := Params{}
	for _, d := range kind.Params {
		if d.Required {
			lo.Require(d.Name)
		}
		switch d.Type {
		case Count:
			p[d.Name] = lo.Int(d.Name, d.Default, d.Min, d.Max)
		case Duration:
			p[d.Name] = lo.Duration(d.Name, d.Default, d.Min, d.Max)
		case Flag:
			p[d.Name] = 0
			if lo.Bool(d.Name, d.Default == 1) {
				p[d.Name] = 1
			}
		}
	}
	for _, d := range kind.Params {
		if d.Same != "" && !lo.Has(d.Name) {
			p[d.Name] = p[d.Same]
		}
		if d.AtMost != "" && !lo.Has(d.Name) {
			p[d.Name] = min(p[d.Name], p[d.AtMost])
		}
		// A flag excludes only when set: "nodelay: false" beside a delay is harmless.
		if d.Excludes != "" && lo.Has(d.Name) && lo.Has(d.Excludes) && (d.Type != Flag || p[d.Name] == 1) {
			lo.Fail(d.Name, "cannot be combined with "+d.Excludes)
		}
	}
	return p
}

// FallbackAt returns Alg with its limit scaled to num/den (0 < num ≤ den), wrapped in the
// rule's ban: the part of the limit one node keeps when it decides alone at a learned share of
// the rule's traffic (store/failover). It is built as Fallback is for den nodes from parameters
// whose counts are multiplied by num: rates stay exact, counts round down to at least 1.
func (r *Rule) FallbackAt(num, den int64) (algos.Algorithm, error) {
	kind, ok := algorithms[r.Algorithm]
	if !ok || r.params == nil {
		return nil, errors.New("rules: rule " + quote(r.Name) + " has no algorithm")
	}
	if num <= 0 || num > den {
		return nil, errors.New("rules: share " + strconv.FormatInt(num, 10) + "/" + strconv.FormatInt(den, 10) + " is not in (0, 1]")
	}
	g := gcd(num, den)
	num, den = num/g, den/g
	p := make(Params, len(r.params))
	for _, d := range kind.Params {
		v := r.params[d.Name]
		if d.Type == Count {
			if v > math.MaxInt64/num {
				return nil, errors.New("rules: " + d.Name + " × " + strconv.FormatInt(num, 10) + " overflows")
			}
			v *= num
		}
		p[d.Name] = v
	}
	return r.build(kind, p, den)
}

// gcd returns the greatest common divisor of a and b (positive).
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// build builds the limit's algorithm for nodes nodes, wrapped in the rule's ban.
func (r *Rule) build(kind AlgorithmKind, p Params, nodes int64) (algos.Algorithm, error) {
	a, err := kind.Build(p, nodes)
	if err != nil || r.Ban == 0 {
		return a, err
	}
	return algorithm(algos.NewBan(a, r.Ban))
}

// failParam records an algorithm's parameter error on the config field it came from.
func failParam(lo *conf.Obj, err error) {
	if pe, ok := err.(*algos.ParamError); ok {
		lo.Fail(pe.Param, pe.Reason)
		return
	}
	lo.Fail("algorithm", err.Error())
}

// maxName bounds rule names, which start every key.
const maxName = 64

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return s != "" && len(s) <= maxName
}

func quote(s string) string { return strconv.Quote(s) }

// DecodeMatch reads a match object (methods, paths, hosts, headers, clients, consumers, not).
func DecodeMatch(o *conf.Obj) Match { return decodeMatch(o, true) }

// decodeMatch reads a match object; an exception (not) has no exceptions of its own.
func decodeMatch(o *conf.Obj, top bool) Match {
	var m Match
	m.Methods = o.Strings("methods")
	m.Paths = o.Strings("paths")
	m.Hosts = o.Strings("hosts")
	names, vals := o.StringMap("headers")
	for i := range names {
		m.Headers = append(m.Headers, HeaderMatch{Name: names[i], Value: vals[i]})
	}
	for i, c := range o.Strings("clients") {
		p, reason := ParseClient(c)
		if reason != "" {
			o.Fail("clients["+strconv.Itoa(i)+"]", reason)
			continue
		}
		m.Clients = append(m.Clients, p)
	}
	m.Consumers = o.Strings("consumers")
	if top {
		errs := len(o.Errors().List)
		empty := false
		for _, no := range o.Objs("not") {
			n := decodeMatch(no, false)
			empty = empty || n.IsEmpty()
			m.Not = append(m.Not, n)
		}
		if empty && len(o.Errors().List) == errs { // else not an object, or wrong: said so
			o.Fail("not", "an empty exception matches every request: the rule would never apply")
		}
	} else {
		o.Refuse("not", "an exception cannot hold exceptions: list them all in the rule's not")
	}
	o.Done()
	m.compile(o.Fail)
	return m
}
