package algos

import "math/bits"

// Bounds of an Adaptive limit.
const (
	// MaxAdaptiveLimit caps max_limit: the state is a counter, so the bound only keeps the
	// fixed-point arithmetic below (limit × 1000 × a latency) far inside int64.
	MaxAdaptiveLimit = 1_000_000
	// MaxAdaptiveLatency is the largest latency (µs, about 67 s) the histogram tells apart;
	// longer ones count in its last bucket. An SLO is at most this.
	MaxAdaptiveLatency = 1<<26 - 1
)

// The histogram has 4 log-spaced buckets per power of two (each at most 25% wide) from 1 µs to
// MaxAdaptiveLatency, and the state keeps a few words before it.
const (
	adaptiveBuckets = 4 * 25
	// AdaptiveMinSamples is the fewest samples an interval (or a probe) needs before its
	// percentile counts; a percentile p needs more, ⌈100 / (100 − p)⌉ (P99: 100), so that a
	// sample lies above it. An interval with fewer goes on collecting.
	AdaptiveMinSamples = 10
	// adaptiveOverStreak more intervals with the limit under 2 × min_limit and the percentile
	// over the baseline than without make the limit re-measure its baseline at once: the
	// backend has slowed for good (not merely lost capacity, which a lower limit answers), and
	// a stale baseline would otherwise hold the limit down until the next periodic probe.
	adaptiveOverStreak = 3
	// adaptiveProbeIntervals is how long a probe may last (in intervals) once it has the
	// samples an interval needs, when fewer than probe_samples requests came.
	adaptiveProbeIntervals = 10
)

// The words of an Adaptive state (State.Log); the histogram follows them.
const (
	awInflight    = iota // slots taken by requests in flight
	awLimit              // the limit, in thousandths (fixed point, so smoothing moves it finely)
	awStart              // µs: start of the current interval, or of the probe
	awPeak               // most slots in flight during the interval
	awCount              // samples in the histogram
	awMinSample          // smallest sample in the histogram, µs
	awMaxSample          // largest sample in the histogram, µs
	awBaseline           // µs: the percentile measured in the last probe; 0 before the first
	awProbing            // 1 while probing
	awLastProbe          // µs: when the last probe ended (or the state was created)
	awOver               // intervals at a low limit over the baseline, less those not (see tick)
	awHigh               // the highest limit since the last probe ended, in thousandths
	awCutAt              // µs: when a dropped request last cut the limit
	awDrops              // dropped requests released during the interval
	awHist               // first histogram bucket
	adaptiveWords = awHist + adaptiveBuckets
)

