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
	Usage *Usage   // the cost comes from the response; admission takes its estimate (see Usage)

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

// DecodeRule reads one rule object and builds it (ReadSpec, then Spec.Build); errors are
// recorded on o with their paths.
func DecodeRule(o *conf.Obj) *Rule {
	errs := o.Errors()
	n := len(errs.List)
	s := ReadSpec(o)
	if o.NotAnObject() {
		return &Rule{}
	}
	r := s.Build(o.Sink())
	sortErrors(errs.List[n:], o.Path(""))
	return r
}

// specFields are a rule's fields in the order of its grammar, which its errors are reported in.
var specFields = []string{"name", "unlimited", "match", "by", "cost", "usage", "mode", "action", "max_delay", "ban",
	"on_error", "nodes", "reply", "limit", "batch"}

// sortErrors puts the errors of one rule (their paths starting with at) in the order of its
// grammar, unknown fields last in their object, as an operator reads the rule: the reader's
// errors come before Build's otherwise. An insertion sort: a rule has a few errors, and the
// filter is built with TinyGo, where a generic sort adds kilobytes.
func sortErrors(list []conf.FieldError, at string) {
	rank := func(e conf.FieldError) int {
		field, _, _ := strings.Cut(strings.TrimPrefix(e.Path, at), ".")
		field, _, _ = strings.Cut(field, "[")
		r := 2 * len(specFields)
		for i, f := range specFields {
			if f == field {
				r = 2 * i
			}
		}
		if e.Reason == conf.UnknownField {
			r++
		}
		return r
	}
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && rank(list[j]) < rank(list[j-1]); j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
}

// ReadSpec reads one rule object into a Spec: what a document can get wrong that a Spec cannot
// hold (a value's type, an enum's name, a client block's syntax, an unknown field, a field the
// rule's kind rules out) is recorded on o; the values are Build's to check. A field in error
// keeps its default.
func ReadSpec(o *conf.Obj) Spec {
	s := NewSpec()
	s.Unlimited = o.Bool("unlimited", false)
	if s.Unlimited {
		o.Require("name")
	} else {
		o.Require("name", "limit")
	}
	s.Name = o.String("name", "")
	s.Match = readMatch(o.Obj("match"), true)
	if s.Unlimited {
		for _, k := range unlimitedRefuses {
			o.Refuse(k, "does not apply to an unlimited rule, which counts nothing (remove it, or unlimited)")
		}
		o.Done()
		return s
	}
	s.By = o.Strings("by")
	s.Cost = o.Int("cost", s.Cost, costBounds[0], costBounds[1])
	s.Usage = readUsage(o)
	s.Mode = Mode(o.EnumIndex("mode", ModeNames[:]...))
	s.Action = Action(o.EnumIndex("action", ActionNames[:]...))
	s.MaxDelay = o.Duration("max_delay", s.MaxDelay, spanBounds[0], spanBounds[1])
	s.Ban = o.Duration("ban", s.Ban, spanBounds[0], spanBounds[1])
	s.OnError = FailPolicy(o.EnumIndex("on_error", FailPolicyNames[:]...))
	s.Nodes = o.Int("nodes", s.Nodes, nodesBounds[0], nodesBounds[1])

	rep := o.Obj("reply")
	s.Reply.Status = int(rep.Int("status", int64(s.Reply.Status), statusBounds[0], statusBounds[1]))
	s.Reply.Message = rep.String("message", s.Reply.Message)
	s.Reply.Headers = decodeHeaderStyle(rep)
	s.Reply.Legacy = rep.Bool("legacy_headers", s.Reply.Legacy)
	rep.Done()

	s.Limit = readLimit(o)
	s.Batch = ReadBatch(o)
	o.Done()
	return s
}

// Warnings returns what a front end should log of r, accepted as it is, each at its field's
// path under at (the rule's own, such as "rules[2]"): an algorithm that does not hold its limit
// when split among nodes with on_error local (AlgorithmKind.Unsplit).
func (r *Rule) Warnings(at string) []conf.FieldError {
	k, _ := Algorithm(r.Algorithm)
	if r.Mode != Cluster || r.OnError != FailLocal || k.Unsplit == "" {
		return nil
	}
	path := "on_error"
	if at != "" {
		path = at + ".on_error"
	}
	return []conf.FieldError{{Path: path, Reason: k.Unsplit}}
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
var unlimitedRefuses = []string{"by", "cost", "usage", "limit", "mode", "action", "max_delay", "ban", "on_error", "nodes", "batch", "reply"}

// readLimit reads the limit object: the algorithm, and the parameters it declares (those of an
// unknown algorithm are not read: Build reports the algorithm).
func readLimit(o *conf.Obj) LimitSpec {
	lo := o.Obj("limit")
	if !o.Has("limit") || o.Failed("limit") { // missing, null or not an object: said so already
		return LimitSpec{}
	}
	lo.Require("algorithm")
	l := LimitSpec{Algorithm: lo.String("algorithm", "")}
	kind, ok := algorithms[l.Algorithm]
	if !ok {
		return l
	}
	l.Params = kind.ReadParams(lo)
	lo.Done()
	return l
}

// ReadParams reads the parameters k declares from lo, each by its type and in its bounds: a
// parameter absent, null or in error is absent from the result, so that it takes its default
// and is not checked again. Other fields of lo are left unread.
func (k AlgorithmKind) ReadParams(lo *conf.Obj) Params {
	p := Params{}
	for _, d := range k.Params {
		n := len(lo.Errors().List)
		var v int64
		switch d.Type {
		case Count:
			v = lo.Int(d.Name, 0, d.Min, d.Max)
		case Duration:
			v = lo.Duration(d.Name, 0, d.Min, d.Max)
		case Flag:
			if lo.Bool(d.Name, false) {
				v = 1
			}
		}
		if lo.Has(d.Name) && !lo.IsNull(d.Name) && len(lo.Errors().List) == n {
			p[d.Name] = v
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

// DecodeMatch reads a match object (methods, paths, hosts, headers, clients, consumers, not)
// and builds it.
func DecodeMatch(o *conf.Obj) Match { return readMatch(o, true).build(o.Sink(), true) }

// readMatch reads a match object; an exception (not) has no exceptions of its own.
func readMatch(o *conf.Obj, top bool) Match {
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
		for _, no := range o.Objs("not") {
			m.Not = append(m.Not, readMatch(no, false))
		}
	} else {
		o.Refuse("not", "an exception cannot hold exceptions: list them all in the rule's not")
	}
	o.Done()
	return m
}
