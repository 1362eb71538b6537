package rules

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/diana-gw/diana/shared/algos"
)

// Engine decides requests against a set of rules. It is immutable: a new config builds a new
// Engine, and requests in flight finish on the one they started with.
type Engine struct {
	rules   []*Rule
	exempt  []*Rule // the unlimited rules
	limits  []*Rule // the others
	local   Store
	cluster Store
	observe func(*Rule, *Input, Outcome, error)
	limit   func(*Rule, int64)
	leaseID func() int64
	settled func(Settled)
	clock   func() int64
	reads   Reads
	path    PathForm
	scratch sync.Pool
}

// Options gives an Engine its stores and hooks.
type Options struct {
	Local   Store // for rules in Local mode
	Cluster Store // for rules in Cluster mode
	// Observe, if set, is called once per rule whose decision counts, for logs and metrics:
	// every rule that applies when the request is admitted; only the rules that deny it (and
	// the shadow rules that would) when it is refused, as the others took nothing. err is the
	// store's error when the decision came from the rule's fail policy. in is the request, for
	// the log lines that name its client; it must not be kept.
	Observe func(r *Rule, in *Input, o Outcome, err error)
	// Limit, if set, is called with the limit a rule that learns it (adaptive) has now, after
	// each of its decisions that is not a dry run, for a gauge.
	Limit func(r *Rule, limit int64)
	// LeaseID returns the id of a new concurrency lease, unique among the leases in flight on
	// every node, in [1, 2^53); default: random.
	LeaseID func() int64
	// EscapedSlashes says what %2F, %5C and '\' in a request's path are (see NormalPath).
	EscapedSlashes EscapedSlashes
	// StripDotsSpaces strips trailing dots and spaces from each path segment (see NormalPath).
	StripDotsSpaces bool
	// Settled, if set, is told what Settle charged each usage rule (see Usage), for a metric
	// and, when the usage could not be read, a log line.
	Settled func(Settled)
	// Clock returns a monotonic time in µs, which a settlement's age is measured on; default
	// the process's monotonic clock.
	Clock func() int64
}

// Outcome is a rule's verdict on one request.
type Outcome uint8

const (
	Allowed      Outcome = iota
	Denied               // the request is refused (or the rule's share of it never ran)
	ShadowDenied         // a shadow rule would have refused it; it goes through
	Exempted             // an unlimited rule matched it: no rule counted it
)

var outcomes = [...]string{Allowed: "allowed", Denied: "denied", ShadowDenied: "shadow_denied", Exempted: "unlimited"}

func (o Outcome) String() string { return outcomes[o] }

// Result is the verdict on one request.
type Result struct {
	Allowed bool
	// Rule is the rule whose decision the reply reports: the denying rule, else the enforcing
	// rule closest to its limit; nil when no rule applied, or an unlimited rule did.
	Rule *Rule
	// Unlimited is the unlimited rule that exempted the request from every rule, if one did.
	Unlimited *Rule
	Decision  algos.Decision
	Delay     int64 // µs to hold the request before forwarding it
	Err       error // the first store error; the decisions then came from the fail policies
	// ErrRule is the rule of Err, and Shadow the first shadow rule that would have denied the
	// request: for the log lines of the paths where a request passes unlimited.
	ErrRule, Shadow *Rule
	// BadPath: the path holds a control character, or an escaped slash which the engine refuses
	// (RejectSlashes); no rule was asked, and the answer is 400.
	BadPath bool
	// Refused says why a usage rule refused the request before deciding it (the request's output
	// cap cannot be read and the rule refuses such requests); the answer is 400.
	Refused string
	// Repeated names the identity header the request gives more than once (see
	// MultiHeaders); no rule was asked, and the answer is 400.
	Repeated string
	leases   []lease
	reserved []reservation // the usage rules' estimates, which Settle settles
	llm      *LLMRequest   // what the usage rules read of the request
}

type lease struct {
	rule  *Rule
	key   string
	id    int64
	units int64
}

// New returns an engine for rules. Every rule's mode needs its store.
func New(rules []*Rule, o Options) (*Engine, error) {
	e := &Engine{rules: rules}
	for _, r := range rules {
		if r.Unlimited {
			e.exempt = append(e.exempt, r)
			continue
		}
		e.limits = append(e.limits, r)
		if r.Mode == Local && o.Local == nil || r.Mode == Cluster && o.Cluster == nil {
			return nil, errors.New("rules: rule " + quote(r.Name) + " is in " + r.Mode.String() + " mode, which has no store")
		}
		if r.Alg == nil {
			return nil, errors.New("rules: rule " + quote(r.Name) + " has no algorithm")
		}
	}
	if o.LeaseID == nil {
		o.LeaseID = func() int64 { return 1 + rand.Int64N(algos.MaxSafe-1) }
	}
	if int(o.EscapedSlashes) >= len(EscapedSlashesNames) {
		return nil, errors.New("rules: unknown EscapedSlashes " + strconv.Itoa(int(o.EscapedSlashes)))
	}
	e.local, e.cluster, e.observe, e.limit, e.leaseID = o.Local, o.Cluster, o.Observe, o.Limit, o.LeaseID
	e.settled, e.clock, e.reads = o.Settled, o.Clock, ReadsOf(rules)
	if e.clock == nil {
		start := time.Now()
		e.clock = func() int64 { return time.Since(start).Microseconds() }
	}
	e.path = PathForm{Slashes: o.EscapedSlashes, StripDotsSpaces: o.StripDotsSpaces}
	e.scratch.New = func() any { return new(scratch) }
	return e, nil
}

