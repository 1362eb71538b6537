package algos

// Batcher is an algorithm whose units a node may take from a shared store in batches, ahead of
// use, and spend later on its own (batched mode). A batch is taken as a partial request of the
// Batching's algorithm, so it is pre-debited: the shared store never hands out more than that
// algorithm allows.
type Batcher interface {
	Algorithm
	// Batching returns how to batch this algorithm's units with batches spent at most maxAge µs
	// after they were granted; maxAge 0 asks for the algorithm's default.
	Batching(maxAge int64) (*Batching, error)
}

// Batching says how units may be taken ahead of use. Units spent no later than Life(d) µs after
// the grant d of their batch never exceed the batched algorithm's limit, whatever the nodes do.
// (A lease, in Diana, is only ever a concurrency slot held by a request.)
//
// Spending a unit later than it was granted could let it count in the wrong window, so each
// algorithm's batching is chosen to make up for at most MaxAge µs of delay:
//   - fixed window: the same algorithm; units are spent within the window of their grant;
//   - sliding window: likewise (its estimate uses the count of each aligned window); as the
//     estimate counts units from their grant, those held unspent make it refuse a little early;
//   - sliding log: the window is MaxAge longer: units spent in any window W were granted in a
//     window of W + MaxAge, which holds at most Limit of them;
//   - token bucket (GCRA) and leaky bucket: the burst is smaller by ⌈MaxAge·Rate/Period⌉: units
//     spent in any interval x were granted in an interval x + MaxAge, at most
//     Burst' + (x + MaxAge)·Rate/Period ≤ Burst + x·Rate/Period of them.
//
// The cost is under-admission, never over-admission: units granted but not spent in time are
// lost, and the sliding log and the buckets are a little stricter than configured.
type Batching struct {
	Alg    Algorithm // takes the batches (partial requests) in the shared store
	MaxAge int64     // µs a unit may be spent after its grant, at most
	// window > 0: a grant's units must also be spent within the aligned window it counted in,
	// which ends ResetAfter − tail after the grant (tail 0: fixed window; one window: sliding).
	window, tail int64
}

// Life returns how long after a grant with decision d (of l.Alg) its units may be spent; 0 when
// they may not be spent at all.
func (l *Batching) Life(d Decision) int64 {
	if l.window == 0 {
		return l.MaxAge
	}
	return max(0, min(l.MaxAge, d.ResetAfter-l.tail))
}

// Refund returns the algorithm that gives back to the shared store units of a grant of l.Alg
// made at at (µs on the store's clock: the time a store reports with a partial grant, as
// redisstore does in the granted request's Now) which the node will not spend; nil when l.Alg
// cannot take units back without risk of over-admission.
//
// The fixed window and the sliding log take units back (see Refund). The buckets do not: a
// bucket that moved its TAT back by the units' emission interval would credit them even when
// the bucket refilled in between, which absorbed them: in a bucket of 10 refilled at 1 per second, node A takes
// 10 at 0 s; at 10 s the bucket is full again and node B takes 10; A giving its 10 back at
// 10.5 s would let 10 more pass at once, 20 in half a second. Telling whether the bucket was
// full since a grant takes state the bucket does not keep. Nor does the sliding window yet.
func (l *Batching) Refund(at int64) *Refund { return refundable(l.Alg, at) }

// Refunds tells whether Refund gives an algorithm.
func (l *Batching) Refunds() bool { return takesBack(l.Alg) }

// Left returns how long units granted elapsed µs after the grant d could be spent, at most, as
// far as d tells: MaxAge, or for the window algorithms the time to the end of the window they
// would count in (windows are aligned, so the window of d tells where every later one ends).
func (l *Batching) Left(d Decision, elapsed int64) int64 {
	if l.window == 0 || d.ResetAfter == 0 {
		return l.MaxAge
	}
	left := (d.ResetAfter - l.tail - elapsed) % l.window
	if left <= 0 {
		left += l.window
	}
	return min(l.MaxAge, left)
}

// second is the longest default MaxAge of the window algorithms, in µs.
const second = 1_000_000

// batchAge checks maxAge, 0 asking for def.
func batchAge(name string, maxAge, def int64) (int64, error) {
	if maxAge < 0 {
		return 0, paramError(name, "max_age", "must be at least 0, got "+itoa(maxAge))
	}
	if maxAge == 0 {
		return max(1, def), nil
	}
	return min(maxAge, MaxSpan), nil
}

// Batching implements Batcher: batches are spent within the window they were granted in, and within
// MaxAge (default: one second, at most the window).
func (f *FixedWindow) Batching(maxAge int64) (*Batching, error) {
	age, err := batchAge("fixed_window", maxAge, min(second, f.window))
	if err != nil {
		return nil, err
	}
	return &Batching{Alg: f, MaxAge: age, window: f.window}, nil
}

