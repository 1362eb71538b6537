// Package failover is Diana's cluster-mode store: it decides in Redis through redisstore and,
// when Redis cannot decide (down, slow or failing), gives each op the decision of its rule's fail
// policy instead. A short timeout bounds every round trip, and a circuit breaker stops calling
// Redis after a few consecutive failures, so that decisions stay fast while Redis is down; once
// in a while one caller probes Redis, and the first answer closes the breaker again. Everything
// happens inside Decide, but for the exchange of Options.Shares, which Decide starts in a
// goroutine of its own once an interval.
package failover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// ErrOpen is the Err of the ops decided by their fail policy while the breaker is open: Redis
// was not called.
var ErrOpen = errors.New("failover: circuit breaker open, Redis not called")

// The defaults of Options, which every front end's settings take too (store/stack.Redis).
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
	// after a failed probe the next one goes; default DefaultOpenFor. A Redis that is back is
	// found within OpenFor.
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
}

// Backend decides calls in Redis: *redisstore.Store, or *batch.Store in front of one.
type Backend interface {
	DecideAll(ctx context.Context, calls []redisstore.Call)
}

// Store decides ops in Redis, falling back to their fail policies; it implements rules.Store
// and is safe for concurrent use.
type Store struct {
	r  Backend
	o  Options
	b  breaker
	st starvation
}

// New returns a Store deciding in r. For Options.Timeout to bound a round trip, r's client must
// be made with ContextTimeoutEnabled.
func New(r Backend, o Options) *Store {
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
	s := &Store{r: r, o: o}
	s.b.failures = int32(min(o.Failures, 1<<30))
	s.b.openFor = o.OpenFor
	s.b.onState = o.OnState
	s.st.tick(time.Now()) // the first baseline
	return s
}

// Open reports whether the breaker is open: Redis failed Options.Failures times in a row and
// has not answered since (a probe may be under way).
func (s *Store) Open() bool { return s.b.state.Load() == isOpen }

// Decide decides ops in one round trip to Redis (redisstore.DecideAll), bounded by
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
// Calls a batching backend answered from units it held (Call.Cached) count for neither.
// When ctx is done before or after the round trip, the caller went away: that is not Redis's
// fault and does not count as a failure; each op Redis did not decide gets Err = ctx.Err() and a
// zero Decision.
func (s *Store) Decide(ctx context.Context, ops []*rules.Op) {
	if len(ops) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for _, op := range ops {
			op.Dec, op.Err = algos.Decision{}, err
		}
		return
	}
	if sh := s.o.Shares; sh != nil {
		defer s.note(ctx, ops)
	}
	t, ok, retry := s.b.enter()
	if !ok {
		for _, op := range ops {
			s.fallback(op, ErrOpen, retry)
		}
		return
	}
	if sh := s.o.Shares; sh != nil && s.b.state.Load() == 0 && sh.due() {
		go sh.background()
	}

	calls := make([]redisstore.Call, len(ops))
	for i, op := range ops {
		calls[i] = redisstore.Call{Key: op.Key, Alg: op.Alg, Req: op.Req}
	}
	tctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	start := time.Now()
	s.st.tick(start)
	s.r.DecideAll(tctx, calls)
	took := time.Since(start)
	cancel()

	sent, decided := 0, 0
	var first error
	for i := range calls {
		switch {
		case calls[i].Cached:
		case calls[i].Err == nil:
			sent++
			decided++
		default:
			sent++
			if first == nil {
				first = calls[i].Err
			}
		}
	}
	if s.o.Observe != nil && sent > 0 {
		s.o.Observe(took, first)
	}

	cerr := ctx.Err()
	switch {
	case sent == 0:
		s.b.cancel(t) // every call was answered from batched units: nothing learnt about Redis
	case decided > 0:
		s.b.success()
		retry = unknownRetry // closed: no probe is scheduled
	case cerr != nil:
		s.b.cancel(t)
	case isTimeout(first) && s.starved():
		s.b.cancel(t) // our scheduler's timeout, not Redis's
	default:
		retry = s.b.failure(t)
	}
	for i, op := range ops {
		switch {
		case calls[i].Err == nil:
			op.Dec, op.Err = calls[i].Dec, nil
		case cerr != nil:
			op.Dec, op.Err = algos.Decision{}, cerr
		default:
			s.fallback(op, fmt.Errorf("failover: %w", calls[i].Err), retry)
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
		var alg algos.Algorithm
		if r := op.Rule(); r != nil && s.o.Shares != nil {
			alg = s.o.Shares.alg(r)
		}
		if alg == nil {
			alg = op.Fallback
		}
		if alg == nil {
			alg = op.Alg
		}
		op.Dec = s.o.Local.Decide(op.Key, alg, op.Req)
	default:
		limit := op.Alg.Script().Limit
		op.Dec = algos.Decision{Allowed: true, Limit: limit, Remaining: limit, Granted: op.Req.Bounded().Cost}
	}
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
