// Package failover is Diana's cluster-mode store: it decides in Redis through redisstore and,
// when Redis cannot decide (down, slow or failing), gives each op the decision of its rule's fail
// policy instead. A short timeout bounds every round trip, and a circuit breaker stops calling
// Redis after a few consecutive failures, so that decisions stay fast while Redis is down; once
// in a while one caller probes Redis, and the first answer closes the breaker again. Everything
// happens inside Decide, but for the exchange of Options.Shares, which Decide starts in a
// goroutine of its own once an interval.
//
// With on_error local, the limit holds across an outage as a whole, not only in its middle: a
// node starts deciding a key alone from what it last learned from Redis for it, and writes back
// what it admitted alone when Redis returns, before it decides there again (transitions, in
// transition.go).
package failover

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"time"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// errWriteBack is the Err of the ops decided by their fail policy because the write-back that
// goes before them after an outage found Redis still unreachable.
var errWriteBack = errors.New("failover: Redis did not answer the write-back of the units admitted during the outage")

// ErrOpen is the Err of the ops decided by their fail policy while the breaker is open: Redis
// was not called.
var ErrOpen = errors.New("failover: circuit breaker open, Redis not called")

// The defaults of Options: a decision waits 50 ms for Redis at most; 3 failures in a row open
// the breaker, which stays open 1 s before a probe.
const (
	DefaultTimeout  = 50 * time.Millisecond
	DefaultFailures = 3
	DefaultOpenFor  = time.Second
)

// Options tune a Store. Zero or negative values take the defaults.
type Options struct {
	// Timeout bounds one Decide's round trip to Redis; default DefaultTimeout.
	Timeout time.Duration
	// Failures is the number of consecutive failed round trips that open the breaker; default
	// DefaultFailures.
	Failures int
	// OpenFor is how long the breaker stays open before one call probes Redis, and how long
	// after a failed probe the next one goes; default DefaultOpenFor. A Redis that is back is found within
	// OpenFor.
	OpenFor time.Duration
	// Local decides the ops whose policy is rules.FailLocal while Redis cannot, with the rule's
	// learned share (Shares) or else op.Fallback (op.Alg if nil); default a memstore of its own.
	Local *memstore.Store
	// Shares, if set, learns this node's share of the traffic of each rule whose policy is
	// rules.FailLocal, exchanging counts through Redis while it answers; nil: FailLocal always
	// decides with op.Fallback.
	Shares *Shares
	// OnState, if set, is told every change of the breaker's state, in order. It is called with
	// the breaker's lock held: it must return quickly and must not call Decide.
	OnState func(open bool)
	// Observe, if set, is told the duration of every round trip to Redis and its error: nil when
	// every op was decided, else the first op's error.
	Observe func(d time.Duration, err error)
	// OnStarved, if set, is told of a timed-out round trip that did not count against Redis
	// because the process itself was starved of CPU (see starvation), with the longest
	// scheduling wait seen.
	OnStarved func(wait time.Duration)
	// WriteBack, if set, writes back into Redis the units this node admitted on its own during an
	// outage (FailLocal), each once per its marker (redisstore.Store.WriteBack); nil: they are
	// not written back.
	WriteBack func(ctx context.Context, backs []redisstore.Back)
	// OnWriteBack, if set, is told of units admitted during an outage that this node gave up
	// writing back (Redis refused their write-back writeBackTries times, or too many keys owed
	// units), with the key and the last error.
	OnWriteBack func(key string, units int64, err error)
	// Node names this node in the write-back markers; default Shares' node name, or a name of its
	// own (host, process, random).
	Node string
	// Clock is the time in µs at which the learned states are kept and seeded; default
	// Local's clock, which it must be.
	Clock func() int64
}

// Store decides ops in Redis, falling back to their fail policies; it implements rules.Store
// and rules.Together, and is safe for concurrent use.
type Store struct {
	r    rules.Store
	held holder // r, when it answers some ops without a round trip
	// together is r as a rules.Together, nil if it is not one (DecideTogether's ops then fall to
	// their fail policies), and heldTogether when it answers some ops without a round trip.
	together     rules.Together
	heldTogether holderTogether
	o            Options
	b            breaker
	st           starvation
	tr           transitions
}

// holder is a store that answers some ops from what it holds, without a round trip to Redis, and
// says how many (*batch.Store): those say nothing about Redis.
type holder interface {
	DecideHeld(ctx context.Context, ops []*rules.Op) (held int)
}

// holderTogether is a holder of the limits of a request decided together (*batch.Store).
type holderTogether interface {
	DecideTogetherHeld(ctx context.Context, ops []*rules.Op, denied bool) (held int)
}

