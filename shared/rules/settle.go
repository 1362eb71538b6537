package rules

import (
	"context"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/usage"
)

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
// estimate under: cost(rule) is the cost read from the response, or an error, when the rule's
// fallback is charged, or, if more, the cost cost returns with the error (what a stream cut short
// counted) or the estimate: a usage that cannot be read never gives units back. Call it once the response has ended, whatever its outcome (an upstream error, a
// client gone): nothing is free. It is a no-op for a result without reservations, and settles
// each reservation once.
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
		if err != nil { // never less than what was reserved: an unreadable usage gives nothing back
			n = min(max(n, rv.fallback, rv.estimate), algos.MaxCount)
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

// Reservation is an estimate a result reserved under a usage rule, for a front end that settles
// it through another process than the one that admitted it (the Envoy filter through dianad's
// POST /v1/settle): Reserved carries it out, Resume brings it back as a result to Settle.
type Reservation struct {
	Rule     *Rule
	Key      string
	Estimate int64 // 0 when a fail policy admitted the request
	Fallback int64 // what a response whose usage cannot be read is charged
	Age      int64 // µs since admission, as Reserved saw it
	// Format is the provider format the response is to be read in: "" for a header or body
	// rule, usage.FormatAuto for a rule of that format on a path that says nothing (the reader
	// then picks it by the response's marks).
	Format string
}

// Reserved returns the reservations of res, to settle later with Resume and Settle.
func (e *Engine) Reserved(res *Result) []Reservation {
	now := e.clock()
	out := make([]Reservation, len(res.reserved))
	for i, rv := range res.reserved {
		out[i] = Reservation{Rule: rv.rule, Key: rv.key, Estimate: rv.estimate, Fallback: rv.fallback, Age: now - rv.at}
		if u := rv.rule.Usage; u.ReadsFormat() {
			m := Meter{path: res.llm.Path}
			out[i].Format = usage.FormatAuto
			if f := m.format(u); f != nil {
				out[i].Format = f.Name
			}
		}
	}
	return out
}

// Resume returns a result holding the reservations rv, which Settle settles, as if admitted rv's
// Age ago.
func (e *Engine) Resume(rv []Reservation) Result {
	now := e.clock()
	var res Result
	for _, x := range rv {
		res.reserved = append(res.reserved, reservation{rule: x.Rule, key: x.Key, estimate: x.Estimate, fallback: x.Fallback, at: now - x.Age})
	}
	return res
}
