package algos

// Values of NewLeakyBucket's delay parameter for nginx's two usual configurations.
const (
	// DelayAll delays every excess request: nginx's limit_req without delay= or nodelay.
	DelayAll int64 = 0
	// NoDelay forwards every request within the burst at once: nginx's nodelay. Any delay ≥ burst
	// means the same.
	NoDelay int64 = MaxSafe
)

// LeakyBucket is nginx's limit_req: requests leak out at Rate per Period µs; up to Burst requests
// in excess of that rate are admitted and queued, the first Delay of them forwarded at once and the
// others held until they conform; the rest are rejected.
//
// nginx keeps an excess e (requests, to 1/1000) and the time of the last admitted request, and
// decides a request by
//
//	e' = max(0, e − rate·(now − last) + 1);  e' > burst → reject, nothing stored
//	otherwise store e' and last = now; hold the request (e' − delay)/rate if e' > delay
//
// where a fresh key starts with e' = 0. It truncates rate·ms/1000 on every call, which loses
// leakage when requests come often. Here the same rule is kept exactly, as the time Z = last +
// (e+1)·T (T = Period/Rate) from which a request is decided as for a fresh key; then
// e' = (Z' − now)/T − 1 and, with C = (Burst+1)·T and F = (Delay+1)·T,
//
//	Z  = max(Z, now);  Z' = Z + n·T
//	Z' − now > C → reject: RetryAfter = Z' − now − C, Never if n > Burst+1; state unchanged
//	otherwise    → admit: store Z'; Delay = max(0, ⌈Z' − now − F⌉) (0 for a peek)
//	Limit = Burst+1,  Remaining = ⌊(C − (Z' − now))/T⌋,  ResetAfter = TTL = ⌈Z' − now⌉
//
// (a rejection reports Remaining and ResetAfter from Z). This is nginx's rule for a request of
// cost 1; a cost n counts as n requests arriving together (never cheaper than n single ones).
// Remaining is the number of units that would still pass without rejection; ResetAfter is the
// time until a request would again be the first of a fresh key (nginx's excess, to which a
// request adds 1, reaches 0 one T earlier). The delay is ⌈(e' − Delay)·T⌉: the request is
// forwarded when its excess has drained to Delay. So with rate 1 r/s and burst 5, seven requests
// at once pass with delays 0, 1, …, 5 s and the seventh is rejected; with delay 2 the delays are
// 0, 0, 0, 1, 2, 3 s (the on-time request and 2 excess ones pass at once); with NoDelay all six
// pass at once. Burst 0 admits one request per T and rejects the rest.
//
// Request.MaxWait is not used: as in nginx the burst is the queue and Delay is mandatory shaping,
// not an offer to wait. A caller that cannot hold requests configures NoDelay. A partial request
// takes min(n, Remaining) units. A clock that goes back never lowers Z, so it only takes capacity
// away.
//
// Z is kept exactly, as tat + frac/Rate µs, so leakage is never truncated and 3 per second is
// exactly 3 per second; T, C and F are kept exactly too, and every product of a count and a time
// is divided at once (mulDiv). Bounds: Rate ≤ MaxCount, Period ≤ MaxSpan, Burst < MaxCount, and
// C = (Burst+1)·Period/Rate, the time a full bucket takes to drain, at most MaxSpan.
//
// State: W[0] = tat (µs), W[1] = frac (0 ≤ frac < Rate).
type LeakyBucket struct {
	rate, period, burst, delay int64
	t, c, f                    span // T, C = (Burst+1)·T and F = (Delay+1)·T, over Rate
	script                     Script
}

// LeakyBucketMaxBurst returns the largest burst NewLeakyBucket takes at rate units per period
// µs (both valid), −1 if none: a full bucket drains in (burst + 1) × period / rate, at most
// MaxSpan.
func LeakyBucketMaxBurst(rate, period int64) int64 {
	most, _ := mulDiv(MaxSpan, rate, period)
	return min(most, MaxCount) - 1
}

// NewLeakyBucket returns nginx's limit_req with rate=rate/period, burst=burst and delay=delay:
// DelayAll (0) for nginx's default, NoDelay (or any value ≥ burst) for nodelay.
func NewLeakyBucket(rate, period, burst, delay int64) (*LeakyBucket, error) {
	const name = "leaky_bucket"
	if err := count(name, "rate", rate); err != nil {
		return nil, err
	}
	if err := duration(name, "period", period); err != nil {
		return nil, err
	}
	if burst < 0 {
		return nil, paramError(name, "burst", "must be at least 0, got "+itoa(burst))
	}
	if err := atMost(name, "burst", burst, MaxCount-1); err != nil {
		return nil, err
	}
	if delay < 0 {
		return nil, paramError(name, "delay", "must be at least 0, got "+itoa(delay))
	}
	delay = min(delay, burst)
	c := spanOf(burst+1, period, rate)
	if c.ceil() > MaxSpan {
		return nil, paramError(name, "burst", "a full bucket would take (burst + 1) × period / rate = "+about(c.ceil())+
			" to drain, more than 10 years: lower burst or raise rate")
	}
	l := &LeakyBucket{
		rate: rate, period: period, burst: burst, delay: delay,
		t: spanOf(1, period, rate), c: c, f: spanOf(delay+1, period, rate),
	}
	l.script = Script{Name: name, Args: []int64{rate, period, burst, delay}, Limit: burst + 1}
	return l, nil
}

// Script implements Algorithm.
func (l *LeakyBucket) Script() Script { return l.script }

// Holds reports whether the bucket admits some request with a delay to be held (Delay < Burst):
// nginx's limit_req without nodelay. A caller that cannot hold requests must refuse such a
// bucket rather than forward what it was told to hold.
func (l *LeakyBucket) Holds() bool { return l.delay < l.burst }

// Decide implements Algorithm.
func (l *LeakyBucket) Decide(st *State, r Request) Decision {
	now, n := r.Now, r.Cost
	tat, frac := st.W[0], st.W[1]
	if tat < now {
		tat, frac = now, 0
	}
	x := span{tat - now, frac} // Z − now
	d := Decision{Limit: l.burst + 1, ResetAfter: x.ceil()}
	d.TTL = d.ResetAfter
	if !l.c.less(x) {
		d.Remaining = l.c.sub(x, l.rate).units(l.period, l.rate)
	}
	if r.Partial && n > d.Remaining {
		n = d.Remaining
		if n == 0 {
			d.RetryAfter = x.add(l.t, l.rate).ceilOver(l.c) // until one unit fits
			return d
		}
	}
	if n > l.burst+1 {
		d.RetryAfter = Never
		return d
	}
	next := x.add(spanOf(n, l.period, l.rate), l.rate) // Z' − now
	if l.c.less(next) {
		d.RetryAfter = next.ceilOver(l.c)
		return d
	}
	d.Allowed = true
	d.Granted = n
	if n > 0 && l.f.less(next) {
		d.Delay = next.ceilOver(l.f)
	}
	d.Remaining = l.c.sub(next, l.rate).units(l.period, l.rate)
	d.ResetAfter = next.ceil()
	d.TTL = d.ResetAfter
	if n > 0 && !r.DryRun {
		st.W[0], st.W[1] = now+next.us, next.frac
	}
	return d
}