// New returns a Store deciding in r: *redisstore.Store, or *batch.Store in front of one. For
// Options.Timeout to bound a round trip, r's client must be made with ContextTimeoutEnabled.
func New(r rules.Store, o Options) *Store {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Failures <= 0 {
		o.Failures = DefaultFailures
	}
	if o.OpenFor <= 0 {
		o.OpenFor = DefaultOpenFor
	}
	if o.Local == nil {
		o.Local = memstore.New(memstore.Options{})
	}
	if o.Node == "" {
		if o.Shares != nil {
			o.Node = o.Shares.o.Node
		} else {
			o.Node = nodeName()
		}
	}
	if o.Clock == nil {
		o.Clock = o.Local.Now // the local states' clock: seeds are made at learned times
	}
	s := &Store{r: r, o: o}
	s.tr = transitions{store: o.Local, node: o.Node, clock: o.Clock, write: o.WriteBack, onGiveUp: o.OnWriteBack, seed: maphash.MakeSeed()}
	s.held, _ = r.(holder)
	s.together, _ = r.(rules.Together)
	s.heldTogether, _ = r.(holderTogether)
	s.b.failures = int32(min(o.Failures, 1<<30))
	s.b.openFor = o.OpenFor
	s.b.onState = o.OnState
	s.st.tick(time.Now()) // the first baseline
	return s
}

// Open reports whether the breaker is open: Redis failed Options.Failures times in a row and
// has not answered since (a probe may be under way).
func (s *Store) Open() bool { return s.b.state.Load() == isOpen }

// Decide decides ops in one round trip to Redis (redisstore.Store.Decide), bounded by
// Options.Timeout, unless the breaker is open and no probe is due: then Redis is not called at
// all.
//
// An op Redis decided gets its decision and a nil Err. Any other op gets the decision of its
// OnError policy, and Err says why (ErrOpen while the breaker is open, else the Redis error):
//   - FailOpen (and any unknown policy): allowed, Remaining = Limit = op.Alg.Script().Limit,
//     Granted = the request's cost;
//   - FailClosed: denied, Remaining 0, RetryAfter = ResetAfter = the time until the next probe,
//     or 1s when none is scheduled;
//   - FailLocal: op.Req is decided in Options.Local by the rule's limit at this node's learned
//     share of its traffic with Headroom (Options.Shares, op.Rule()), or, without history, by
//     op.Fallback (op.Alg if nil).
//
// A round trip fails, counting towards opening the breaker, when Redis decided none of its ops
// (a Redis error, a timeout, a refused connection); one that decided any closes the breaker.
// A timeout while the process itself was starved of CPU (a goroutine waited at least
// Options.Timeout for one in the last one to two seconds, by Go's scheduler metrics) does not
// count: the ops still get their fail policy's decision, but the breaker does not open on the
// process's own load. The operating system's run queue is not seen: a process starved by other
// processes still counts its timeouts (raise the timeout on such a machine).
// Ops a batching store answered from units it held (holder) count for neither.
// When ctx is done before or after the round trip, the caller went away: that is not Redis's
// fault and does not count as a failure; each op Redis did not decide gets Err = ctx.Err() and a
// zero Decision.
func (s *Store) Decide(ctx context.Context, ops []*rules.Op) {
	s.decide(ctx, ops, nil)
}

// DecideTogether implements rules.Together: it decides ops, the limits of one request, all or
// nothing in one round trip to Redis (the store behind's DecideTogether), behind the same timeout
// and breaker as Decide. The ops Redis does not decide get their fail policies' decisions as
// Decide gives them, all or nothing with the rest of the request: each as a dry run (FailLocal
// decides one in process memory), then, if no op of the request denies (shadows aside) and denied
// is false, each is committed (FailLocal's again, for real); otherwise only a FailLocal denial that
// starts a ban is. An op Redis decided keeps what Redis did: on a Redis Cluster, where a request's
// limits in several slots are several script calls, one slot's part may be committed while
// another's fails (rules.Together).
func (s *Store) DecideTogether(ctx context.Context, ops []*rules.Op, denied bool) {
	s.decide(ctx, ops, &denied)
}

