package rules

import (
	"github.com/diana-gw/diana/shared/algos"
)

// The algorithms of shared/algos, by the names configs use, with their parameters. Build(p,
// nodes) gives each node of a degraded cluster its share: rates are kept exact (rate/nodes as a
// fraction, the period stretched), counts are divided rounding down (at least 1), so the shares
// never add up to more than the whole. Each parameter's bounds are stated here once; the bounds
// that tie several together (a bucket's refill time, a warm-up's stored units) are the
// algorithm's own, reported on the parameter they name.

// The parameters several algorithms share.
var (
	rate = Param{Name: "rate", Type: Count, Role: Amount, Required: true, Min: 1, Max: algos.MaxCount, Example: 100,
		Doc: "units admitted per period, the steady rate"}
	period = Param{Name: "period", Type: Duration, Role: Window, Default: algos.Second, Min: 1, Max: algos.MaxSpan,
		Doc: "the period of rate"}
	windowLimit = Param{Name: "limit", Type: Count, Role: Amount, Required: true, Min: 1, Max: algos.MaxCount, Example: 100,
		Doc: "units admitted per window"}
	window = Param{Name: "window", Type: Duration, Role: Window, Required: true, Min: 1, Max: algos.MaxSpan, Example: algos.Minute,
		Doc: "the window"}
)

