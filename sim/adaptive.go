package sim

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/diana-gw/diana/shared/algos"
)

// The adaptive-limit simulator: a backend of c servers with a FIFO queue (M/G/c: service time
// 5 ms + an exponential of mean 5 ms, so capacity c / 10 ms), offered Poisson load ramping from
// 0.5× to 3× its capacity, each request admitted or refused by a concurrency limiter in front.
// Everything runs in virtual time from a seeded generator: a run is deterministic and takes
// well under a second of wall time.

// AdBackend is a simulated service.
type AdBackend struct {
	Servers   int   // c
	HalveAt   int64 // µs: at this time the servers halve (0: never)
	SlowAt    int64 // µs: from this time every service takes twice as long (0: never)
	ServiceUs int64 // the service time's constant part; the exponential part has the same mean
	// Shedding (ShedUs > 0): a request that arrives while every server is busy and ShedQueue
	// or more wait is refused with a 503 that takes a server ShedUs, ahead of the queue (the
	// server reads it and answers at once): fast, but not free.
	ShedQueue int
	ShedUs    int64
}

// Capacity is the backend's throughput at saturation, requests per second, before any halving.
func (b AdBackend) Capacity() float64 { return float64(b.Servers) * 1e6 / float64(2*b.ServiceUs) }

// AdLoad is the offered load: from From× to To× the backend's capacity over RampUs, then To×.
type AdLoad struct {
	From, To float64
	RampUs   int64
}

// AdLimiter is a concurrency limiter in front of the backend.
type AdLimiter interface {
	Name() string
	Admit(now int64) bool
	Done(now, latency int64, dropped bool) // dropped: the backend refused it (503)
	Limit() int64                          // the current limit, for the charts (0: none)
}

// AdRun is the outcome of one simulation.
type AdRun struct {
	AdLimiter string
	// Per 100 ms bucket: admitted requests completed, their latencies' P99 (µs), the limit.
	Goodput []float64 // requests per second
	P99     []int64
	Limits  []int64
	// Latencies of completed requests with their completion time, for windows; when the
	// backend's 503s came.
	done []sample
	shed []int64
}

type sample struct{ at, latency int64 }

const bucketUs = 100 * algos.Millisecond

type event struct {
	at      int64
	arrival bool
	start   int64 // a completion: when the request was admitted
	shed    bool  // a completion: a 503
}

type events []event

