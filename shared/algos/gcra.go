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
// admits exactly 3 per second, not 3.000003. So are T and τ, and every product of a count and a
// time is divided at once (mulDiv): any Rate and Burst up to MaxCount work with any Period up to
// MaxSpan, as long as τ = Burst·Period/Rate, the time the whole bucket takes to refill, is at
// most MaxSpan too. Cost 0 peeks. A partial request takes min(n, ⌊(τ − (TAT − now))/T⌋) units.
// The values stay exact in Lua as long as now + τ + MaxWait < 2^53 (now below 2^52 µs, the year
// 2112).
//
// State: W[0] = tat (µs), W[1] = frac (0 ≤ frac < Rate).
type GCRA struct {
	rate, period, burst int64
	t, tau              span  // T and τ, over Rate
	whole               int64 // T in µs when it is a whole number (Rate divides Period), else 0
	script              Script
}

// GCRAMaxBurst returns the largest burst NewGCRA takes at rate units per period µs (both
// valid): the bucket refills in burst × period / rate, at most MaxSpan.
func GCRAMaxBurst(rate, period int64) int64 {
	most, _ := mulDiv(MaxSpan, rate, period)
	return min(most, MaxCount)
}

// NewGCRA returns a token bucket of burst units refilled at rate units per period µs.
func NewGCRA(rate, period, burst int64) (*GCRA, error) {
	const name = "token_bucket"
	if err := count(name, "rate", rate); err != nil {
		return nil, err
	}
	if err := duration(name, "period", period); err != nil {
		return nil, err
	}
	if err := count(name, "burst", burst); err != nil {
		return nil, err
	}
	tau := spanOf(burst, period, rate)
	if tau.ceil() > MaxSpan {
		return nil, paramError(name, "burst", "the bucket would take burst × period / rate = "+about(tau.ceil())+
			" to refill, more than 10 years: lower burst or raise rate")
	}
	g := &GCRA{rate: rate, period: period, burst: burst, t: spanOf(1, period, rate), tau: tau}
	if period%rate == 0 {
		g.whole = period / rate
	}
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
	x := span{tat - now, frac} // TAT − now
	d := Decision{Limit: g.burst, ResetAfter: x.ceil()}
	d.TTL = d.ResetAfter
	// Remaining is worked out only where it is reported: each costs divisions.
	if r.Partial {
		if avail := g.remaining(x); n > avail {
			n = avail
			if n == 0 {
				d.RetryAfter = x.add(g.t, g.rate).ceilOver(g.tau) // until one unit fits
				return d
			}
		}
	}
	if n > g.burst {
		d.Remaining = g.remaining(x)
		d.RetryAfter = Never
		return d
	}
	cost := g.t // n·T; one unit, the usual request, needs no division
	if n != 1 {
		cost = spanOf(n, g.period, g.rate)
	}
	next := x.add(cost, g.rate) // TAT' − now
	if g.tau.less(next) {
		wait := next.ceilOver(g.tau)
		if wait > r.MaxWait {
			d.Remaining = g.remaining(x)
			d.RetryAfter = wait
			return d
		}
		d.Delay = wait
	}
	d.Allowed = true
	d.Granted = n
	d.Remaining = g.remaining(next)
	d.ResetAfter = next.ceil()
	d.TTL = d.ResetAfter
	if n > 0 && !r.DryRun {
		st.W[0], st.W[1] = now+next.us, next.frac
	}
	return d
}

// remaining returns the whole units the bucket holds when TAT − now is x: ⌊(τ − x)/T⌋, 0 when
// x > τ. With T a whole number of µs, every span is (no fraction) and one division does, or none
// when T is 1 µs: a decision's other arithmetic costs less than the two of the general case.
func (g *GCRA) remaining(x span) int64 {
	if g.tau.less(x) {
		return 0
	}
	if g.whole > 0 && x.frac == 0 {
		if g.whole == 1 {
			return g.tau.us - x.us
		}
		return (g.tau.us - x.us) / g.whole
	}
	return g.tau.sub(x, g.rate).units(g.period, g.rate)
}
