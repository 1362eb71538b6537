package algos

// Ban wraps an algorithm: once the algorithm denies a request of cost > 0, the identity is denied
// everything for Duration µs, whatever the algorithm says. A request during a ban is answered
//
//	Allowed = false, Remaining = 0, with left = State.Ban − now and d the algorithm's decision
//	on the same request, made as a dry run (nothing taken) without a wait:
//	RetryAfter = left if d admits, else max(left, d.RetryAfter) (Never stays Never)
//	ResetAfter = max(left, ResetAfter), TTL = max(left, TTL), of the algorithm's state as it is
//
// so RetryAfter is the real wait: the ban's end, or later if the algorithm would still refuse
// then (its state does not change during the ban, so its answer holds). The denial that starts a
// ban reports RetryAfter and ResetAfter of at least Duration (Never stays Never). The ban is kept in State.Ban (in Redis: a key of its own,
// beside the state, with the same hash tag). When it ends, the algorithm's state carries on as it
// was; a ban never adds capacity. A request during a ban does not look at the algorithm's state,
// so its TTL is only the ban's: stores never shorten a state's life (see Decision.TTL), or the
// window would end with the ban. Duration is at most MaxSpan.
type Ban struct {
	inner  Algorithm
	dur    int64
	script Script
}

// NewBan returns inner with a ban of dur µs after each denial.
func NewBan(inner Algorithm, dur int64) (*Ban, error) {
	if err := duration("ban", "duration", dur); err != nil {
		return nil, err
	}
	s := inner.Script()
	s.Ban = dur
	return &Ban{inner: inner, dur: dur, script: s}, nil
}

// Script implements Algorithm: the inner algorithm's script, told to ban.
func (b *Ban) Script() Script { return b.script }

// Inner returns the algorithm the ban wraps, which decides on the same state without the ban.
func (b *Ban) Inner() Algorithm { return b.inner }

// Decide implements Algorithm.
func (b *Ban) Decide(st *State, r Request) Decision {
	if st.Ban > r.Now && !r.Release { // a ban never keeps a lease from being given back
		// The request waits for the ban and for the algorithm: ask the algorithm, changing
		// nothing, when it would admit this request if the ban were not there.
		left := st.Ban - r.Now
		r.DryRun, r.MaxWait = true, 0
		d := b.inner.Decide(st, r)
		retry := left
		switch {
		case d.Allowed && d.Granted > 0:
			// It would pass at once: only the ban holds it. The admission's ResetAfter and TTL
			// are of a state it did not reach; a peek's are of the state as it is.
			d = b.inner.Decide(st, Request{Now: r.Now, DryRun: true})
		case d.Allowed:
		case d.RetryAfter == Never:
			retry = Never
		default:
			retry = max(left, d.RetryAfter)
		}
		return Decision{Limit: b.script.Limit, ResetAfter: max(left, d.ResetAfter), RetryAfter: retry, TTL: max(left, d.TTL)}
	}
	d := b.inner.Decide(st, r)
	if d.Allowed || r.Cost == 0 || r.Release {
		return d
	}
	if !r.DryRun {
		st.Ban = r.Now + b.dur
	}
	d.Remaining = 0
	d.ResetAfter = max(d.ResetAfter, b.dur)
	if d.RetryAfter != Never {
		d.RetryAfter = max(d.RetryAfter, b.dur)
	}
	d.TTL = max(d.TTL, b.dur)
	return d
}
