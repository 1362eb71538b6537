// Package sim measures how accurately Diana's algorithms limit, in each deployment mode: it
// replays request traces, generated deterministically from a seed, through every algorithm in
// local mode (each node on its own, with the full limit or the limit divided by the node
// count), cluster mode (every decision in the shared Redis), batched mode (nodes spending
// batches of units taken from Redis) and failover mode (cluster mode through an outage of
// Redis), in virtual time, and compares what each admitted with what the algorithm's exact
// contract admits. WriteDir writes the data (accuracy.json, Data), the report rendered from it
// alone (accuracy.md) and SVG charts.
//
// Virtual time makes a run repeatable on any machine: memory stores read the run's clock, and
// the Redis scripts take the time from the request (redisstore's CallerClock) instead of Redis
// TIME. Redis still expires keys on its own clock; with a caller's time the scripts add an hour
// to every TTL (KeyLife measures it), so a key outlives any run shorter than that however slow
// the machine, and each run's keys are its own (their prefix names the run).
package sim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// DefaultLimit returns the limit of a standard run: 100 requests per minute per client.
func DefaultLimit() Limit { return Limit{Units: 100, Window: algos.Minute} }

// Options configure a Run.
type Options struct {
	Seed   uint64 // recorded in the report; the traces carry their own randomness
	Limit  Limit  // every algorithm's limit (see Algorithms)
	Traces []*Trace
	// EstimateTraces are traces on which only the estimates' wrong decisions are measured
	// (Algo.Estimate; see Wrong), in Go: no mode replays them.
	EstimateTraces []*Trace
	Algos          []Algo // default Algorithms(Limit, Limit.Window/5)
	Modes          []Mode
	// Parallel is the number of runs at once (default 2). Runs are independent, so the results
	// do not depend on it.
	Parallel int
	// Progress, if set, is called after each run with the number done and the total.
	Progress func(done, total int)
	// KeyLife is the least real time a Redis key outlives its last write (KeyLife measures
	// it); required when a mode keeps state in Redis. A run taking longer is refused: its keys
	// could have expired in the middle of it.
	KeyLife time.Duration
}

// Report holds every figure of a Run.
type Report struct {
	Seed   uint64
	Limit  Limit
	Traces []*Trace
	// EstimateTraces are Options.EstimateTraces: only Wrong covers them.
	EstimateTraces []*Trace
	Algos          []Algo
	Modes          []Mode
	Results        []Result      // for each trace, each algorithm, each mode, in that order
	Wrong          []Wrong       // each estimate's wrong decisions (Algo.Estimate), per trace then algorithm
	Series         []Series      // per trace, for the charts
	Batch          *BatchOptions // batched mode's batch block, if it runs (for the report)
	Elapsed        time.Duration
}

// Result returns the result of a run, if there was one.
func (r *Report) Result(trace, algo, mode string) (Result, bool) {
	for _, x := range r.Results {
		if x.Trace == trace && x.Algo == algo && x.Mode == mode {
			return x, true
		}
	}
	return Result{}, false
}

// Series is the traffic of a trace's busiest client over time: at every Step µs from the
// trace's start, the requests of the preceding window (Limit.Window), which the limit bounds.
type Series struct {
	Trace   string
	Key     int32 // the busiest client
	Step    int64 // µs between samples; sample i is at Start + (i+1)·Step
	Offered []int64
	// Admitted[a][m] is what algorithm Algos[a] admitted in mode Modes[m] (nil if the mode does
	// not run it); Ideal[a], what its contract admits.
	Admitted [][][]int64
	Ideal    [][]int64
}