// decide is Decide, or DecideTogether when together is not nil (its denied).
func (s *Store) decide(ctx context.Context, ops []*rules.Op, together *bool) {
	if len(ops) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for _, op := range ops {
			op.Dec, op.Err = algos.Decision{}, err
			if together != nil {
				op.Req.DryRun = true
			}
		}
		return
	}
	if sh := s.o.Shares; sh != nil {
		defer s.note(ctx, ops)
	}
	t, ok, retry := s.b.enter()
	if !ok {
		s.fallAll(ops, together, ErrOpen, retry)
		return
	}
	if sh := s.o.Shares; sh != nil && s.b.state.Load() == 0 && sh.due() {
		go sh.background()
	}
	// After an outage, what this node admitted alone goes back into Redis first: no decision
	// is made there before it.
	if s.tr.owing.Load() > 0 && !s.writeBack(ctx, ops, together, t) {
		return
	}
	held, took := s.roundTrip(ctx, ops, together)
	// The ops answered without a round trip have no error: the others are what Redis did.
	sent, decided, first := tally(ops, held)
	if s.o.Observe != nil && sent > 0 {
		s.o.Observe(took, first)
	}
	cerr := ctx.Err()
	s.learn(ops, sent, decided, cerr)
	if sent > 0 {
		retry = s.judge(t, decided > 0, first, cerr)
	} else {
		s.b.cancel(t) // every call was answered from batched units: nothing learnt about Redis
	}
	s.undecided(ops, together, retry, cerr)
}

// writeBack writes back into Redis what this node admitted alone during an outage, and reports
// whether Redis answered. If it did not, the ops are decided without it: each gets its fail
// policy's decision, or the caller's error when the caller went away.
func (s *Store) writeBack(ctx context.Context, ops []*rules.Op, together *bool, t ticket) bool {
	wctx, cancel := withTimeout(ctx, s.o.Timeout)
	answered, err := s.tr.writeBack(wctx)
	cancel()
	if answered {
		return true
	}
	if cerr := ctx.Err(); cerr != nil {
		s.b.cancel(t)
		for _, op := range ops {
			op.Dec, op.Err = algos.Decision{}, cerr
		}
		return false
	}
	s.tr.failed()
	retry := s.b.failure(t)
	s.fallAll(ops, together, fmt.Errorf("%w: %w", errWriteBack, err), retry)
	return false
}

// roundTrip decides ops in the store behind, bounded by Options.Timeout, and returns how many it
// answered from what it holds, without a round trip (holder), and how long it took.
func (s *Store) roundTrip(ctx context.Context, ops []*rules.Op, together *bool) (held int, took time.Duration) {
	tctx, cancel := withTimeout(ctx, s.o.Timeout)
	start := time.Now()
	s.st.tick(start)
	switch {
	case together == nil && s.held != nil:
		held = s.held.DecideHeld(tctx, ops)
	case together == nil:
		s.r.Decide(tctx, ops)
	case s.heldTogether != nil:
		held = s.heldTogether.DecideTogetherHeld(tctx, ops, *together)
	case s.together != nil:
		s.together.DecideTogether(tctx, ops, *together)
	default:
		err := fmt.Errorf("failover: the store behind (%T) cannot decide a request's limits together", s.r)
		for _, op := range ops {
			op.Dec, op.Err, op.Req.DryRun = algos.Decision{}, err, true
		}
	}
	took = time.Since(start)
	cancel()
	return held, took
}

// tally counts the ops of a call that went to Redis (all but the held ones) and those Redis
// decided, and returns the first error.
func tally(ops []*rules.Op, held int) (sent, decided int, first error) {
	sent, decided = len(ops)-held, -held
	for _, op := range ops {
		if op.Err == nil {
			decided++
		} else if first == nil {
			first = op.Err
		}
	}
	return sent, decided, first
}

// learn tells the transitions what a call said of Redis: it answered, and what it decided for
// each op, or it failed (unless the call went nowhere or the caller went away, cerr).
func (s *Store) learn(ops []*rules.Op, sent, decided int, cerr error) {
	switch {
	case decided > 0:
		s.tr.answered()
		for _, op := range ops {
			if op.Err == nil {
				s.tr.learn(op)
			}
		}
	case sent > 0 && cerr == nil:
		s.tr.failed()
	}
}

// judge tells the breaker what a round trip said of Redis (answered, or failed with first; cerr
// if the caller went away) and returns the time until the next probe: unknownRetry once closed,
// 0 when the round trip did not count.
func (s *Store) judge(t ticket, answered bool, first, cerr error) time.Duration {
	switch {
	case answered:
		s.b.success()
		return unknownRetry // closed: no probe is scheduled
	case cerr != nil:
		s.b.cancel(t)
	case isTimeout(first) && s.starved():
		s.b.cancel(t) // our scheduler's timeout, not Redis's
	default:
		return s.b.failure(t)
	}
	return 0
}

// fallAll gives every op its fail policy's decision, with err as its Err.
func (s *Store) fallAll(ops []*rules.Op, together *bool, err error, retry time.Duration) {
	for _, op := range ops {
		op.Err = err
	}
	s.fallbacks(ops, together, retry)
}