// Adaptive is a concurrency limit that follows the backend's latency: requests take a slot as in
// Concurrency, and give it back when they end, reporting how long they took (Request.Latency,
// measured by the front end around the upstream call). The limit moves every interval so that the
// chosen percentile of the latencies stays at the target, like TCP Vegas and Netflix's
// concurrency-limits, with a baseline re-measured periodically as in Envoy's adaptive
// concurrency filter. It is local to one node: each node learns from what it sees.
//
// Target. With slo > 0, target = slo. Otherwise target = baseline × (100 + tolerance) / 100,
// where baseline is the percentile of the latencies measured during a probe: the limit is held
// at min_limit (requests over it denied) until the requests in flight before the probe have ended
// and max(probe_samples, n) requests admitted during it have ended (or, past 10 intervals, n),
// where n = max(10, ⌈100 / (100 − percentile)⌉) (P99: 100, P90: 10), enough for a sample to lie
// above the percentile, so that the baseline is the backend's latency without queueing. A sample
// counts for the probe only if latency ≤ now − probe start (the request began inside the probe).
// A probe starts on the first request, probe_every after the last one ended, and when the
// intervals that ended with the limit under 2 × min_limit and P over the baseline outnumber the
// others (since the last probe, the count never going below 0) by 3: with so few requests in
// flight nothing should queue, so the backend has slowed down for good. Never with an slo. A
// probe that finds the baseline over the old target puts the limit back to the highest it
// reached since the previous probe: it fell because of the stale baseline, and a backend that is
// slower but as parallel as before holds as many requests (the updates cut it if it holds fewer).
//
// Limit. Samples go into a histogram of 4 log-spaced buckets per power of two (1 µs to about 67
// s). When an interval has lasted interval µs and holds at least n samples, P = its percentile
// (the bucket at rank ⌈count × percentile / 100⌉, narrowed to the smallest and largest samples,
// linear within it) and, in thousandths,
//
//	proposed = limit × target / P, clamped to [limit / 2, 2 × limit];
//	           limit itself when proposed > limit and the peak in flight during the interval was
//	           under limit / 2 (the traffic, not the backend, bounds it: no upward drift), or a
//	           request was dropped during the interval
//	limit   += (proposed − limit) × smoothing / 100  (truncated towards 0)
//	limit    = clamp(limit, min_limit, max_limit)
//
// and a new interval starts with an empty histogram (and no drops). A state starts at min_limit.
//
// Drops. A release with Request.Dropped (the backend failed the request: a 5xx status, a
// timeout, a refused connection) is not a sample: an overloaded backend that sheds load answers
// fast, and its fast failures would pull the percentile down and the limit up. Instead it cuts
// the limit at once, limit = max(limit × backoff / 100, min_limit) (in thousandths, truncated;
// backoff 90: by 10%, as Netflix's AIMD backoff ratio 0.9), unless a drop already cut it less
// than interval ago (the drops of one overload come together; one cut per interval, like TCP's
// once per window; never with a clock that went backwards since); and an interval during which
// a drop came may not raise the limit (proposed = min(proposed, limit)). A backend that fails
// everything gets no interval closed (no samples) and a cut each interval, down to min_limit.
//
// Requests. take n ≥ 1: admitted iff inflight + n ≤ L, where L = ⌊limit⌋, or min_limit while
// probing; n > max_limit is never admitted (RetryAfter Never); otherwise a denial has RetryAfter
// = interval, when the limit is next recomputed (a release may free a slot sooner). take 0: a
// peek. release (Request.Release, Cost = the slots taken): inflight −= n (not below 0) and, if
// Dropped, a drop (above), else if Latency > 0, the latency is a sample; always allowed, Granted
// 0. Every request but a dry run first closes the interval or the probe if it is due. Limit = L,
// Remaining = L − inflight (≥ 0), ResetAfter = 0 when nothing is in flight, else interval; TTL =
// probe_every: a state idle that long starts afresh (a lost release is forgotten then).
//
// A dry run decides on the state as it is, without closing an interval. A clock that goes
// backwards closes nothing and counts no probe sample. Arithmetic: limit × 1000 ≤ 10^9 and a
// target ≤ 11 × 2^26, so limit × target < 10^18 < 2^63 (and mulDiv saturates rather than wrap).
//
// State (Log, adaptiveWords words): the words aw* above, then the histogram.
type Adaptive struct {
	pct, tolerance, slo      int64
	minL, maxL               int64
	interval, smoothing      int64
	backoff                  int64
	probeEvery, probeSamples int64
	minSamples               int64 // max(AdaptiveMinSamples, ⌈100 / (100 − percentile)⌉)
	script                   Script
}

// AdaptiveConfig are the parameters of an Adaptive limit (durations in µs, percentages as
// integers).
type AdaptiveConfig struct {
	Percentile   int64 // 50..99: the percentile of latency held at the target
	Tolerance    int64 // 0..1000: % over the baseline the percentile may reach
	SLO          int64 // µs, 0 or 1..MaxAdaptiveLatency: an absolute target instead of the baseline
	MinLimit     int64 // 1..MaxLimit
	MaxLimit     int64 // MinLimit..MaxAdaptiveLimit
	Interval     int64 // µs between two updates of the limit
	Smoothing    int64 // 1..100: % of the proposed change applied per interval
	ProbeEvery   int64 // µs between two probes of the baseline, ≥ Interval
	ProbeSamples int64 // 10..10000: samples a probe takes
	Backoff      int64 // 50..99: % of the limit kept when a request is dropped
}

