package algos

// GCRA is a token bucket in the form of the generic cell rate algorithm: Rate units per Period
// refill a bucket that holds Burst units and starts full.
//
// With emission interval T = Period/Rate and tolerance τ = Burst·T, the state is the theoretical
// arrival time TAT, and a request of cost n at time now is decided as
//
//	TAT  = max(TAT, now);  TAT' = TAT + n·T
//	TAT' − now > τ  → deny (or, if TAT' − τ − now ≤ MaxWait, admit with that delay);
//	                  RetryAfter = TAT' − τ − now, Never if n > Burst; state unchanged
//	otherwise       → admit; store TAT'
//	Remaining = ⌊(τ − (TAT' − now))/T⌋,  ResetAfter = ⌈TAT' − now⌉
//
// T need not be a whole number of µs: TAT is kept exactly as tat + frac/Rate µs, so 3 per second
// admits exactly 3 per second, not 3.000003. Cost 0 peeks. A partial request takes
// min(n, ⌊(τ − (TAT − now))/T⌋) units.
//
// State: W[0] = tat (µs), W[1] = frac (0 ≤ frac < Rate).
type GCRA struct {
	rate, period, burst int64
	bp                  int64 // Burst·Period: τ in units of 1/Rate µs
	far                 int64 // TAT − now beyond which (TAT − now)·Rate could pass 2^53/4
	script              Script
}

// NewGCRA returns a token bucket of burst units refilled at rate units per period µs.
func NewGCRA(rate, period, burst int64) (*GCRA, error) {
	const name = "gcra"
	if err := positive(name, "rate", rate); err != nil {
		return nil, err
	}
	if err := positive(name, "period", period); err != nil {
		return nil, err
	}
	if err := positive(name, "burst", burst); err != nil {
		return nil, err
	}
	// (TAT' − now)·Rate reaches 2·Burst·Period + Rate: keep it below 2^53.
	const bound = MaxSafe / 4
	if err := atMost(name, "rate", rate, bound); err != nil {
		return nil, err
	}
	if err := atMost(name, "period", period, bound); err != nil {
		return nil, err
	}
	if burst > bound/period {
		return nil, paramError(name, "burst", "burst × period must be at most "+itoa(bound)+" µs")
	}
	g := &GCRA{rate: rate, period: period, burst: burst, bp: burst * period, far: bound / rate}
	g.script = Script{Name: name, Args: []int64{rate, period, burst}, Limit: burst}
	return g, nil
}

// Script implements Algorithm.
func (g *GCRA) Script() Script { return g.script }

// Decide implements Algorithm.
func (g *GCRA) Decide(st *State, r Request) Decision {
	now, n := r.Now, r.Cost
	tat, frac := st.W[0], st.W[1]
	if tat < now {
		tat, frac = now, 0
	}
	d := Decision{Limit: g.burst}
	ahead := tat - now
	if ahead > g.far {
		// Only a clock that went backwards or very long delays leave TAT this far ahead: deny
		// without touching the state, with a wait bounded from above and no overflow.
		d.ResetAfter = ahead + min(frac, 1)
		d.TTL = d.ResetAfter
		d.RetryAfter = Never
		if n <= g.burst {
			d.RetryAfter = ahead - g.bp/g.rate + ceilDiv(max(n, 1)*g.period, g.rate)
		}
		return d
	}
	used := ahead*g.rate + frac // TAT − now, in 1/Rate µs
	if r.Partial {
		if avail := max(0, (g.bp-used)/g.period); n > avail {
			n = avail
			if n == 0 {
				return g.deny(used, ceilDiv(used+g.period-g.bp, g.rate))
			}
		}
	}
	if n > g.burst {
		return g.deny(used, Never)
	}
	next := used + n*g.period // TAT' − now
	if next > g.bp {
		wait := ceilDiv(next-g.bp, g.rate)
		if wait > r.MaxWait {
			return g.deny(used, wait)
		}
		d.Delay = wait
	}
	q, rem := next/g.rate, next%g.rate // one division: the hot path has two
	d.Allowed = true
	d.Granted = n
	d.Remaining = max(0, (g.bp-next)/g.period)
	d.ResetAfter = q + min(rem, 1)
	d.TTL = d.ResetAfter
	if n > 0 {
		st.W[0] = now + q
		st.W[1] = rem
	}
	return d
}

// deny reports a denial, the state unchanged, with TAT − now = used/Rate µs.
func (g *GCRA) deny(used, retry int64) Decision {
	reset := ceilDiv(used, g.rate)
	return Decision{
		Limit:      g.burst,
		Remaining:  max(0, (g.bp-used)/g.period),
		ResetAfter: reset,
		RetryAfter: retry,
		TTL:        reset,
	}
}