// Rules returns the engine's rules.
func (e *Engine) Rules() []*Rule { return e.rules }

// Reads returns what the engine's rules read of a request (ReadsOf).
func (e *Engine) Reads() Reads { return e.reads }

// scratch holds the buffers of one Check, reused across requests.
type scratch struct {
	ops      []Op
	ptrs     []*Op
	local    []*Op
	clust    []*Op
	key      []byte
	in       *Input // the request being checked, for Observe
	at       int64  // the engine's clock before the first decision, for the usage rules' reservations
	llm      *LLMRequest
	fallback []int64 // by op: what a usage rule's fallback charges the request
}

// Normalize brings in to the form the rules match and count, and reports false for a path they
// refuse: in.Path to its normal form (NormalPath, with the engine's path options), in.Method to
// upper case (NormalMethod). Check does it first; a front end that matches the request against
// something else before (dianad's upstreams) does it so that both see the same request.
func (e *Engine) Normalize(in *Input) bool {
	p, ok := e.path.Normal(in.Path)
	if !ok {
		return false
	}
	in.Path, in.Method = p, NormalMethod(in.Method)
	return true
}

// Check decides a request against every rule that applies to it, unless an unlimited rule
// matches it: then no rule counts it. When several apply, the request is committed to all of them
// only if none denies it: a request refused by one rule takes nothing from the others (a denying
// rule with a ban is committed too, to start the ban). A cluster store that decides a request's
// limits together (Together: cluster mode's stack) decides its cluster rules so, atomically, in
// one call, after a dry run of its local rules, which are committed after it if it admits the
// request. Otherwise each rule is first decided as a dry run, then committed. (Should a ban's
// commit admit the request after all, its units having come back in between, the request goes
// through, committed to every rule.) Each rule stays exact on its own under concurrency: a commit
// is a fresh atomic decision; only a request racing between the phases (local and cluster, dry
// run and commit) can be refused after other rules took its units.
//
// Check first brings the request to the form the rules match and count (Normalize): front
// ends hand its path and method as the client sent them.
func (e *Engine) Check(ctx context.Context, in *Input) Result {
	if !e.Normalize(in) {
		return Result{BadPath: true, Decision: algos.Decision{RetryAfter: algos.Never}}
	}
	if h := repeated(e.rules, in); h != "" {
		return Result{Repeated: h, Decision: algos.Decision{RetryAfter: algos.Never}}
	}
	if r := e.exempted(in); r != nil {
		if e.observe != nil {
			e.observe(r, in, Exempted, nil)
		}
		return Result{Allowed: true, Unlimited: r}
	}
	s := e.scratch.Get().(*scratch)
	defer e.put(s)
	if r, why := e.gather(s, in); r != nil {
		return Result{Refused: "rule " + r.Name + ": " + why, Rule: r, Decision: algos.Decision{RetryAfter: algos.Never}}
	}
	if len(s.ops) == 0 {
		return Result{Allowed: true}
	}
	s.point()
	if len(s.ops) == 1 {
		e.decide(ctx, s, s.ptrs)
		return e.verdict(s, true)
	}
	for _, op := range s.ptrs {
		op.Req.DryRun = true
	}
	if t, ok := e.cluster.(Together); ok && s.split(s.ptrs) {
		return e.together(ctx, s, t)
	}
	return e.dryRunThenCommit(ctx, s)
}