// undecided gives the ops Redis did not decide their fail policies' decisions, or the caller's
// error cerr when the caller went away.
func (s *Store) undecided(ops []*rules.Op, together *bool, retry time.Duration, cerr error) {
	if cerr != nil {
		for _, op := range ops {
			if op.Err != nil {
				op.Dec, op.Err = algos.Decision{}, cerr
			}
		}
		return
	}
	failed := false
	for _, op := range ops {
		if op.Err != nil {
			op.Err = fmt.Errorf("failover: %w", op.Err)
			failed = true
		}
	}
	if failed {
		s.fallbacks(ops, together, retry)
	}
}

// fallbacks gives the ops with an error their fail policies' decisions (fallback); for the ops
// of a request decided together (together: its denied), all or nothing with the ops Redis
// decided (see DecideTogether).
func (s *Store) fallbacks(ops []*rules.Op, together *bool, retry time.Duration) {
	if together == nil {
		for _, op := range ops {
			if op.Err != nil {
				s.fallback(op, op.Err, retry)
			}
		}
		return
	}
	admit := !*together
	for _, op := range ops {
		if op.Err != nil {
			op.Req.DryRun = true
			s.fallback(op, op.Err, retry)
		}
		if !op.Dec.Allowed && !op.Shadow {
			admit = false
		}
	}
	for _, op := range ops {
		if op.Err == nil {
			continue // Redis's
		}
		switch {
		case op.OnError != rules.FailLocal:
			op.Req.DryRun = !admit // nothing is kept
		case admit || !op.Shadow && !op.Dec.Allowed && op.Alg.Script().Ban > 0:
			op.Req.DryRun = false
			op.Dec = s.tr.local(op, s.localAlg(op))
		}
	}
}

// starved reports whether a timeout may be the process's own doing: a goroutine of the process
// waited for a CPU as long as the timeout in the last seconds. (How late the call came back
// would not tell: go-redis's dial retries overrun the deadline when Redis is down.)
func (s *Store) starved() bool {
	w := s.st.longest()
	if w < s.o.Timeout {
		return false
	}
	if s.o.OnStarved != nil {
		s.o.OnStarved(w)
	}
	return true
}

// isTimeout reports whether err is a timeout (the round trip's deadline, or the network's).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// fallback gives op the decision of its fail policy, with err as its Err. retry is the time
// until the next probe.
func (s *Store) fallback(op *rules.Op, err error, retry time.Duration) {
	op.Err = err
	switch op.OnError {
	case rules.FailClosed:
		us := retry.Microseconds()
		op.Dec = algos.Decision{Limit: op.Alg.Script().Limit, RetryAfter: us, ResetAfter: us}
	case rules.FailLocal:
		op.Dec = s.tr.local(op, s.localAlg(op))
	default:
		limit := op.Alg.Script().Limit
		op.Dec = algos.Decision{Allowed: true, Limit: limit, Remaining: limit, Granted: op.Req.Bounded().Cost}
	}
}

// localAlg is the algorithm FailLocal decides op with: the rule's learned share, or else
// op.Fallback, or op.Alg.
func (s *Store) localAlg(op *rules.Op) algos.Algorithm {
	if r := op.Rule(); r != nil && s.o.Shares != nil {
		if alg := s.o.Shares.alg(r); alg != nil {
			return alg
		}
	}
	if op.Fallback != nil {
		return op.Fallback
	}
	return op.Alg
}

// withTimeout is context.WithTimeout(ctx, d), or ctx itself when ctx ends no later: Envoy sends
// each rate limit call with a deadline of its own (the filter's timeout), and a context derived
// from it would cost every call a context, a place among ctx's children and a Done channel for
// the same end.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if end, ok := ctx.Deadline(); ok && time.Until(end) <= d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// note counts the decided ops in Options.Shares, unless the caller went away.
func (s *Store) note(ctx context.Context, ops []*rules.Op) {
	if ctx.Err() != nil {
		return
	}
	for _, op := range ops {
		s.o.Shares.note(op)
	}
}

// Call runs call as one round trip to Redis behind the same timeout and breaker as Decide, for
// a caller with Redis calls of its own beside the decisions (the rate limit quota service's
// fleet), so that an open breaker spares Redis, and the caller the timeouts, for both. While
// the breaker is open and no probe is due, Call returns ErrOpen without calling. call's outcome
// counts as a Decide's round trip does: an error (but the caller's going away, or a timeout of
// a starved process) towards opening the breaker, a success closes it; Observe is told of it.
func (s *Store) Call(ctx context.Context, call func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, ok, _ := s.b.enter()
	if !ok {
		return ErrOpen
	}
	tctx, cancel := withTimeout(ctx, s.o.Timeout)
	start := time.Now()
	s.st.tick(start)
	err := call(tctx)
	took := time.Since(start)
	cancel()
	if s.o.Observe != nil {
		s.o.Observe(took, err)
	}
	s.judge(t, err == nil, err, ctx.Err())
	return err
}
