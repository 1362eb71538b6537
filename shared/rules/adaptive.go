package rules

import "github.com/diana-gw/diana/shared/algos"

// adaptive is a concurrency limit that follows the backend's latency (algos.Adaptive). It is
// local only: its limit is learned from the latencies one node sees, and a shared limit would
// need every node's samples in one place on every request (see docs/configuration.md).
func init() {
	RegisterAlgorithm("adaptive", AlgorithmKind{
		Doc: "concurrency limit that follows the backend's latency: the limit moves so that a percentile of latency stays at a target (local mode only)",
		Params: []Param{
			{Name: "percentile", Type: Count, Default: 50, Min: 50, Max: 99,
				Doc: "the percentile of the latencies held at the target, per interval (90: P90)"},
			{Name: "tolerance", Type: Count, Default: 8, Min: 0, Max: 1000,
				Doc: "how far over the baseline, in percent, the percentile may go: target = baseline × (100 + tolerance) / 100"},
			{Name: "slo", Type: Duration, Default: 0, Min: 0, Max: algos.Minute, Excludes: "tolerance",
				Doc: "an absolute target for the percentile instead of the baseline (no probes then)"},
			{Name: "min_limit", Type: Count, Default: 4, AtMost: "max_limit", Min: 1, Max: algos.MaxAdaptiveLimit, Example: 4,
				Doc: "the lowest limit, and the limit while the baseline is measured; keep it under the backend's capacity"},
			{Name: "max_limit", Type: Count, Role: Amount, Default: 1000, Min: 1, Max: algos.MaxAdaptiveLimit, Example: 1000,
				Doc: "the highest limit; at least min_limit"},
			{Name: "interval", Type: Duration, Default: 100 * algos.Millisecond, Min: algos.Millisecond, Max: algos.Hour,
				Doc: "how often the limit moves, from the latencies of the requests that ended in the interval (at least 10)"},
			{Name: "smoothing", Type: Count, Default: 50, Min: 1, Max: 100,
				Doc: "the share, in percent, of the proposed change applied at each interval"},
			{Name: "probe_every", Type: Duration, Default: 30 * algos.Second, Min: algos.Millisecond, Max: algos.Day,
				Doc: "how often the baseline is re-measured (the limit held at min_limit meanwhile), as Envoy's min RTT sampling; at least interval; also how long an idle state is kept"},
			{Name: "probe_samples", Type: Count, Default: 100, Min: algos.AdaptiveMinSamples, Max: 10_000,
				Doc: "how many requests a probe measures"},
			{Name: "backoff", Type: Count, Default: 90, Min: 50, Max: 99,
				Doc: "the share, in percent, of the limit kept when the backend fails a request (a 5xx status, a timeout): one cut per interval at most, as Netflix's AIMD backoff ratio"},
		},
		Build: func(p Params, _ int64) (algos.Algorithm, error) {
			return algorithm(algos.NewAdaptive(algos.AdaptiveConfig{
				Percentile: p["percentile"], Tolerance: p["tolerance"], SLO: p["slo"],
				MinLimit: p["min_limit"], MaxLimit: p["max_limit"], Interval: p["interval"], Smoothing: p["smoothing"],
				ProbeEvery: p["probe_every"], ProbeSamples: p["probe_samples"], Backoff: p["backoff"]}))
		},
		Leases:    true,
		Latency:   true,
		LocalOnly: true,
		LimitDoc:  "the current limit (min_limit while the baseline is measured)",
		ResetDoc:  "0 when nothing is in flight, else interval (when the limit is next recomputed)",
	})
}
