package rules

import (
	"context"

	"github.com/diana-gw/diana/shared/algos"
)

// Peeked is one rule's answer to a request it was asked as a dry run.
type Peeked struct {
	Rule     *Rule
	Key      string         // the identity of the request under Rule, as its store keys it
	Decision algos.Decision // what the request would get now; a ban shows as a denial
	Err      error          // the store could not decide; Decision is then the fail policy's
}

// Peek asks every rule that applies to in what it would answer now, as a dry run: nothing is
// taken, no ban starts, and Options.Observe is not called. It is for operators looking at an
// identity's state; ok is false for a path the engine refuses (see Result.BadPath). Like Check,
// it rewrites in.Path into its normal form. A request an unlimited rule exempts gets that rule
// alone, allowed, with no key.
func (e *Engine) Peek(ctx context.Context, in *Input) (out []Peeked, ok bool) {
	p, ok := e.path.Normal(in.Path)
	if !ok {
		return nil, false
	}
	in.Path, in.Method = p, NormalMethod(in.Method)
	if r := e.exempted(in); r != nil {
		return []Peeked{{Rule: r, Decision: algos.Decision{Allowed: true}}}, true
	}
	var ops []Op
	var key []byte
	for _, r := range e.limits {
		if !r.Match.Matches(in) {
			continue
		}
		key = r.key(key, in)
		op := NewOp(r, string(key), algos.Request{Cost: r.Cost, DryRun: true})
		if r.Leases && r.Cost > 0 {
			op.Req.ID = e.leaseID()
		}
		ops = append(ops, op)
	}
	ptrs := make([]*Op, len(ops))
	for i := range ops {
		ptrs[i] = &ops[i]
	}
	e.decide(ctx, &scratch{}, ptrs)
	out = make([]Peeked, len(ops))
	for i, op := range ops {
		out[i] = Peeked{Rule: op.rule, Key: op.Key, Decision: op.Dec, Err: op.Err}
	}
	return out, true
}

// Rule returns the engine's rule named name, or nil.
func (e *Engine) Rule(name string) *Rule {
	for _, r := range e.rules {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// OwnsKey reports whether key is an identity of r, as Check and Peek key them: the rule's name,
// alone for a global rule or followed by '|' and the dimensions' values.
func (r *Rule) OwnsKey(key string) bool {
	return len(key) >= len(r.Name) && key[:len(r.Name)] == r.Name && (len(key) == len(r.Name) || key[len(r.Name)] == '|')
}