// NewAdaptive returns an adaptive concurrency limit, or a *ParamError naming the parameter (by
// its config name) that is out of bounds.
func NewAdaptive(c AdaptiveConfig) (*Adaptive, error) {
	const name = "adaptive"
	// Each bound: lo (named loName when it is another parameter), hi; durations said in µs.
	checks := []struct {
		param, loName string
		v, lo, hi     int64
		unit          string
	}{
		{"percentile", "", c.Percentile, 50, 99, ""},
		{"tolerance", "", c.Tolerance, 0, 1000, ""},
		{"slo", "", c.SLO, 0, MaxAdaptiveLatency, " µs"},
		{"min_limit", "", c.MinLimit, 1, MaxAdaptiveLimit, ""},
		{"max_limit", "min_limit", c.MaxLimit, c.MinLimit, MaxAdaptiveLimit, ""},
		{"interval", "", c.Interval, Millisecond, Hour, " µs"},
		{"smoothing", "", c.Smoothing, 1, 100, ""},
		{"probe_every", "interval", c.ProbeEvery, c.Interval, Day, " µs"},
		{"probe_samples", "", c.ProbeSamples, AdaptiveMinSamples, 10_000, ""},
		{"backoff", "", c.Backoff, 50, 99, ""},
	}
	for _, k := range checks {
		bound := itoa(k.lo) + k.unit
		if k.loName != "" {
			bound = k.loName + " (" + bound + ")"
		}
		switch {
		case k.v < k.lo:
			return nil, paramError(name, k.param, "must be at least "+bound+", got "+itoa(k.v)+k.unit)
		case k.v > k.hi:
			return nil, paramError(name, k.param, "must be at most "+itoa(k.hi)+k.unit+", got "+itoa(k.v)+k.unit)
		}
	}
	a := &Adaptive{pct: c.Percentile, tolerance: c.Tolerance, slo: c.SLO, minL: c.MinLimit, maxL: c.MaxLimit,
		interval: c.Interval, smoothing: c.Smoothing, backoff: c.Backoff, probeEvery: c.ProbeEvery, probeSamples: c.ProbeSamples,
		minSamples: max(AdaptiveMinSamples, ceilDiv(100, 100-c.Percentile))}
	a.probeSamples = max(a.probeSamples, a.minSamples)
	a.script = Script{Name: name, Args: []int64{c.MinLimit, c.MaxLimit}, Limit: c.MaxLimit, Log: true}
	return a, nil
}

// Script implements Algorithm. Adaptive has no Lua twin: rules refuse it in cluster mode.
func (a *Adaptive) Script() Script { return a.script }

// Decide implements Algorithm.
func (a *Adaptive) Decide(st *State, r Request) Decision {
	now := r.Now
	var w []int64
	switch {
	case len(st.Log) == adaptiveWords:
		w = st.Log
	case r.DryRun: // a fresh state, not written
		var buf [adaptiveWords]int64
		w = a.fresh(buf[:], now)
	default:
		if cap(st.Log) >= adaptiveWords {
			w = st.Log[:adaptiveWords]
		} else {
			w = make([]int64, adaptiveWords)
		}
		st.Log = a.fresh(w, now)
	}
	if !r.DryRun {
		a.tick(w, now)
	}
	d := Decision{Allowed: true}
	n := r.Cost
	switch {
	case r.Release:
		if !r.DryRun {
			w[awInflight] = max(w[awInflight]-n, 0)
			switch {
			case r.Dropped:
				a.drop(w, now)
			case r.Latency > 0:
				a.sample(w, now, r.Latency)
			}
		}
	case n > a.maxL:
		d.Allowed, d.RetryAfter = false, Never
	case n > 0:
		if w[awInflight]+n > a.current(w) {
			d.Allowed, d.RetryAfter = false, a.interval
			break
		}
		d.Granted = n
		if r.DryRun {
			break
		}
		w[awInflight] += n
		w[awPeak] = max(w[awPeak], w[awInflight])
	}
	l := a.current(w)
	inflight := w[awInflight]
	if r.DryRun {
		inflight += d.Granted
	}
	d.Limit, d.Remaining = l, max(l-inflight, 0)
	if inflight > 0 {
		d.ResetAfter = a.interval
	}
	d.TTL = a.probeEvery
	return d
}

// Limit returns the limit a state holds now (min_limit for a fresh one), for metrics.
func (a *Adaptive) Limit(st *State) int64 {
	if len(st.Log) != adaptiveWords {
		return a.minL
	}
	return a.current(st.Log)
}

// Baseline returns the baseline a state measured (µs; 0 before its first probe or with an slo).
func (a *Adaptive) Baseline(st *State) int64 {
	if len(st.Log) != adaptiveWords {
		return 0
	}
	return st.Log[awBaseline]
}

// fresh initialises w as a new state at now: limit min_limit, probing unless there is an slo.
func (a *Adaptive) fresh(w []int64, now int64) []int64 {
	clear(w)
	w[awLimit] = a.minL * 1000
	w[awStart], w[awLastProbe] = now, now
	w[awCutAt] = now - a.interval // a first drop cuts at once
	if a.slo == 0 {
		w[awProbing] = 1
	}
	return w
}

// current is the limit requests are admitted against.
func (a *Adaptive) current(w []int64) int64 {
	if w[awProbing] == 1 {
		return a.minL
	}
	return w[awLimit] / 1000
}

// target is the latency the percentile is held at.
func (a *Adaptive) target(w []int64) int64 {
	if a.slo > 0 {
		return a.slo
	}
	return max(w[awBaseline]*(100+a.tolerance)/100, 1)
}

