package algos

// Ban wraps an algorithm: once the algorithm denies a request of cost > 0, the identity is denied
// everything for Duration µs without consulting the algorithm. A request during a ban is
// answered
//
//	Allowed = false, Remaining = 0, RetryAfter = ResetAfter = State.Ban − now
//
// and the denial that starts a ban reports RetryAfter and ResetAfter of at least Duration (a
// RetryAfter of Never stays Never). The ban is kept in State.Ban (in Redis: a key of its own,
// beside the state, with the same hash tag). When it ends, the algorithm's state carries on as it
// was; a ban never adds capacity.
type Ban struct {
	inner  Algorithm
	dur    int64
	script Script
}

// NewBan returns inner with a ban of dur µs after each denial.
func NewBan(inner Algorithm, dur int64) (*Ban, error) {
	if err := positive("ban", "duration", dur); err != nil {
		return nil, err
	}
	if err := atMost("ban", "duration", dur, MaxSafe/4); err != nil {
		return nil, err
	}
	s := inner.Script()
	s.Ban = dur
	return &Ban{inner: inner, dur: dur, script: s}, nil
}

// Script implements Algorithm: the inner algorithm's script, told to ban.
func (b *Ban) Script() Script { return b.script }

// Decide implements Algorithm.
func (b *Ban) Decide(st *State, r Request) Decision {
	if st.Ban > r.Now && !r.Release { // a ban never keeps a lease from being given back
		left := st.Ban - r.Now
		return Decision{Limit: b.script.Limit, ResetAfter: left, RetryAfter: left, TTL: left}
	}
	d := b.inner.Decide(st, r)
	if d.Allowed || r.Cost == 0 || r.Release {
		return d
	}
	st.Ban = r.Now + b.dur
	d.Remaining = 0
	d.ResetAfter = max(d.ResetAfter, b.dur)
	if d.RetryAfter != Never {
		d.RetryAfter = max(d.RetryAfter, b.dur)
	}
	d.TTL = max(d.TTL, b.dur)
	return d
}