// gather puts into s one op for each rule that applies to in, with what it costs: a usage rule's
// reservation (and its fallback). It returns the usage rule that refuses the request before any
// decision, and why; nil when none does.
func (e *Engine) gather(s *scratch, in *Input) (*Rule, string) {
	s.ops, s.fallback = s.ops[:0], s.fallback[:0]
	s.in, s.at = in, -1
	for _, r := range e.limits {
		if !r.Match.Matches(in) {
			continue
		}
		s.key = r.key(s.key, in)
		cost, fallback := r.Cost, int64(0)
		if r.Usage != nil {
			if s.llm == nil {
				s.llm = readLLM(in)
			}
			var refused string
			if cost, fallback, refused = r.Usage.reserve(r.Alg, s.llm); refused != "" {
				return r, refused
			}
			if s.at < 0 {
				s.at = e.clock()
			}
		}
		s.fallback = append(s.fallback, fallback)
		s.ops = append(s.ops, NewOp(r, string(s.key), algos.Request{Cost: cost}))
		op := &s.ops[len(s.ops)-1]
		if r.Action == Delay {
			op.Req.MaxWait = r.MaxDelay
		}
		if r.Leases && r.Cost > 0 {
			op.Req.ID = e.leaseID()
		}
	}
	return nil, ""
}

// dryRunThenCommit decides s's ops, all dry runs, and commits them if none denies; else it
// commits only the denials that start a ban.
func (e *Engine) dryRunThenCommit(ctx context.Context, s *scratch) Result {
	e.decide(ctx, s, s.ptrs)
	if !e.verdict(s, false).Allowed {
		// Commit only the denials that start a ban; the others take nothing.
		commit := s.ptrs[:0]
		for i := range s.ops {
			if op := &s.ops[i]; !op.Dec.Allowed && op.rule.Action != Shadow && op.rule.Ban > 0 {
				op.Req.DryRun = false
				commit = append(commit, op)
			}
		}
		e.decide(ctx, s, commit)
		if !e.verdict(s, false).Allowed {
			return e.verdict(s, true)
		}
		// A racing request (a lease released, time passing) let the denying rules admit the
		// request when committed: it goes through, so it is committed to the others too.
	}
	commit := s.ptrs[:0]
	for i := range s.ops {
		if op := &s.ops[i]; op.Req.DryRun {
			op.Req.DryRun = false
			commit = append(commit, op)
		}
	}
	e.decide(ctx, s, commit)
	return e.verdict(s, true)
}

// together decides the request's ops, split by s.split, its cluster rules with t: the local
// rules as dry runs, then the cluster rules together, told whether a local rule refused the
// request; the local rules are committed if the request is admitted, else their denials that
// start a ban.
func (e *Engine) together(ctx context.Context, s *scratch, t Together) Result {
	refused := false
	if len(s.local) > 0 {
		e.local.Decide(ctx, s.local)
		for _, op := range s.local {
			refused = refused || !op.Dec.Allowed && op.rule.Action != Shadow
		}
	}
	t.DecideTogether(ctx, s.clust, refused)
	if !e.verdict(s, false).Allowed {
		if !e.commitLocal(ctx, s, true) || !e.verdict(s, false).Allowed {
			return e.verdict(s, true)
		}
		// A ban's commit admitted the request after all (see Check): it goes through, committed
		// to every rule, the cluster rules together again.
		t.DecideTogether(ctx, s.clust, false)
		if !e.verdict(s, false).Allowed {
			return e.verdict(s, true)
		}
	}
	e.commitLocal(ctx, s, false)
	return e.verdict(s, true)
}

// commitLocal commits the local ops still uncommitted (s.local, of s.split), or with bans only
// their denials that start a ban, and reports whether it committed any.
func (e *Engine) commitLocal(ctx context.Context, s *scratch, bans bool) bool {
	commit := s.ptrs[:0]
	for _, op := range s.local {
		if op.Req.DryRun && (!bans || !op.Dec.Allowed && op.rule.Action != Shadow && op.rule.Ban > 0) {
			op.Req.DryRun = false
			commit = append(commit, op)
		}
	}
	if len(commit) > 0 {
		e.local.Decide(ctx, commit)
	}
	return len(commit) > 0
}

// split sets s.local and s.clust to ops by their rules' modes, and reports whether any is a
// cluster rule.
func (s *scratch) split(ops []*Op) bool {
	s.local, s.clust = s.local[:0], s.clust[:0]
	for _, op := range ops {
		if op.rule.Mode == Cluster {
			s.clust = append(s.clust, op)
		} else {
			s.local = append(s.local, op)
		}
	}
	return len(s.clust) > 0
}

// point sets s.ptrs to the ops, which is what the stores take.
func (s *scratch) point() {
	s.ptrs = s.ptrs[:0]
	for i := range s.ops {
		s.ptrs = append(s.ptrs, &s.ops[i])
	}
}

// exempted returns the first unlimited rule that matches in, or nil.
func (e *Engine) exempted(in *Input) *Rule {
	for _, r := range e.exempt {
		if r.Match.Matches(in) {
			return r
		}
	}
	return nil
}

// put returns s to the pool, keeping nothing of the request.
func (e *Engine) put(s *scratch) {
	s.in, s.llm = nil, nil
	e.scratch.Put(s)
}