func init() {
	RegisterAlgorithm("token_bucket", AlgorithmKind{
		Doc: "token bucket (GCRA): rate per period, bursts up to burst; the bucket starts full",
		Params: []Param{rate, period,
			{Name: "burst", Type: Count, Role: Burst, Same: "rate", Min: 1, Max: algos.MaxCount, Example: 20,
				Doc:     "the bucket's size, units admitted at once; burst × period / rate, the time the bucket takes to refill, at most 10 years",
				Largest: func(p Params) int64 { return algos.GCRAMaxBurst(p["rate"], p["period"]) }}},
		Build: func(p Params, nodes int64) (algos.Algorithm, error) {
			r, per := shareRate(p["rate"], p["period"], nodes)
			return algorithm(algos.NewGCRA(r, per, share(p["burst"], nodes)))
		},
		Waits:    true,
		LimitDoc: "`burst`",
		ResetDoc: "until the bucket is full: at most burst × period / rate",
	})
	RegisterAlgorithm("warm_up", AlgorithmKind{
		Doc: "token bucket that starts cold and reaches rate after warmup (Guava SmoothWarmingUp)",
		Unsplit: "warm_up does not split across nodes: while Redis is down each node's limiter warms up on its own " +
			"share and admits more than one limiter would (docs/accuracy.md); prefer token_bucket, or no local limiting while Redis is down",
		Params: []Param{rate, period,
			{Name: "warmup", Type: Duration, Role: Warmup, Required: true, Min: 1, Max: algos.MaxSpan, Example: 10 * algos.Second,
				Doc:     "how long a cold limiter takes to reach rate (cold factor 3); warmup × rate / period, the units a cold limiter stores, at most 10^15",
				Largest: func(p Params) int64 { return algos.WarmUpMaxWarmup(p["rate"], p["period"]) }}},
		Build: func(p Params, nodes int64) (algos.Algorithm, error) {
			r, per := shareRate(p["rate"], p["period"], nodes)
			return algorithm(algos.NewWarmUp(r, per, p["warmup"]))
		},
		Waits:    true,
		LimitDoc: "1: it lets one request go at a time (of up to warmup × rate / period units)",
		ResetDoc: "until the next request may go: at most 1.5 × warmup",
	})
	RegisterAlgorithm("leaky_bucket", AlgorithmKind{
		Doc: "nginx limit_req: rate per period, burst queued with delays, or nodelay",
		Params: []Param{rate, period,
			{Name: "burst", Type: Count, Role: Burst, Min: 0, Max: algos.MaxCount - 1, Example: 20,
				Doc:     "excess requests admitted and queued beyond the rate, as nginx's burst; (burst + 1) × period / rate, the time a full bucket takes to drain, at most 10 years",
				Largest: func(p Params) int64 { return algos.LeakyBucketMaxBurst(p["rate"], p["period"]) }},
			{Name: "delay", Type: Count, Min: 0, Max: algos.MaxCount, Default: algos.DelayAll,
				Doc: "excess requests forwarded at once before the rest are held until they conform (nginx delay=); 0 holds every excess request, burst or more holds none"},
			{Name: "nodelay", Type: Flag, Excludes: "delay", Example: 1,
				Doc: "forward every request within the burst at once, as nginx's nodelay (the same as delay ≥ burst)"}},
		Build: func(p Params, nodes int64) (algos.Algorithm, error) {
			d := p["delay"] / nodes
			if p["nodelay"] == 1 {
				d = algos.NoDelay
			}
			r, per := shareRate(p["rate"], p["period"], nodes)
			return algorithm(algos.NewLeakyBucket(r, per, p["burst"]/nodes, d))
		},
		LimitDoc: "`burst` + 1: the requests that pass at once from rest (those beyond `delay` + 1 held)",
		ResetDoc: "until the bucket has drained: at most (burst + 1) × period / rate",
	})
	RegisterAlgorithm("fixed_window", AlgorithmKind{
		Doc:    "limit per aligned window (a client can pass up to 2 × limit across a boundary)",
		Params: []Param{windowLimit, window},
		Build: func(p Params, nodes int64) (algos.Algorithm, error) {
			return algorithm(algos.NewFixedWindow(share(p["limit"], nodes), p["window"]))
		},
		Waits:    true,
		LimitDoc: "`limit`",
		ResetDoc: "until the window ends: at most window (a request held into the next window: window + its delay)",
	})
	RegisterAlgorithm("sliding_window", AlgorithmKind{
		Doc: "limit per sliding window, estimated from sub-windows: 1, Cloudflare's weighted estimate of two windows",
		Params: []Param{windowLimit, window,
			{Name: "subwindows", Type: Count, Role: SubWindows, Default: 1, Min: 1, Max: algos.MaxSubWindows,
				// a sub-window lasts 1 µs at least
				Largest: func(p Params) int64 { return min(p["window"], algos.MaxSubWindows) },
				Doc:     "counted in sub-windows of window / subwindows: 1 is Cloudflare's weighted estimate of two windows; more bring it closer to exact (any (subwindows − 1) / subwindows of a window holds at most limit) for subwindows + 2 numbers of state"}},
		Build: func(p Params, nodes int64) (algos.Algorithm, error) {
			if p["subwindows"] > 1 {
				return algorithm(algos.NewSlidingWindowSub(share(p["limit"], nodes), p["window"], p["subwindows"]))
			}
			return algorithm(algos.NewSlidingWindow(share(p["limit"], nodes), p["window"]))
		},
		LimitDoc: "`limit`",
		ResetDoc: "until the estimate is 0: at most window + window / subwindows, as it counts a unit, down-weighted, until the end of the sub-window one window after its own",
	})
	logLimit := windowLimit
	logLimit.Max, logLimit.Doc = algos.MaxLogLimit, "units admitted per window (the log keeps one entry per admitted unit)"
	RegisterAlgorithm("sliding_log", AlgorithmKind{
		Doc:    "limit per sliding window, exact (a log of admissions)",
		Params: []Param{logLimit, window},
		Build: func(p Params, nodes int64) (algos.Algorithm, error) {
			return algorithm(algos.NewSlidingLog(share(p["limit"], nodes), p["window"]))
		},
		Waits:    true,
		LimitDoc: "`limit`",
		ResetDoc: "until the newest unit leaves the window: at most window (+ the delay of a held request)",
	})
	RegisterAlgorithm("concurrency", AlgorithmKind{
		Doc: "at most max requests in flight; a slot is held until its request ends, or lease passes",
		Params: []Param{
			{Name: "max", Type: Count, Role: Amount, Required: true, Min: 1, Max: algos.MaxConcurrency, Example: 10,
				Doc: "most requests of one identity in flight at once; a slot is taken when a request is admitted and given back when it ends"},
			{Name: "lease", Type: Duration, Role: Window, Default: algos.Minute, Min: 1, Max: algos.MaxSpan,
				Doc: "how long a slot stays taken when the end of its request is never reported (a node that died)"}},
		Build: func(p Params, nodes int64) (algos.Algorithm, error) {
			return algorithm(algos.NewConcurrency(share(p["max"], nodes), p["lease"]))
		},
		Leases:   true,
		LimitDoc: "`max`",
		ResetDoc: "until the last slot in flight is given back or expires: at most lease",
	})
}

// share divides a count among nodes, rounding down but never below 1.
func share(n, nodes int64) int64 { return max(n/nodes, 1) }

// shareRate returns rate/nodes per period exactly, as rate' per period': the common factor of
// rate and nodes divides rate, the rest stretches the period.
func shareRate(rate, period, nodes int64) (int64, int64) {
	g, b := rate, nodes
	for b != 0 {
		g, b = b, g%b
	}
	return rate / g, period * (nodes / g)
}

// algorithm returns a constructor's result as an interface, nil (not a typed nil) on error.
func algorithm[A algos.Algorithm](a A, err error) (algos.Algorithm, error) {
	if err != nil {
		return nil, err
	}
	return a, nil
}
