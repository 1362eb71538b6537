// Package algos holds Diana's rate-limiting algorithms, each stated once as a pure transition
//
//	Decide(state, request) -> (new state, Decision)
//
// on a small state, in integer microseconds. The same arithmetic runs in process memory, in
// proxy-wasm shared data and, through the twin Lua script in scripts/, inside Redis.
//
// Rules every algorithm follows:
//   - all arithmetic is on int64 and every intermediate value stays below 2^53 in magnitude, so the
//     Lua twin, whose numbers are doubles, computes exactly the same values: counts and times are
//     kept apart and their products divided at once (mulDiv), so that every count up to MaxCount
//     works with every duration up to MaxSpan; constructors reject parameters outside the bounds
//     each algorithm states, naming the parameter;
//   - the state changes only when a request is admitted (or in ways that make no difference to any
//     later decision, such as dropping expired entries); a denial consumes nothing;
//   - a clock that goes backwards never adds capacity;
//   - divisions are floor divisions of non-negative numbers, which Lua's math.floor(a/b) computes
//     exactly for operands below 2^53.
//
// Two transitions change an algorithm's state outside a decision, each with its Lua twin: Refund
// gives back a batch's unspent units (batching.go), and Settle charges a request the cost its
// response told against the estimate it reserved (settle.go: token bucket, fixed and sliding
// window), which may take a budget below zero.
//
// The package does no I/O, starts no goroutines and uses no reflection: it compiles under TinyGo.
package algos

import (
	"errors"
	"strconv"
)

// MaxSafe is the largest magnitude an intermediate value may reach: 2^53, the limit of exact
// integers in a Redis Lua number.
const MaxSafe = 1 << 53

// Microseconds in common units. A year is 365 days, as in Kong's rate-limiting.
const (
	Millisecond int64 = 1000
	Second            = 1000 * Millisecond
	Minute            = 60 * Second
	Hour              = 60 * Minute
	Day               = 24 * Hour
	Year              = 365 * Day
)

// The bounds every algorithm accepts, unless its doc comment states a tighter one: a count
// (limit, rate, burst, cost) is at most MaxCount, a duration (window, period, warm-up, ban,
// lease) at most MaxSpan. Both are below 2^50, where mulDiv and its Lua twin are exact.
const (
	MaxCount int64 = 1_000_000_000_000_000 // 10^15
	MaxSpan        = 10 * Year             // 3.1536·10^14 µs
)

// Request is one request against one limit.
type Request struct {
	Now     int64 // µs; any epoch, the same for every request on a key
	Cost    int64 // units the request takes, ≥ 0; 0 asks without taking (a peek)
	MaxWait int64 // µs the request may be delayed instead of denied; 0 rejects at once
	Partial bool  // grant as many units as are available, up to Cost (batching)
	ID      int64 // concurrency: the lease to take or to release
	Release bool  // concurrency: give back lease ID instead of taking one
	// Latency is what a released request took, µs, measured by the front end around the
	// upstream call (adaptive); 0: not measured.
	Latency int64
	// Dropped says that the released request failed at the backend (a 5xx status, a timeout, a
	// transport error): adaptive cuts its limit instead of taking the latency as a sample.
	Dropped bool
	// DryRun asks for the decision the request would get, leaving the state as it was (no
	// units taken, no ban started): rules check every limit of a request before committing any.
	// Every algorithm honours it; a release is never a dry run.
	DryRun bool
	// Backdated records the units at Now even when the state holds later ones (the sliding log
	// otherwise records a unit no earlier than its newest entry): for writing back units admitted
	// elsewhere at that time (store/failover). Only the sliding log reads it.
	Backdated bool
}

// Sliding is implemented by the algorithms that count over a window sliding with time (the
// sliding log and the sliding windows): what they count drains as its requests age out of the
// window of SlidingWindow µs, not all at once (fixed window) or at a rate (the buckets). A store
// that rebuilds such a state from a count alone (store/failover, entering an outage) spreads the
// count over the window.
type Sliding interface {
	SlidingWindow() int64
}

// Paced is implemented by the algorithms whose Decision.Remaining says whether a request may go
// now (0 or 1), not how many units the state still holds (the warm-up limiter, whose state is
// its coldness): a store cannot rebuild their state from a Remaining (store/failover leaves
// them out of its transitions across an outage).
type Paced interface {
	Paced()
}

// MaxWaitCap is the largest MaxWait a request may ask for (about 71 years): larger ones are
// clamped, so that times pushed ahead by delays stay below 2^53.
const MaxWaitCap = MaxSafe / 4

// Bounded returns r with a negative Cost or MaxWait made 0, Cost clamped to MaxCount + 1 (above
// every limit, so the decision is the same) and MaxWait to MaxWaitCap. Stores apply it to every
// request: algorithms assume it.
func (r Request) Bounded() Request {
	r.Cost = min(max(r.Cost, 0), MaxCount+1)
	r.MaxWait = min(max(r.MaxWait, 0), MaxWaitCap)
	return r
}

