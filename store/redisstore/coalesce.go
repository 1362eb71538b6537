package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// Concurrent decisions share round trips. A caller that finds no round trip under way sends its
// calls at once, so a lone caller waits for nothing but Redis. One that finds fewer than
// maxSending under way queues its calls and starts a round trip of its own, but first yields
// its CPU once (runtime.Gosched): the goroutines ready to run meanwhile, such as the handlers
// of other requests that have just come in, queue their calls behind it, and all go in that one
// round trip (a gathering; one at a time). One that finds them all busy queues its
// calls; when a round trip ends, every call queued meanwhile goes in one pipeline. Redis then
// reads, runs and answers many scripts per system call instead of one per decision
// (BenchmarkRedis, 64 goroutines), and the callers of one round trip go on together, so that a
// server's answers to them leave together too (BenchmarkRLS). Gathering costs a few goroutines
// that do nothing but decide some of their decisions per second, the round trips they would
// have had under way each (docs/performance.md).
//
// Each caller's calls stay together and in order, so they run as one Decide always ran them;
// calls of different callers are independent, as they were when they raced for connections.
// On a Redis Cluster, calls are not shared: a pipeline waits for its slowest node, and one node
// failing over must not hold up the decisions of the others.
//
// go-redis's auto-pipeliner (AsyncAutoPipeline, v9.22, experimental) was measured in this one's
// place and was slower at 1, 16 and 64 goroutines (docs/autopipeline.md): it pipelines commands
// but cannot merge different callers' decisions into one script call as flush does, it keeps
// one pipeline under way where this keeps maxSending, and it hands even a lone caller's command
// to two other goroutines where this sends it at once.

// maxSending is the number of round trips under way at once. A caller queued behind them waits
// for a round trip to end and for two goroutine switches, which pays only when Redis, not the
// wait, is what holds decisions up: chosen with BenchmarkRedis beside the code without sharing,
// where fewer made a few goroutines slower than no sharing and more made 64 gain less
// (docs/autopipeline.md).
const maxSending = 4

// flusherIdle is how long a flusher waits for the next queue before it exits. A flusher is a
// goroutine that sends the queued calls: kept while the store is busy, its stack, grown by
// go-redis's pipeline, serves the next round trip (a new goroutine per round trip spent a
// visible share of BenchmarkRLSService's CPU growing its stack; docs/autopipeline.md).
const flusherIdle = time.Second

// coalescer queues the calls that wait for a round trip.
type coalescer struct {
	mu        sync.Mutex
	sending   int            // round trips under way, a gathering's among them
	gathering bool           // a caller has queued its calls and yields before it sends them
	queue     []*waiter      // calls that wait for a gathering or for a round trip to end
	work      chan []*waiter // unbuffered: a queue handed to an idle flusher
}

// waiter is one Decide's calls in the queue. They are a copy, decided in place, so that a
// caller whose context ends first can leave: the round trip then writes to no memory of its.
type waiter struct {
	ctx              context.Context
	calls            []rules.Op
	together, denied bool          // DecideTogether's (see group)
	done             chan struct{} // closed once calls are decided
}

// Decide implements rules.Store: it decides every call in one round trip (one script call, see
// send; the calls are independent: each is atomic on its own key), shared with the calls of
// other goroutines that are waiting at the same moment. Each call's result or error is set on
// it. On NOSCRIPT, the affected calls are retried once with EVAL in a second pipeline.
//
// Calls run in slice order on one Redis node, so calls on one key see each other as sequential
// Decide calls would; on a Cluster client, go-redis sends one pipeline per node and keeps the
// order within each; a call retried after NOSCRIPT runs after the calls that did not need it. A
// call that cannot be sent (no script for its algorithm, a dry release) gets its error and the
// others go ahead. A caller whose ctx ends while its calls wait for a round trip gets ctx's
// error on each; calls already sent may still be applied by Redis, as after any timeout.
func (s *Store) Decide(ctx context.Context, calls []*rules.Op) {
	s.decide(ctx, group{ops: calls})
}

