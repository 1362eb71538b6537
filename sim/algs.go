package sim

import (
	"fmt"

	"github.com/diana-gw/diana/shared/algos"
)

// Algo is one algorithm under test, configured from a Limit.
type Algo struct {
	Name  string
	About string // its parameters, for the report
	// New returns the algorithm with its limit divided by div (1: the full limit; the node count:
	// the usual advice for local mode on several nodes). Divided parameters are rounded down, to
	// at least 1.
	New func(div int64) (algos.Algorithm, error)
	// Contract is the exact reference the algorithm is judged against: the limit it promises.
	// For every algorithm but the sliding window it is the algorithm itself (the Go transition,
	// deciding each client's requests in order on one state); the weighted sliding window
	// promises Units per sliding Window, which the exact sliding log keeps.
	Contract func() (algos.Algorithm, error)
	// Window is the span over which excess and peaks are counted (µs); Aligned: in the fixed
	// windows [k·Window, (k+1)·Window) rather than in every sliding window.
	Window  int64
	Aligned bool
	// InFlight marks the concurrency limit: it limits requests in flight, not a rate.
	InFlight bool
	// Estimate marks an algorithm that approximates its contract, the exact sliding log of
	// the same limit (the weighted sliding window): the report counts its wrong decisions
	// against the log and does not expect it to be exact in cluster mode.
	Estimate bool
	// Limit is the limit object a config gives the algorithm (its fields, without the braces):
	// failover mode decodes its rule from it (Algo.Rule), as the registry builds New(1) from it
	// (TestAlgoRules). Empty: failover mode does not run the algorithm.
	Limit string
	// Meter, for an estimate, returns it without a limit (algos.MaxCount): it counts every
	// request, admitted or not, as Cloudflare's counter does, for Cloudflare's own measure of
	// wrong decisions (Wrong.Meter).
	Meter func() (algos.Algorithm, error)
}

// Batchable reports whether batched mode runs the algorithm: whether it implements algos.Batcher.
func (a Algo) Batchable() bool {
	alg, err := a.New(1)
	_, ok := alg.(algos.Batcher)
	return err == nil && ok
}

// Algorithms returns every algorithm of shared/algos configured from l, with hold the time a
// request stays in flight (for the concurrency limit):
//
//   - fixed_window: l.Units per aligned l.Window;
//   - sliding_window: l.Units per sliding l.Window, weighted two-window estimate;
//   - sliding_log: l.Units per sliding l.Window, exact;
//   - token_bucket: GCRA, l.Units per l.Window, burst l.Units (starts full);
//   - warm_up: l.Units per l.Window at the stable rate, warming up over one l.Window;
//   - leaky_bucket: nginx limit_req, l.Units per l.Window, burst l.Units/2, nodelay;
//   - concurrency: l.Units·hold/l.Window requests in flight (leases expire after 2·hold), which
//     admits l.Units per l.Window when every request is held for hold.
func Algorithms(l Limit, hold int64) []Algo {
	u, w := l.Units, l.Window
	div := func(v, d int64) int64 { return max(1, v/d) }
	inflight := max(1, u*hold/w)
	same := func(a func(int64) (algos.Algorithm, error)) func() (algos.Algorithm, error) {
		return func() (algos.Algorithm, error) { return a(1) }
	}
	fixed := func(d int64) (algos.Algorithm, error) { return algos.NewFixedWindow(div(u, d), w) }
	sliding := func(d int64) (algos.Algorithm, error) { return algos.NewSlidingWindow(div(u, d), w) }
	log := func(d int64) (algos.Algorithm, error) { return algos.NewSlidingLog(div(u, d), w) }
	gcra := func(d int64) (algos.Algorithm, error) { return algos.NewGCRA(div(u, d), w, div(u, d)) }
	warm := func(d int64) (algos.Algorithm, error) { return algos.NewWarmUp(div(u, d), w, w) }
	leaky := func(d int64) (algos.Algorithm, error) {
		return algos.NewLeakyBucket(div(u, d), w, div(u/2, d), algos.NoDelay)
	}
	conc := func(d int64) (algos.Algorithm, error) { return algos.NewConcurrency(div(inflight, d), 2*hold) }
	per := fmt.Sprintf("%d per %s", u, duration(w))
	algs := []Algo{
		{About: per + ", aligned windows", New: fixed, Contract: same(fixed), Window: w, Aligned: true},
		{About: per + ", weighted estimate (judged against the exact sliding log)", New: sliding, Contract: same(log), Window: w, Estimate: true,
			Meter: func() (algos.Algorithm, error) { return algos.NewSlidingWindow(algos.MaxCount, w) }},
		{About: per + ", exact", New: log, Contract: same(log), Window: w},
		{About: fmt.Sprintf("GCRA, %s, burst %d", per, u), New: gcra, Contract: same(gcra), Window: w},
		{About: fmt.Sprintf("%s stable, warm-up %s, cold factor 3", per, duration(w)), New: warm, Contract: same(warm), Window: w},
		{About: fmt.Sprintf("nginx limit_req, %s, burst %d, nodelay", per, u/2), New: leaky, Contract: same(leaky), Window: w},
		{About: fmt.Sprintf("%d in flight, each request held %s", inflight, duration(hold)), New: conc, Contract: same(conc), Window: w, InFlight: true},
	}
	// One line per algorithm: a variant (another estimate of the sliding log, say) is one more
	// entry, named below from its script; give it a distinct Name if it shares a script.
	// Each is named as configs name it (algos' Script().Name, the registry's name).
	limits := map[string]string{
		"fixed_window":   fmt.Sprintf(`"algorithm": "fixed_window", "limit": %d, "window": "%dus"`, u, w),
		"sliding_window": fmt.Sprintf(`"algorithm": "sliding_window", "limit": %d, "window": "%dus"`, u, w),
		"sliding_log":    fmt.Sprintf(`"algorithm": "sliding_log", "limit": %d, "window": "%dus"`, u, w),
		"token_bucket":   fmt.Sprintf(`"algorithm": "token_bucket", "rate": %d, "period": "%dus", "burst": %d`, u, w, u),
		"warm_up":        fmt.Sprintf(`"algorithm": "warm_up", "rate": %d, "period": "%dus", "warmup": "%dus"`, u, w, w),
		"leaky_bucket":   fmt.Sprintf(`"algorithm": "leaky_bucket", "rate": %d, "period": "%dus", "burst": %d, "nodelay": true`, u, w, u/2),
		"concurrency":    fmt.Sprintf(`"algorithm": "concurrency", "max": %d, "lease": "%dus"`, inflight, 2*hold),
	}
	for i := range algs {
		if a, err := algs[i].New(1); err == nil && algs[i].Name == "" {
			algs[i].Name = a.Script().Name
		}
		algs[i].Limit = limits[algs[i].Name]
	}
	return algs
}

// duration formats µs briefly: "1m", "12s", "250ms", "40µs".
func duration(us int64) string {
	switch {
	case us%algos.Hour == 0:
		return fmt.Sprintf("%dh", us/algos.Hour)
	case us%algos.Minute == 0:
		return fmt.Sprintf("%dm", us/algos.Minute)
	case us%algos.Second == 0:
		return fmt.Sprintf("%ds", us/algos.Second)
	case us%algos.Millisecond == 0:
		return fmt.Sprintf("%dms", us/algos.Millisecond)
	}
	return fmt.Sprintf("%dµs", us)
}