// decide runs ops on their rules' stores.
func (e *Engine) decide(ctx context.Context, s *scratch, ops []*Op) {
	s.split(ops)
	if len(s.local) > 0 {
		e.local.Decide(ctx, s.local)
	}
	if len(s.clust) > 0 {
		e.cluster.Decide(ctx, s.clust)
	}
}

// verdict combines the rules' decisions. final marks the last phase: only then are outcomes
// observed (of the committed ops, and of the denials) and leases kept.
func (e *Engine) verdict(s *scratch, final bool) Result {
	res := Result{Allowed: true}
	var report *Op
	for i := range s.ops {
		op := &s.ops[i]
		r := op.rule
		if op.Err != nil && res.Err == nil {
			res.Err, res.ErrRule = op.Err, r
		}
		outcome := Allowed
		if !op.Dec.Allowed {
			outcome = Denied
			if r.Action == Shadow {
				outcome = ShadowDenied
				if res.Shadow == nil {
					res.Shadow = r
				}
			}
		}
		if final && e.observe != nil && (!op.Req.DryRun || outcome != Allowed) {
			e.observe(r, s.in, outcome, op.Err)
		}
		if final && r.Learns && e.limit != nil && !op.Req.DryRun {
			e.limit(r, op.Dec.Limit)
		}
		if r.Action == Shadow {
			continue
		}
		switch {
		case outcome == Denied:
			if res.Allowed || retryLater(op.Dec.RetryAfter, report.Dec.RetryAfter) {
				report = op
			}
			res.Allowed = false
		case res.Allowed:
			res.Delay = max(res.Delay, op.Dec.Delay)
			if report == nil || op.Dec.Remaining < report.Dec.Remaining {
				report = op
			}
		}
	}
	if report != nil {
		res.Rule, res.Decision = report.rule, report.Dec
	}
	if !res.Allowed {
		res.Delay = 0 // a delay another rule offered before the denial came
	}
	if final {
		for i := range s.ops {
			if op := &s.ops[i]; op.Req.ID != 0 && !op.Req.DryRun && op.Dec.Granted > 0 {
				res.leases = append(res.leases, lease{rule: op.rule, key: op.Key, id: op.Req.ID, units: op.Dec.Granted})
			}
			if op := &s.ops[i]; op.rule.Usage != nil && !op.Req.DryRun && op.Dec.Allowed {
				est := op.Req.Cost
				if op.Err != nil {
					est = 0 // a fail policy admitted it: no shared store holds the estimate
				}
				res.reserved = append(res.reserved, reservation{rule: op.rule, key: op.Key, estimate: est, fallback: s.fallback[i], at: s.at})
				res.llm = s.llm
			}
		}
	}
	return res
}

// retryLater reports whether retry-after a is later than b (Never is latest).
func retryLater(a, b int64) bool {
	if b == algos.Never {
		return false
	}
	return a == algos.Never || a > b
}

// HasLeases reports whether the request holds concurrency leases, which Release gives back.
func (r *Result) HasLeases() bool { return len(r.leases) > 0 }

// Learns reports whether the request holds a lease of a rule that learns from how it ends
// (adaptive): its latency and whether the backend failed it, which Finish reports.
func (r *Result) Learns() bool {
	for _, l := range r.leases {
		if l.rule.Learns {
			return true
		}
	}
	return false
}

// Dropped reports whether a response's status says that the backend failed the request (5xx,
// a gateway's own 502, 503 and 504 for an upstream that failed or timed out included): Finish's
// dropped, on which adaptive rules cut their limit. Every front end asks it here.
func Dropped(status int) bool { return status >= 500 }

// Release gives back the concurrency leases a request took; call it when the request ends,
// whatever the verdict (a request refused by a racing commit may hold leases of other rules).
// It is a no-op for results without leases.
func (e *Engine) Release(ctx context.Context, res *Result) { e.Finish(ctx, res, 0, false) }

// Finish is Release for a request whose upstream call took latency µs (0: not measured, as
// when the request never reached the upstream) and, if dropped, failed (a 5xx status, a
// timeout, a transport error): adaptive rules learn from it (algos.Request's Latency, Dropped).
func (e *Engine) Finish(ctx context.Context, res *Result, latency int64, dropped bool) {
	if len(res.leases) == 0 {
		return
	}
	s := e.scratch.Get().(*scratch)
	defer e.scratch.Put(s)
	s.ops = s.ops[:0]
	for _, l := range res.leases {
		s.ops = append(s.ops, NewOp(l.rule, l.key, algos.Request{ID: l.id, Cost: l.units, Release: true, Latency: latency, Dropped: dropped}))
	}
	s.point()
	e.decide(ctx, s, s.ptrs)
	if e.limit != nil {
		for _, op := range s.ptrs {
			if op.rule.Learns {
				e.limit(op.rule, op.Dec.Limit)
			}
		}
	}
	res.leases = nil
}