// Batching implements Batcher: batches are spent within the window they were granted in. A grant
// leaves the current window's count above 0, so its ResetAfter runs to the end of the next
// window: the current one ends one window earlier. MaxAge defaults to a tenth of the window, at
// most one second: the estimate counts batched units from their grant, so units held unspent
// make it refuse early, and short lives keep few of them outstanding.
func (s *SlidingWindow) Batching(maxAge int64) (*Batching, error) {
	age, err := batchAge("sliding_window", maxAge, min(second, s.window/10))
	if err != nil {
		return nil, err
	}
	return &Batching{Alg: s, MaxAge: age, window: s.window, tail: s.window}, nil
}

// Batching implements Batcher with a window MaxAge longer (default: a tenth of the window, at most
// one second, so saturated traffic gets about 9% less than the limit).
func (s *SlidingLog) Batching(maxAge int64) (*Batching, error) {
	age, err := batchAge("sliding_log", maxAge, min(second, s.window/10))
	if err != nil {
		return nil, err
	}
	w := s.window + age
	if w > MaxSpan {
		return nil, paramError("sliding_log", "max_age", "window + max_age must be at most 10 years ("+itoa(MaxSpan)+" µs)")
	}
	alg, err := NewSlidingLog(s.limit, w)
	if err != nil {
		return nil, err
	}
	return &Batching{Alg: alg, MaxAge: age}, nil
}

// Batching implements Batcher with a burst smaller by ⌈MaxAge·Rate/Period⌉ units, at least one unit
// (default: a tenth of the burst, at least one unit, and MaxAge the time that many units take
// to refill). The batched burst must keep at least one unit.
func (g *GCRA) Batching(maxAge int64) (*Batching, error) {
	burst, age, err := bucketBatch("token_bucket", g.rate, g.period, g.burst, 1, maxAge)
	if err != nil {
		return nil, err
	}
	alg, err := NewGCRA(g.rate, g.period, burst)
	if err != nil {
		return nil, err
	}
	return &Batching{Alg: alg, MaxAge: age}, nil
}

// Batching implements Batcher as GCRA does, for a bucket that forwards its burst at once (NoDelay):
// a node cannot hold back units it spends on its own.
func (l *LeakyBucket) Batching(maxAge int64) (*Batching, error) {
	const name = "leaky_bucket"
	if l.delay < l.burst {
		return nil, paramError(name, "delay", "is below the burst, and batched mode needs nodelay: a node spending batched units cannot hold requests back")
	}
	burst, age, err := bucketBatch(name, l.rate, l.period, l.burst, 0, maxAge)
	if err != nil {
		return nil, err
	}
	alg, err := NewLeakyBucket(l.rate, l.period, burst, NoDelay)
	if err != nil {
		return nil, err
	}
	return &Batching{Alg: alg, MaxAge: age}, nil
}

// bucketBatch returns the burst a bucket is batched with, reduced by the units that refill in
// maxAge, and maxAge itself (0: the time a tenth of the burst, at least one unit, takes to
// refill). The batched burst must stay at least least.
func bucketBatch(name string, rate, period, burst, least, maxAge int64) (int64, int64, error) {
	if maxAge < 0 {
		return 0, 0, paramError(name, "max_age", "must be at least 0, got "+itoa(maxAge))
	}
	if maxAge == 0 {
		maxAge, _ = mulDiv(max(1, burst/10), period, rate)
		maxAge = max(1, maxAge)
	}
	// ⌈maxAge·rate/period⌉ ≤ burst − least ⟺ maxAge ≤ ⌊(burst − least)·period/rate⌋, at most the
	// refill time of the bucket (≤ MaxSpan): the quotients stay small.
	if longest, _ := mulDiv(burst-least, period, rate); maxAge > longest {
		return 0, 0, paramError(name, "max_age", "units refilled in "+itoa(maxAge)+" µs would leave less than "+itoa(least)+
			" of the burst; batching needs max_age of at most "+itoa(longest)+" µs (a larger burst allows more)")
	}
	return burst - mulDivCeil(maxAge, rate, period), maxAge, nil
}

// Batching implements Batcher when the inner algorithm does: the inner batching, banning as b does.
func (b *Ban) Batching(maxAge int64) (*Batching, error) {
	in, ok := b.inner.(Batcher)
	if !ok {
		return nil, paramError(b.inner.Script().Name, "batch", "cannot be batched")
	}
	l, err := in.Batching(maxAge)
	if err != nil {
		return nil, err
	}
	alg, err := NewBan(l.Alg, b.dur)
	if err != nil {
		return nil, err
	}
	l.Alg = alg
	return l, nil
}
