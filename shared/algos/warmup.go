package algos

// WarmUp is a rate limiter that warms up: Guava's SmoothWarmingUp RateLimiter with cold factor 3.
// Its stable rate is Rate units per Period µs, one unit every S = Period/Rate µs. After a rest it
// is cold and spaces units 3·S apart; used continuously, the spacing falls linearly (in stored
// permits) to S, reached after exactly the warm-up period W.
//
// Guava's model: stored permits s, 0 ≤ s ≤ max, and nextFree, when the next request may proceed.
//
//	threshold = 0.5·W/S,  max = threshold + 2W/(S + 3S) = W/S
//	idle: s grows by one per W/max = S µs of time past nextFree, up to max
//	cost(n) = n·S + (S/threshold)·q·(2a − q)   with a = s − threshold (if > 0), q = min(a, n)
//	          (the trapezoid above the threshold, whose interval rises from S to 3S, plus n·S)
//	a request proceeds at nextFree, then nextFree += cost(n) and s −= min(n, s): the next pays
//	tryAcquire(timeout) admits iff nextFree − timeout ≤ now
//
// It starts cold (s = max). Mapped onto a Request: MaxWait is the timeout (0: admitted iff
// nextFree ≤ now); Delay = ⌈nextFree − now⌉ for an admitted request; RetryAfter = ⌈nextFree − now⌉
// for a denied one. Guava serves any cost; here a cost above Cap = max(1, ⌊max⌋) =
// max(1, ⌊W·Rate/Period⌋), the bucket's size, is denied with RetryAfter = Never (a partial request
// takes min(n, Cap)).
//
// Time, not permits. The stored permits are kept as the time c = s·S they took to store (the
// coldness, 0 ≤ c ≤ W), so refill is c += idle time and spending n permits is c −= min(n·S, c),
// whatever the rate. In those terms the trapezoid is, with U = 2c − W (twice the coldness above
// the threshold W/2, if > 0) and V = min(U, 2·n·S),
//
//	cost(n) = n·S + V·(2U − V)/(2W)
//
// S is a whole number of ticks (1/r µs, with r = Rate/g and p = Period/g, g = gcd), and c,
// nextFree and n·S are kept exactly in µs and ticks, products of a count and a time divided at once
// (mulDiv): every Rate up to MaxCount works with every Period and W up to MaxSpan. The trapezoid
// is rounded up: 2U − V to whole µs, then the quotient to a tick. So each request pushes nextFree
// at least as far as Guava's real-valued cost from the same state, and by less than one tick plus
// n·S/W µs more (a millionth of the request's own cost for W = 1 s; Guava truncates to whole µs
// instead). Bounds: Rate ≤ MaxCount; Period, W ≤ MaxSpan; ⌊max⌋ ≤ MaxCount.
//
// Decision: the limiter lets one request go at a time, then spaces the next: Limit = 1;
// Remaining = 1 if a request could proceed now without waiting (nextFree ≤ now; it may take up to
// Cap units), else 0; ResetAfter = ⌈nextFree − now⌉, when the next may go (Remaining back to 1);
// TTL = until nextFree has passed and s is back to max, when the state decides as an empty one.
// Cost 0 peeks: always allowed, no Delay, nothing changes.
//
// State: W[0] = nf (µs), W[1] = frac (ticks, 0 ≤ frac < r), W[2], W[3] = W − c (µs, ticks), the
// warmth: all zero is cold.
type WarmUp struct {
	r, p, w int64 // Rate and Period reduced by their gcd; W
	cap     int64 // max(1, ⌊max⌋): the largest cost
	script  Script
}

// WarmUpMaxWarmup returns the longest warm-up NewWarmUp takes at rate units per period µs (both
// valid): a cold limiter stores ⌊warmup × rate / period⌋ units, at most MaxCount.
func WarmUpMaxWarmup(rate, period int64) int64 {
	return min(mulDivCeil(MaxCount+1, period, rate)-1, MaxSpan)
}

