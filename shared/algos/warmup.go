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
// for a denied one. Guava serves any cost; here a cost above Limit = ⌊max⌋ = ⌊W·Rate/Period⌋,
// the bucket's size, is denied with RetryAfter = Never (a partial request takes min(n, Limit)).
//
// Units. With r = Rate/g and p = Period/g (g = gcd), a tick is 1/r µs and S = p ticks: s is kept
// in ticks (s·p), max = D = W·r ticks, the threshold is D/2, nextFree is nf + frac/r µs. Refill,
// n·S and the stored permits are exact; the trapezoid, in half-ticks with A = 2·s·p − D and
// Q = min(A, 2n·p), is Q·(2A − Q)/(2D) ticks, rounded up (computed exactly by warmMulDivCeil):
// each request pushes nextFree at least as far as Guava's real-valued cost from the same state,
// and by less than one tick more (Guava truncates to whole µs instead). W·r ≤ 2^44 keeps every
// intermediate below 2^53.
//
// Decision: Limit = ⌊max⌋, what a cold limiter stores; Remaining = Limit if a request could
// proceed now without waiting (nextFree ≤ now: a single request may then take up to Limit),
// else 0; ResetAfter = ⌈nextFree − now⌉, when Remaining is back to Limit; TTL = until nextFree
// has passed and s is back to max, when the state decides as an empty one. Cost 0 peeks: always
// allowed, no Delay, nothing changes.
//
// State: W[0] = nf (µs), W[1] = frac (0 ≤ frac < r), W[2] = D − s·p (ticks): all zero is cold.
type WarmUp struct {
	r, p, w int64 // Rate and Period reduced by their gcd; W
	d       int64 // W·r: max stored permits, in ticks
	limit   int64 // ⌊max⌋
	script  Script
}

// warmMaxTicks bounds W·r: the trapezoid's products then stay below 2^53 (see warmMulDivCeil).
const warmMaxTicks = 1 << 44

// NewWarmUp returns a limiter of rate units per period µs that warms up over warmup µs.
func NewWarmUp(rate, period, warmup int64) (*WarmUp, error) {
	const name = "warmup"
	if err := positive(name, "rate", rate); err != nil {
		return nil, err
	}
	if err := positive(name, "period", period); err != nil {
		return nil, err
	}
	if err := positive(name, "warmup", warmup); err != nil {
		return nil, err
	}
	g, b := rate, period
	for b != 0 {
		g, b = b, g%b
	}
	r, p := rate/g, period/g
	if warmup > warmMaxTicks/r {
		return nil, paramError(name, "warmup", "warmup × rate/gcd(rate, period) must be at most "+itoa(warmMaxTicks))
	}
	d := warmup * r
	if d < p {
		return nil, paramError(name, "warmup", "must be at least one stable interval, period/rate")
	}
	u := &WarmUp{r: r, p: p, w: warmup, d: d, limit: d / p}
	u.script = Script{Name: name, Args: []int64{r, p, warmup}, Limit: u.limit}
	return u, nil
}

// Script implements Algorithm.
func (u *WarmUp) Script() Script { return u.script }

// Decide implements Algorithm.
func (u *WarmUp) Decide(st *State, r Request) Decision {
	now, n := r.Now, r.Cost
	nf, frac, deficit := st.W[0], st.W[1], st.W[2]
	d := Decision{Limit: u.limit}
	wait := u.wait(nf, frac, now)
	if wait == 0 {
		d.Remaining = u.limit
	}
	d.ResetAfter = wait
	d.TTL = u.ttl(nf, frac, deficit, now)
	if r.Partial && n > u.limit {
		n = u.limit
	}
	if n > u.limit {
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
		// Resync: the stored permits grow by one per S of time past nextFree (the clamp keeps
		// the product small; a clock that went back has wait > 0 and never gets here).
		if now-nf > u.w {
			deficit = 0
		} else {
			deficit = max(0, deficit-((now-nf)*u.r-frac))
		}
		nf, frac = now, 0
	}
	stable := n * u.p
	t := frac + stable
	if a := u.d - 2*deficit; a > 0 { // stored permits above the threshold, in half-ticks
		q := min(a, 2*stable)
		t += warmMulDivCeil(q, 2*a-q, 2*u.d)
	}
	deficit += min(stable, u.d-deficit)
	nf, frac = nf+t/u.r, t%u.r
	st.W[0], st.W[1], st.W[2] = nf, frac, deficit
	d.Remaining = 0 // nextFree > now: the next request must wait
	d.ResetAfter = u.wait(nf, frac, now)
	d.TTL = u.ttl(nf, frac, deficit, now)
	return d
}

// wait returns ⌈nextFree − now⌉, or 0 when nextFree ≤ now.
func (u *WarmUp) wait(nf, frac, now int64) int64 {
	if nf < now { // then nf + frac/r < now, since frac < r
		return 0
	}
	return nf - now + min(frac, 1)
}

// ttl returns how long until nextFree has passed and the stored permits are back to max.
func (u *WarmUp) ttl(nf, frac, deficit, now int64) int64 {
	return max(0, nf-now+ceilDiv(frac+deficit, u.r))
}

// warmMulDivCeil returns ⌈x·y/d⌉ for 0 ≤ x < 2^49 and 0 ≤ y ≤ d ≤ 2^45 without an intermediate
// reaching 2^53: x is taken 7 bits at a time, keeping x·y = q·d + r with r < d, so each step
// stays below 2^7·d + 2^7·d ≤ 2^53.
func warmMulDivCeil(x, y, d int64) int64 {
	q, r := int64(0), int64(0)
	for sh := 42; sh >= 0; sh -= 7 {
		t := r*128 + (x>>sh&127)*y
		q, r = q*128+t/d, t%d
	}
	return q + min(r, 1)
}