// Decision is the outcome of a Request. Durations are in µs.
type Decision struct {
	Allowed    bool
	Limit      int64 // what the RateLimit-Limit header advertises
	Remaining  int64 // units available to the next request, ≥ 0
	ResetAfter int64 // until the limit is fully available again
	RetryAfter int64 // until the same request could be admitted; 0 when allowed; -1 never
	Delay      int64 // hold an admitted request this long before forwarding it
	Granted    int64 // units taken: Cost, less for a partial grant, 0 when denied
	TTL        int64 // how long the state must be kept; after it, an empty state decides the same
}

// Never is the RetryAfter of a request that can never be admitted (cost above capacity).
const Never = -1

// State is what is stored for one identity under one algorithm. Its zero value is a fresh
// identity. W holds the fixed words of the counting algorithms (their meaning is in each
// algorithm's doc comment); Log holds the entries of the log-based ones (sliding log,
// concurrency). Ban is the µs time until which a ban holds the identity (see Ban).
type State struct {
	W   [4]int64
	Ban int64
	Log []int64
}

// Algorithm is a configured limit. Implementations are immutable and safe for concurrent use;
// everything that changes lives in the State the caller passes.
type Algorithm interface {
	// Decide applies r to st and reports the outcome.
	Decide(st *State, r Request) Decision
	// Script tells a store how to run the same limit as a Redis Lua script.
	Script() Script
}

// Script names an algorithm's Lua twin in scripts/ and the arguments it takes.
//
// A store calls the script with KEYS = {state key, ban key (only when Ban > 0)} and
// ARGV = {MessagePack integers now (-1: use Redis TIME), cost, max_wait, flags (1 partial,
// 2 release, 4 Log, 8 dry run: the same reply, nothing written — state, TTL or ban; never
// with 2), ban, limit, Args...; the lease id, if any}; it replies {allowed, limit, remaining,
// reset_after, retry_after, delay, granted}.
type Script struct {
	Name  string  // file name without ".lua"
	Args  []int64 // the algorithm's parameters (at most 4), after the request's fields
	Limit int64   // the Decision.Limit a ban reports while it holds
	Ban   int64   // µs a denial bans the identity for; 0: no ban
	Log   bool    // the state is a sorted set (State.Log), not a string of words (State.W)
	// Hash says the state is a hash of one field, the index of a window, holding its count
	// (Counter), not a string of words: State.W[0] is the index times Args[0], W[1] the count.
	Hash bool `json:",omitempty"`
	// Words is the number of words of a string state beyond the len(State.W) that W holds: they
	// follow W's in State.Log, and in Redis's string. Stores with fixed-size entries (the Envoy
	// filter's shared-data slots) hold only W and refuse an algorithm with Words > 0.
	Words int `json:",omitempty"`
}

// ErrParam is wrapped by every parameter error.
var ErrParam = errors.New("invalid parameter")

// paramError names the parameter and the reason.
func paramError(algo, param, reason string) error {
	return &ParamError{Algo: algo, Param: param, Reason: reason}
}

// ParamError reports an invalid algorithm parameter.
type ParamError struct {
	Algo, Param, Reason string
}

func (e *ParamError) Error() string { return e.Algo + ": " + e.Param + ": " + e.Reason }

// Unwrap lets errors.Is(err, ErrParam) match.
func (e *ParamError) Unwrap() error { return ErrParam }

// positive checks that v > 0.
func positive(algo, param string, v int64) error {
	if v <= 0 {
		return paramError(algo, param, "must be greater than 0, got "+itoa(v))
	}
	return nil
}

// atMost checks that v ≤ max.
func atMost(algo, param string, v, max int64) error {
	if v > max {
		return paramError(algo, param, "must be at most "+itoa(max)+", got "+itoa(v))
	}
	return nil
}

// count checks a count parameter: 1 ≤ v ≤ MaxCount.
func count(algo, param string, v int64) error {
	if err := positive(algo, param, v); err != nil {
		return err
	}
	return atMost(algo, param, v, MaxCount)
}

// duration checks a duration parameter: 1 µs ≤ v ≤ MaxSpan, said in words an operator reads.
func duration(algo, param string, v int64) error {
	if err := positive(algo, param, v); err != nil {
		return err
	}
	if v > MaxSpan {
		return paramError(algo, param, "must be at most 10 years, got "+about(v))
	}
	return nil
}

// about writes µs in the largest unit it holds at least one of, rounded down: "about 27 years".
func about(us int64) string {
	units := [...]struct {
		us   int64
		name string
	}{{Year, " years"}, {Day, " days"}, {Hour, " hours"}, {Minute, " minutes"}, {Second, " seconds"}, {Millisecond, " ms"}}
	for _, u := range units {
		if us >= u.us {
			return "about " + itoa(us/u.us) + u.name
		}
	}
	return itoa(us) + " µs"
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// floorDiv returns ⌊a/b⌋ for b > 0 and any sign of a (Go's / truncates towards zero).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