// sample adds a latency to the histogram; while probing only if the request began in the probe.
func (a *Adaptive) sample(w []int64, now, latency int64) {
	if w[awProbing] == 1 && latency > now-w[awStart] {
		return
	}
	latency = min(latency, MaxAdaptiveLatency) // so every percentile, baseline and target is too
	w[awHist+bucket(latency)]++
	if w[awCount] == 0 || latency < w[awMinSample] {
		w[awMinSample] = latency
	}
	w[awCount]++
	w[awMaxSample] = max(w[awMaxSample], latency)
}

// drop cuts the limit for a dropped request, unless a drop cut it less than interval ago.
func (a *Adaptive) drop(w []int64, now int64) {
	w[awDrops]++
	if now-w[awCutAt] < a.interval { // a backwards clock too
		return
	}
	w[awLimit] = max(w[awLimit]*a.backoff/100, a.minL*1000)
	w[awCutAt] = now
}

// tick closes the probe or the interval when it is due, and starts a probe when one is due.
func (a *Adaptive) tick(w []int64, now int64) {
	elapsed := now - w[awStart]
	if w[awProbing] == 1 {
		if w[awCount] >= a.probeSamples ||
			w[awCount] >= a.minSamples && elapsed >= adaptiveProbeIntervals*a.interval {
			b, old := a.percentile(w), w[awBaseline]
			if old > 0 && b*100 > old*(100+a.tolerance) {
				// Slower for good: the limit fell because of the stale baseline, not because
				// fewer requests fit; start again from where it was.
				w[awLimit] = max(w[awLimit], w[awHigh])
			}
			w[awBaseline], w[awHigh] = b, w[awLimit]
			w[awProbing], w[awOver], w[awLastProbe] = 0, 0, now
			a.restart(w, now)
		}
		return
	}
	if elapsed >= a.interval && w[awCount] >= a.minSamples {
		p, t, l := a.percentile(w), a.target(w), w[awLimit]
		q, _ := mulDiv(l, t, p)
		q = min(max(q, l/2), 2*l)
		if q > l && (2*w[awPeak]*1000 < l || w[awDrops] > 0) {
			q = l
		}
		l += (q - l) * a.smoothing / 100
		w[awLimit] = min(max(l, a.minL*1000), a.maxL*1000)
		w[awHigh] = max(w[awHigh], w[awLimit])
		// Under 2 × min_limit nothing should queue, so the percentile should be about the
		// baseline: one above it there counts towards a re-measure, one below takes back.
		switch {
		case w[awLimit] < 2*a.minL*1000 && p > w[awBaseline]:
			w[awOver]++
		case w[awOver] > 0:
			w[awOver]--
		}
		a.restart(w, now)
	}
	if a.slo == 0 && (now-w[awLastProbe] >= a.probeEvery || w[awOver] >= adaptiveOverStreak) {
		w[awProbing], w[awOver] = 1, 0
		a.restart(w, now)
	}
}

// restart empties the histogram and starts an interval (or a probe) at now.
func (a *Adaptive) restart(w []int64, now int64) {
	clear(w[awHist:])
	w[awCount], w[awMinSample], w[awMaxSample], w[awStart], w[awPeak], w[awDrops] = 0, 0, 0, now, w[awInflight], 0
}

// percentile returns the configured percentile of the histogram (count ≥ 1): the bucket holding
// rank ⌈count × pct / 100⌉, interpolated linearly at the rank's midpoint within the bucket
// narrowed to [smallest sample, largest sample + 1), so that equal samples give their value.
func (a *Adaptive) percentile(w []int64) int64 {
	n, bottom, top := w[awCount], w[awMinSample], w[awMaxSample]
	rank := ceilDiv(n*a.pct, 100)
	cum := int64(0)
	for i, c := range w[awHist:] {
		if c > 0 && cum+c >= rank {
			lo, hi := bucketBounds(i)
			hi = min(hi, top+1)
			lo = min(max(lo, bottom), hi-1)
			return max(lo+(hi-lo)*(2*(rank-cum)-1)/(2*c), 1)
		}
		cum += c
	}
	return max(top, 1)
}

// bucket returns the histogram bucket of a latency of v ≥ 1 µs: v itself below 4, then 4 buckets
// per power of two, [(4+m)·2^(e−2), (5+m)·2^(e−2)) for v in [2^e, 2^(e+1)).
func bucket(v int64) int {
	v = min(v, MaxAdaptiveLatency)
	if v < 4 {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1
	m := int(v>>(e-2)) & 3
	return 4*(e-1) + m
}

// bucketBounds returns the bounds [lo, hi) of bucket i.
func bucketBounds(i int) (lo, hi int64) {
	if i < 4 {
		return int64(i), int64(i) + 1
	}
	e, m := i/4+1, int64(i%4)
	return (4 + m) << (e - 2), (5 + m) << (e - 2)
}