func (e events) Len() int           { return len(e) }
func (e events) Less(i, j int) bool { return e[i].at < e[j].at }
func (e events) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)        { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// AdSimulate runs lim in front of b under load for durUs, with the generator seeded by seed.
func AdSimulate(b AdBackend, load AdLoad, lim AdLimiter, durUs int64, seed uint64) AdRun {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	service := func(now int64) int64 {
		d := b.ServiceUs + int64(rng.ExpFloat64()*float64(b.ServiceUs))
		if b.SlowAt > 0 && now >= b.SlowAt {
			d *= 2
		}
		return d
	}
	rate := func(now int64) float64 { // arrivals per µs
		f := load.To
		if now < load.RampUs {
			f = load.From + (load.To-load.From)*float64(now)/float64(load.RampUs)
		}
		return f * b.Capacity() / 1e6
	}
	n := int(durUs / bucketUs)
	run := AdRun{AdLimiter: lim.Name(), Goodput: make([]float64, n), P99: make([]int64, n), Limits: make([]int64, n)}
	var q events
	heap.Push(&q, event{at: 0, arrival: true})
	busy, servers := 0, b.Servers
	var waiting, shedding []int64 // admission times of queued requests and of 503s to send, FIFO
	for q.Len() > 0 {
		ev := heap.Pop(&q).(event)
		now := ev.at
		if now >= durUs {
			break
		}
		if b.HalveAt > 0 && now >= b.HalveAt && servers == b.Servers {
			servers = b.Servers / 2
		}
		if ev.arrival {
			heap.Push(&q, event{at: now + 1 + int64(rng.ExpFloat64()/rate(now)), arrival: true})
			if !lim.Admit(now) {
				continue
			}
			switch {
			case busy < servers:
				busy++
				heap.Push(&q, event{at: now + service(now), start: now})
			case b.ShedUs > 0 && len(waiting) >= b.ShedQueue:
				shedding = append(shedding, now)
			default:
				waiting = append(waiting, now)
			}
			continue
		}
		latency := now - ev.start
		lim.Done(now, latency, ev.shed)
		if ev.shed {
			run.shed = append(run.shed, now)
		} else {
			run.done = append(run.done, sample{now, latency})
		}
		busy--
		for busy < servers && len(shedding) > 0 {
			busy++
			heap.Push(&q, event{at: now + b.ShedUs, start: shedding[0], shed: true})
			shedding = shedding[1:]
		}
		for busy < servers && len(waiting) > 0 {
			busy++
			heap.Push(&q, event{at: now + service(now), start: waiting[0]})
			waiting = waiting[1:]
		}
		if i := int(now / bucketUs); i < n {
			run.Limits[i] = lim.Limit()
		}
	}
	for i := range n {
		from, to := int64(i)*bucketUs, int64(i+1)*bucketUs
		lat := run.latencies(from, to)
		run.Goodput[i] = float64(len(lat)) * 1e6 / float64(bucketUs)
		run.P99[i] = p99of(lat, 99)
	}
	return run
}

// latencies returns the latencies of the requests completed in [from, to).
func (r *AdRun) latencies(from, to int64) []int64 {
	lo, _ := slices.BinarySearchFunc(r.done, from, func(s sample, t int64) int { return cmpInt(s.at, t) })
	hi, _ := slices.BinarySearchFunc(r.done, to, func(s sample, t int64) int { return cmpInt(s.at, t) })
	out := make([]int64, 0, hi-lo)
	for _, s := range r.done[lo:hi] {
		out = append(out, s.latency)
	}
	return out
}

// Window returns the goodput (requests per second) and the P99 latency (µs) of [from, to).
func (r *AdRun) Window(from, to int64) (float64, int64) {
	lat := r.latencies(from, to)
	return float64(len(lat)) * 1e6 / float64(to-from), p99of(lat, 99)
}

// Shed returns the share of the requests the backend answered in [from, to) that were 503s.
func (r *AdRun) Shed(from, to int64) float64 {
	lo, _ := slices.BinarySearch(r.shed, from)
	hi, _ := slices.BinarySearch(r.shed, to)
	n := len(r.latencies(from, to))
	if hi-lo+n == 0 {
		return 0
	}
	return float64(hi-lo) / float64(hi-lo+n)
}

// Converged returns how long after at the run's P99, over windows of 500 ms, stays at most
// bound until end; -1 if it never does.
func (r *AdRun) Converged(at, end, bound int64) int64 {
	const w = 500 * algos.Millisecond
	last := int64(-1) // the end of the last window over the bound
	for t := at; t+w <= end; t += bucketUs {
		if _, p := r.Window(t, t+w); p > bound {
			last = t + w
		}
	}
	switch {
	case last < 0:
		return 0
	case last+w > end:
		return -1
	}
	return last - at
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// p99of returns the p-th percentile of v (nearest rank; 0 for none); v is sorted in place.
func p99of(v []int64, p int) int64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := (len(v)*p + 99) / 100
	return v[max(i-1, 0)]
}

// NoLimit admits everything.
type NoLimit struct{}

func (NoLimit) Name() string            { return "no limit" }
func (NoLimit) Admit(int64) bool        { return true }
func (NoLimit) Done(int64, int64, bool) {}
func (NoLimit) Limit() int64            { return 0 }

// Static is a fixed concurrency limit.
type Static struct {
	Max      int64
	inflight int64
}

func (s *Static) Name() string            { return "static " + strconv.FormatInt(s.Max, 10) }
func (s *Static) Done(int64, int64, bool) { s.inflight-- }
func (s *Static) Limit() int64            { return s.Max }
func (s *Static) Admit(int64) bool {
	if s.inflight >= s.Max {
		return false
	}
	s.inflight++
	return true
}

// Adaptive is Diana's algorithm, algos.Adaptive, on one state.
type Adaptive struct {
	Alg *algos.Adaptive
	st  algos.State
}

func (a *Adaptive) Name() string { return "diana adaptive" }
func (a *Adaptive) Admit(now int64) bool {
	return a.Alg.Decide(&a.st, algos.Request{Now: now, Cost: 1}).Allowed
}
func (a *Adaptive) Done(now, latency int64, dropped bool) {
	a.Alg.Decide(&a.st, algos.Request{Now: now, Cost: 1, Release: true, Latency: latency, Dropped: dropped})
}

// LatencyOnly is a limiter told nothing of the backend's 503s: each is a request that took its
// latency, as a front end that did not report drops would have it.
type LatencyOnly struct{ AdLimiter }

func (l LatencyOnly) Name() string                    { return l.AdLimiter.Name() + ", latency only" }
func (l LatencyOnly) Done(now, latency int64, _ bool) { l.AdLimiter.Done(now, latency, false) }
func (a *Adaptive) Limit() int64                      { return a.Alg.Limit(&a.st) }

// Gradient2 is Netflix concurrency-limits' Gradient2Limit as published (defaults: initial 20,
// smoothing 0.2, queue size 4, long window 600), updated on every sample with the requests in
// flight when it was admitted; min and max limits as ours, for a fair comparison. Like the
// original, it takes a dropped request's latency as a sample, and nothing else of the drop.
type Gradient2 struct {
	MinLimit, MaxLimit float64
	limit              float64
	long               float64 // ExpAvgMeasurement(600, 10): a plain average of the first 10
	n                  int
	inflight           int64
	admitted           map[int64][]int64 // admission time → inflight then (a request's record)
}

func (g *Gradient2) Name() string { return "Gradient2 (Netflix)" }
func (g *Gradient2) Admit(now int64) bool {
	if g.limit == 0 {
		g.limit = 20
	}
	if float64(g.inflight) >= math.Floor(g.limit) {
		return false
	}
	g.inflight++
	g.record(now)
	return true
}
func (g *Gradient2) record(now int64) {
	if g.admitted == nil {
		g.admitted = map[int64][]int64{}
	}
	g.admitted[now] = append(g.admitted[now], g.inflight)
}
func (g *Gradient2) inflightAt(start int64) int64 {
	l := g.admitted[start]
	v := l[0]
	if len(l) == 1 {
		delete(g.admitted, start)
	} else {
		g.admitted[start] = l[1:]
	}
	return v
}
func (g *Gradient2) Done(now, rtt int64, _ bool) {
	inflight := g.inflightAt(now - rtt)
	g.inflight--
	short := float64(rtt)
	g.n++
	if g.n <= 10 {
		g.long += (short - g.long) / float64(g.n)
	} else {
		f := 2.0 / 601
		g.long = g.long*(1-f) + short*f
	}
	if g.long/short > 2 {
		g.long *= 0.9
	}
	if float64(inflight) < g.limit/2 {
		return
	}
	grad := math.Max(0.5, math.Min(1.0, g.long/short))
	nl := g.limit*grad + 4
	nl = g.limit*(1-0.2) + nl*0.2
	g.limit = math.Max(g.MinLimit, math.Min(g.MaxLimit, nl))
}
func (g *Gradient2) Limit() int64 { return int64(g.limit) }

// Vegas is Netflix concurrency-limits' VegasLimit as published (defaults: initial 20, alpha
// 3·log10, beta 6·log10, threshold log10, increase and decrease by log10, smoothing 1, a probe
// of rtt_noload every 30 × limit × jitter samples, jitter in [0.5, 1) from the run's seed). A
// dropped request is a sample too, which, past the probe and rtt_noload checks, decreases the
// limit by log10 (didDrop).
type Vegas struct {
	MaxLimit float64
	Seed     uint64
	limit    float64
	noload   int64
	probes   int
	jitter   float64
	rng      *rand.Rand
	g        Gradient2 // for its bookkeeping of inflight at admission
}

func (v *Vegas) Name() string { return "Vegas (Netflix)" }
func (v *Vegas) Admit(now int64) bool {
	if v.limit == 0 {
		v.limit = 20
		v.rng = rand.New(rand.NewPCG(v.Seed, 7))
		v.jitter = 0.5 + v.rng.Float64()/2
	}
	if float64(v.g.inflight) >= math.Floor(v.limit) {
		return false
	}
	v.g.inflight++
	v.g.record(now)
	return true
}
func log10i(l float64) float64 { return math.Max(1, math.Floor(math.Log10(l))) }
func (v *Vegas) Done(now, rtt int64, dropped bool) {
	inflight := v.g.inflightAt(now - rtt)
	v.g.inflight--
	v.probes++
	if v.jitter*30*v.limit <= float64(v.probes) {
		v.jitter = 0.5 + v.rng.Float64()/2
		v.probes = 0
		v.noload = rtt
		return
	}
	if v.noload == 0 || rtt < v.noload {
		v.noload = rtt
		return
	}
	l := v.limit
	if dropped {
		v.limit = math.Max(1, l-log10i(l))
		return
	}
	if float64(inflight)*2 < v.limit {
		return
	}
	queue := math.Ceil(v.limit * (1 - float64(v.noload)/float64(rtt)))
	alpha, beta, threshold := 3*log10i(l), 6*log10i(l), log10i(l)
	switch {
	case queue <= threshold:
		l += beta
	case queue < alpha:
		l += log10i(l)
	case queue > beta:
		l -= log10i(l)
	default:
		return
	}
	v.limit = math.Max(1, math.Min(v.MaxLimit, l))
}
func (v *Vegas) Limit() int64 { return int64(v.limit) }