// Run replays every trace through every algorithm in every mode.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if o.Limit.Units <= 0 || o.Limit.Window <= 0 {
		return nil, fmt.Errorf("sim: Options.Limit must have Units and Window above 0, got %d per %d µs", o.Limit.Units, o.Limit.Window)
	}
	if len(o.Traces) == 0 || len(o.Modes) == 0 {
		return nil, errors.New("sim: Options.Traces and Options.Modes must not be empty")
	}
	if o.Algos == nil {
		o.Algos = Algorithms(o.Limit, o.Limit.Window/5)
	}
	names := map[string]bool{}
	for _, m := range o.Modes {
		if names[m.Name] {
			return nil, fmt.Errorf("sim: Options.Modes: two modes are named %q (results are told apart by name)", m.Name)
		}
		names[m.Name] = true
		if m.Redis && o.KeyLife <= 0 {
			return nil, fmt.Errorf("sim: Options.KeyLife must be set for mode %s, which keeps state in Redis (see KeyLife)", m.Name)
		}
	}
	for _, a := range o.Algos {
		if names["algo "+a.Name] {
			return nil, fmt.Errorf("sim: Options.Algos: two algorithms are named %q (results are told apart by name)", a.Name)
		}
		names["algo "+a.Name] = true
	}
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	rep := &Report{Seed: o.Seed, Limit: o.Limit, Traces: o.Traces, EstimateTraces: o.EstimateTraces, Algos: o.Algos, Modes: o.Modes}

	// The reference: each algorithm's contract deciding every offered request in one place.
	ideal := make([][][]bool, len(o.Traces))
	for ti, t := range o.Traces {
		ideal[ti] = make([][]bool, len(o.Algos))
		for ai, a := range o.Algos {
			c, err := a.Contract()
			if err != nil {
				return nil, fmt.Errorf("sim: %s: %w", a.Name, err)
			}
			if ideal[ti][ai], err = exact(t.Events, hold(t, a), c); err != nil {
				return nil, err
			}
		}
	}
	// Each estimate's wrong decisions, on every trace.
	for _, t := range append(append([]*Trace(nil), o.Traces...), o.EstimateTraces...) {
		for _, a := range o.Algos {
			if !a.Estimate {
				continue
			}
			est, err := a.New(1)
			if err != nil {
				return nil, fmt.Errorf("sim: %s: %w", a.Name, err)
			}
			meter, err := a.Meter()
			if err != nil {
				return nil, fmt.Errorf("sim: %s: %w", a.Name, err)
			}
			w, err := wrongDecisions(t, est, meter, o.Limit.Units, o.Limit.Window)
			if err != nil {
				return nil, err
			}
			w.Algo = a.Name
			rep.Wrong = append(rep.Wrong, w)
		}
	}

	nonce := strconv.FormatInt(time.Now().UnixNano(), 36) // keeps the Redis keys of two runs apart
	nt, na, nm := len(o.Traces), len(o.Algos), len(o.Modes)
	rep.Results = make([]Result, nt*na*nm)
	admitted := make([][]bool, len(rep.Results))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		done     int
	)
	sem := make(chan struct{}, o.Parallel)
	for i := range rep.Results {
		t, a, m := o.Traces[i/(na*nm)], o.Algos[i/nm%na], o.Modes[i%nm]
		r := &rep.Results[i]
		*r = Result{Trace: t.Name, Algo: a.Name, Mode: m.Name}
		if m.Supports != nil && !m.Supports(a) {
			r.Skipped = m.Name + " mode does not support " + a.Name
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			flags, err := runOne(ctx, nonce, t, a, m, o.KeyLife, r)
			if err == nil {
				admitted[i] = flags
				err = measure(r, t, a, m.outages(t), flags, ideal[i/(na*nm)][i/nm%na])
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("sim: trace %s, %s, %s mode: %w", t.Name, a.Name, m.Name, err)
				cancel()
			}
			done++
			if o.Progress != nil {
				o.Progress(done, len(rep.Results))
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}

	for ti, t := range o.Traces {
		s := Series{Trace: t.Name, Key: busiest(t), Step: max(1, o.Limit.Window/20)}
		count := func(flags []bool) []int64 { return perWindow(t, s.Key, s.Step, o.Limit.Window, flags) }
		s.Offered = count(nil)
		for ai := range o.Algos {
			s.Ideal = append(s.Ideal, count(ideal[ti][ai]))
			var ms [][]int64
			for mi := range o.Modes {
				var b []int64
				if flags := admitted[(ti*na+ai)*nm+mi]; flags != nil {
					b = count(flags)
				}
				ms = append(ms, b)
			}
			s.Admitted = append(s.Admitted, ms)
		}
		rep.Series = append(rep.Series, s)
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// hold is how long a request of t stays in flight under a: t.Hold for the concurrency limit,
// else 0 (no lease).
func hold(t *Trace, a Algo) int64 {
	if a.InFlight {
		return t.Hold
	}
	return 0
}

// runOne replays t through a in mode m on t.Nodes nodes and reports which requests were
// admitted, filling r's Redis call counts. keyLife is Options.KeyLife.
func runOne(ctx context.Context, nonce string, t *Trace, a Algo, m Mode, keyLife time.Duration, r *Result) ([]bool, error) {
	div := int64(1)
	if m.Split {
		div = int64(t.Nodes)
	}
	alg, err := a.New(div)
	if err != nil {
		return nil, err
	}
	if m.Wrap != nil {
		if alg, err = m.Wrap(alg); err != nil {
			return nil, err
		}
	}
	op := rules.Op{Alg: alg}
	if m.Fallback {
		r, err := a.Rule(t.Nodes)
		if err != nil {
			return nil, err
		}
		op = rules.NewOp(r, "", algos.Request{})
		op.Alg = alg // the rule's own (TestAlgoRules), or the mode's wrapping of it
	}
	op.Batch, _ = alg.(*rules.Batched) // the batched mode's wrapping
	var (
		now   int64
		calls Calls
	)
	stores, err := m.Stores(nonce+":"+t.Name+":"+a.Name+":"+m.Name, t, func() int64 { return now }, &calls) // unique: Run checks the names
	if err != nil {
		return nil, err
	}
	if len(stores) != t.Nodes {
		return nil, fmt.Errorf("mode built %d stores for %d nodes", len(stores), t.Nodes)
	}
	keys := make([]string, t.Keys)
	for i := range keys {
		keys[i] = "c" + strconv.Itoa(i)
	}
	var tickers []Ticker
	for _, s := range stores {
		if tk, ok := s.(Ticker); ok {
			tickers = append(tickers, tk)
		}
	}
	tick := t.Start + algos.Second // the next Tick
	began := time.Now()
	flags, err := replay(t.Events, hold(t, a), func(ev Event, req algos.Request) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		for ; len(tickers) > 0 && tick <= req.Now; tick += algos.Second {
			now = tick
			for _, tk := range tickers {
				if err := tk.Tick(ctx); err != nil {
					return false, err
				}
			}
		}
		now = req.Now
		op.Key, op.Req = keys[ev.Key], req
		return decideOne(ctx, stores[ev.Node], op)
	})
	r.RedisCalls, r.RoundTrips = calls.Scripts.Load(), calls.RoundTrips.Load()
	// Every key this run wrote lives at least keyLife past its last write, on Redis's clock:
	// only a run longer than that could have lost state early.
	if real := time.Since(began); err == nil && m.Redis && real >= keyLife {
		return nil, fmt.Errorf("the replay took %s, as long as a Redis key is sure to live (%s): state may have expired early", real.Round(time.Millisecond), keyLife)
	}
	return flags, err
}

// busiest returns the client with the most requests in t (the lowest on a tie).
func busiest(t *Trace) int32 {
	n := make([]int, t.Keys)
	best := int32(0)
	for _, ev := range t.Events {
		n[ev.Key]++
		if n[ev.Key] > n[best] || n[ev.Key] == n[best] && ev.Key < best {
			best = ev.Key
		}
	}
	return best
}

// perWindow samples, every step µs from t.Start, how many requests of client key in t came in
// the preceding window of w µs, (at − w, at]: only those flagged if flags is not nil.
func perWindow(t *Trace, key int32, step, w int64, flags []bool) []int64 {
	var ts []int64
	for i, ev := range t.Events {
		if ev.Key == key && (flags == nil || flags[i]) {
			ts = append(ts, ev.At)
		}
	}
	out := make([]int64, (t.End-t.Start)/step)
	lo, hi := 0, 0
	for i := range out {
		at := t.Start + int64(i+1)*step
		for hi < len(ts) && ts[hi] <= at {
			hi++
		}
		for lo < hi && ts[lo] <= at-w {
			lo++
		}
		out[i] = int64(hi - lo)
	}
	return out
}