// NewWarmUp returns a limiter of rate units per period µs that warms up over warmup µs.
func NewWarmUp(rate, period, warmup int64) (*WarmUp, error) {
	const name = "warm_up"
	if err := count(name, "rate", rate); err != nil {
		return nil, err
	}
	if err := duration(name, "period", period); err != nil {
		return nil, err
	}
	if err := duration(name, "warmup", warmup); err != nil {
		return nil, err
	}
	g, b := rate, period
	for b != 0 {
		g, b = b, g%b
	}
	r, p := rate/g, period/g
	stored, _ := mulDiv(warmup, r, p)
	if longest, _ := mulDiv(MaxCount+1, p, r); stored > MaxCount {
		return nil, paramError(name, "warmup", "must be at most "+about(longest-1)+" at this rate: a cold limiter stores "+
			"warmup × rate / period units, at most "+itoa(MaxCount))
	}
	u := &WarmUp{r: r, p: p, w: warmup, cap: max(1, stored)}
	u.script = Script{Name: name, Args: []int64{r, p, warmup, u.cap}, Limit: 1}
	return u, nil
}

// Script implements Algorithm.
func (u *WarmUp) Script() Script { return u.script }

// Paced implements Paced: Remaining says whether a request may go now, its state is its
// coldness.
func (u *WarmUp) Paced() {}

// Decide implements Algorithm.
func (u *WarmUp) Decide(st *State, r Request) Decision {
	now, n := r.Now, r.Cost
	nf, h := span{st.W[0], st.W[1]}, span{st.W[2], st.W[3]} // nextFree; the warmth W − c
	d := Decision{Limit: 1}
	wait := u.wait(nf, now)
	if wait == 0 {
		d.Remaining = 1
	}
	d.ResetAfter = wait
	d.TTL = u.ttl(nf, h, now)
	if r.Partial && n > u.cap {
		n = u.cap
	}
	if n > u.cap {
		d.RetryAfter = Never
		return d
	}
	if n == 0 {
		d.Allowed = true // a peek takes nothing, so it never waits
		return d
	}
	if wait > r.MaxWait {
		d.RetryAfter = wait
		return d
	}
	d.Allowed = true
	d.Delay = wait
	d.Granted = n
	if wait == 0 {
		// Resync: the coldness grows by the time past nextFree, up to W (a clock that went back
		// has wait > 0 and never gets here).
		idle := span{now - nf.us, 0}.sub(span{0, nf.frac}, u.r)
		h = h.sub(minSpan(h, idle), u.r)
		nf = span{now, 0}
	}
	w := span{u.w, 0}
	stable := spanOf(n, u.p, u.r) // n·S
	cost := stable
	if twoH := h.add(h, u.r); twoH.less(w) {
		a := w.sub(twoH, u.r)                          // U = 2c − W
		v := minSpan(a, stable.add(stable, u.r))       // V
		g := a.add(a, u.r).sub(v, u.r)                 // 2U − V
		cost = cost.add(u.trapezoid(v, g.ceil()), u.r) //
	}
	h = h.add(minSpan(stable, w.sub(h, u.r)), u.r) // spend min(n·S, c) of the coldness
	nf = nf.add(cost, u.r)
	if !r.DryRun {
		st.W = [4]int64{nf.us, nf.frac, h.us, h.frac}
	}
	d.Remaining = 0 // nextFree > now: the next request must wait
	d.ResetAfter = u.wait(nf, now)
	d.TTL = u.ttl(nf, h, now)
	return d
}

// trapezoid returns v·g/(2W) µs rounded up to a tick, v in µs and ticks, g in whole µs (g ≤ 2W + 1).
func (u *WarmUp) trapezoid(v span, g int64) span {
	w2 := 2 * u.w
	q1, r1 := mulDiv(v.us, g, w2)    // v.us·g = q1·2W + r1
	q2, r2 := mulDiv(v.frac, g, u.r) // v.frac·g/r = q2 + r2/r
	m := r1 + q2                     // the quotient is q1 + (m + r2/r)/(2W)
	q3, r3 := mulDiv(m%w2, u.r, w2)  // (m mod 2W + r2/r)/(2W) µs = (q3 + (r3 + r2)/(2W)) ticks
	return span{q1 + m/w2, 0}.add(span{0, q3 + ceilDiv(r3+r2, w2)}, u.r)
}

// minSpan returns the smaller of a and b.
func minSpan(a, b span) span {
	if b.less(a) {
		return b
	}
	return a
}

// wait returns ⌈nextFree − now⌉, or 0 when nextFree ≤ now.
func (u *WarmUp) wait(nf span, now int64) int64 {
	if nf.us < now { // then nextFree < now, since frac < r
		return 0
	}
	return nf.us - now + min(nf.frac, 1)
}

// ttl returns how long until nextFree has passed and the limiter is cold again (warmth 0).
func (u *WarmUp) ttl(nf, h span, now int64) int64 {
	return max(0, nf.add(h, u.r).ceil()-now)
}
