package rules

import (
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
)

// The algorithms of shared/algos, by the names configs use. Build(nodes) gives each node of a
// degraded cluster its share: rates are kept exact by stretching the period, counts are divided
// rounding down (at least 1), so the shares never add up to more than the whole.

func init() {
	RegisterAlgorithm("token_bucket", AlgorithmKind{Decode: decodeRate(false), Waits: true, Doc: "token bucket (GCRA): rate per period, bursts up to burst"})
	RegisterAlgorithm("warm_up", AlgorithmKind{Decode: decodeRate(true), Waits: true, Doc: "token bucket that starts cold and reaches rate after warmup (Guava SmoothWarmingUp)"})
	RegisterAlgorithm("leaky_bucket", AlgorithmKind{Decode: decodeLeaky, Doc: "nginx limit_req: rate per period, burst queued with delays, or nodelay"})
	RegisterAlgorithm("fixed_window", AlgorithmKind{Decode: decodeWindow(algos.NewFixedWindow), Waits: true, Doc: "limit per aligned window"})
	RegisterAlgorithm("sliding_window", AlgorithmKind{Decode: decodeWindow(algos.NewSlidingWindow), Doc: "limit per sliding window, weighted estimate of two windows (Cloudflare)"})
	RegisterAlgorithm("sliding_log", AlgorithmKind{Decode: decodeWindow(algos.NewSlidingLog), Waits: true, Doc: "limit per sliding window, exact (a log of admissions; limit at most 10000)"})
	RegisterAlgorithm("concurrency", AlgorithmKind{Decode: decodeConcurrency, Leases: true, Doc: "at most max requests in flight; a lease expires after lease if never released"})
}

const (
	maxCount = algos.MaxSafe      // the algorithms check their own tighter bounds
	maxSpan  = algos.MaxSafe / 16 // about 17 years
)

// share divides a count among nodes, rounding down but never below 1.
func share(n, nodes int64) int64 { return max(n/nodes, 1) }

// limitFunc adapts a function to Limit.
type limitFunc func(nodes int64) (algos.Algorithm, error)

func (f limitFunc) Build(nodes int64) (algos.Algorithm, error) { return f(nodes) }

// algorithm returns a constructor's result as an interface, nil (not a typed nil) on error.
func algorithm[A algos.Algorithm](a A, err error) (algos.Algorithm, error) {
	if err != nil {
		return nil, err
	}
	return a, nil
}

func decodeRate(warm bool) func(o *conf.Obj) Limit {
	return func(o *conf.Obj) Limit {
		o.Require("rate")
		rate := o.Int("rate", 1, 1, maxCount)
		period := o.Duration("period", algos.Second, 1, maxSpan)
		if warm {
			o.Require("warmup")
			warmup := o.Duration("warmup", algos.Second, 1, maxSpan)
			return limitFunc(func(nodes int64) (algos.Algorithm, error) {
				return algorithm(algos.NewWarmUp(rate, period*nodes, warmup))
			})
		}
		burst := o.Int("burst", rate, 1, maxCount)
		return limitFunc(func(nodes int64) (algos.Algorithm, error) {
			return algorithm(algos.NewGCRA(rate, period*nodes, share(burst, nodes)))
		})
	}
}

func decodeLeaky(o *conf.Obj) Limit {
	o.Require("rate")
	rate := o.Int("rate", 1, 1, maxCount)
	period := o.Duration("period", algos.Second, 1, maxSpan)
	burst := o.Int("burst", 0, 0, maxCount)
	delay := o.Int("delay", algos.DelayAll, 0, maxCount)
	if o.Bool("nodelay", false) {
		if o.Has("delay") {
			o.Fail("nodelay", "cannot be combined with delay")
		}
		delay = algos.NoDelay
	}
	return limitFunc(func(nodes int64) (algos.Algorithm, error) {
		d := delay
		if d != algos.NoDelay {
			d /= nodes
		}
		return algorithm(algos.NewLeakyBucket(rate, period*nodes, burst/nodes, d))
	})
}

func decodeWindow[A algos.Algorithm](build func(limit, window int64) (A, error)) func(o *conf.Obj) Limit {
	return func(o *conf.Obj) Limit {
		o.Require("limit", "window")
		limit := o.Int("limit", 1, 1, maxCount)
		window := o.Duration("window", algos.Second, 1, maxSpan)
		return limitFunc(func(nodes int64) (algos.Algorithm, error) {
			return algorithm(build(share(limit, nodes), window))
		})
	}
}

func decodeConcurrency(o *conf.Obj) Limit {
	o.Require("max")
	n := o.Int("max", 1, 1, maxCount)
	lease := o.Duration("lease", algos.Minute, 1, maxSpan)
	return limitFunc(func(nodes int64) (algos.Algorithm, error) {
		return algorithm(algos.NewConcurrency(share(n, nodes), lease))
	})
}