// decide decides g's calls (Decide's or DecideTogether's) in a round trip shared with the calls
// of other goroutines.
func (s *Store) decide(ctx context.Context, g group) {
	calls := g.ops
	if len(calls) == 0 {
		return
	}
	if s.cluster {
		if g.together && s.apart(g.ops) {
			s.twoPhases(ctx, g)
			return
		}
		s.send(ctx, []group{g})
		return
	}
	co := &s.co
	co.mu.Lock()
	if co.sending == 0 {
		co.sending++
		co.mu.Unlock()
		gs := [1]group{g}
		s.send(ctx, gs[:])
		s.ended()
		return
	}
	w := &waiter{ctx: ctx, calls: make([]rules.Op, len(calls)), together: g.together, denied: g.denied, done: make(chan struct{})}
	for i, c := range calls {
		w.calls[i] = *c
	}
	co.queue = append(co.queue, w)
	gather := co.sending < maxSending && !co.gathering
	if gather {
		co.sending++
		co.gathering = true
	}
	co.mu.Unlock()
	if gather {
		runtime.Gosched()
		co.mu.Lock()
		co.gathering = false
		q := co.queue // w among them, unless a round trip that ended took it
		co.queue = nil
		if len(q) == 0 {
			co.sending--
		}
		co.mu.Unlock()
		if len(q) > 0 {
			s.flush(q)
			s.ended()
		}
	}
	select {
	case <-w.done:
		for i, c := range calls {
			*c = w.calls[i]
		}
	case <-ctx.Done():
		for _, c := range calls {
			c.Dec, c.Err = algos.Decision{}, fmt.Errorf("redisstore: %s on %q: %w", scriptName(c), c.Key, s.dials.explain(ctx.Err()))
			if g.together {
				c.Req.DryRun = true // not known to be committed
			}
		}
	}
}

// ended ends a round trip: the calls queued meanwhile go in the next one.
func (s *Store) ended() {
	if q := s.next(); q != nil {
		s.hand(q)
	}
}

// next ends a round trip and returns the calls queued meanwhile, which go together in the next
// one (the round trip stays under way); nil when none are (it no longer is).
func (s *Store) next() []*waiter {
	co := &s.co
	co.mu.Lock()
	defer co.mu.Unlock()
	q := co.queue
	co.queue = nil
	if len(q) == 0 {
		co.sending--
	}
	return q
}

// hand gives q to an idle flusher, or to a new one, so that the caller whose round trip ended
// returns now.
func (s *Store) hand(q []*waiter) {
	select {
	case s.co.work <- q:
	default:
		go s.flusher(q)
	}
}

// flusher sends q, then each queue that came meanwhile, then the queues handed to it, until it
// has waited flusherIdle for one.
func (s *Store) flusher(q []*waiter) {
	idle := time.NewTimer(flusherIdle)
	defer idle.Stop()
	for {
		for q != nil {
			s.flush(q)
			q = s.next()
		}
		idle.Reset(flusherIdle) // Go 1.23's timers: no stale tick to drain
		select {
		case q = <-s.co.work:
		case <-idle.C:
			return
		}
	}
}

// flush sends the calls of q, but those whose caller has left, in one round trip.
func (s *Store) flush(q []*waiter) {
	n := 0
	var deadline time.Time // the latest of the callers' deadlines; none if one has none
	endless := false
	for _, w := range q {
		if w.ctx.Err() != nil {
			continue
		}
		q[n] = w
		n++
		if d, ok := w.ctx.Deadline(); !ok {
			endless = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if q = q[:n]; n == 0 {
		return
	}
	// No one caller's cancellation ends the others' round trip; each still leaves at its own.
	ctx := context.WithoutCancel(q[0].ctx)
	if !endless {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	total := 0
	for _, w := range q {
		total += len(w.calls)
	}
	all := make([]*rules.Op, 0, total)
	gs := make([]group, len(q))
	for i, w := range q {
		start := len(all)
		for j := range w.calls {
			all = append(all, &w.calls[j])
		}
		gs[i] = group{ops: all[start:], together: w.together, denied: w.denied}
	}
	s.send(ctx, gs)
	for _, w := range q {
		close(w.done)
	}
}

// scriptName names c's script in an error, as the round trip's errors do.
func scriptName(c *rules.Op) string {
	if c.Alg == nil {
		return "?"
	}
	return c.Alg.Script().Name
}
