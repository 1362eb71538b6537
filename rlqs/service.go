package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/diana-gw/diana/rls"
	"github.com/diana-gw/diana/shared/rules"
)

// Bounds on what one stream may make dianad hold (see the package doc).
const (
	// DefaultMaxBucketsPerStream, DefaultMaxBuckets and DefaultMaxStreams are Options' defaults.
	DefaultMaxBucketsPerStream = 1000
	DefaultMaxBuckets          = 100000
	DefaultMaxStreams          = 10000
	// MaxBucketEntries and MaxBucketLen bound one bucket id: its entries, and the bytes of its
	// keys and values.
	MaxBucketEntries = 32
	MaxBucketLen     = 4 << 10
	// MaxReportRequests bounds the requests one usage report may count for a bucket: more is
	// not a gateway's traffic but a broken or hostile client.
	MaxReportRequests = 1 << 40
	// MaxDemand caps a bucket's demand on one stream, in requests a second, so that the fleet's
	// sums stay exact integers in Redis (milli-requests, MaxInstances of them, below 2^53).
	MaxDemand = 1e9
)

// The split's constants (the package doc says why).
const (
	// DefaultAssignmentTTL is Options.AssignmentTTL's default.
	DefaultAssignmentTTL = 10 * time.Second
	// Burst is the time of an instance's share its token bucket holds (max_tokens), and
	// MinTokens its least: a bucket of one token that fills between two requests wastes the
	// rest of the wait, so a saturated instance would admit less than its share.
	Burst     = 100 * time.Millisecond
	MinTokens = 2
	// Tolerance is the relative change of an instance's share below which its assignment is
	// sent again unchanged (Envoy then keeps its token bucket instead of starting a full one).
	Tolerance = 0.02
	// IdleAfter is how long a bucket may report no request before it is abandoned.
	IdleAfter = time.Minute
	// minElapsed is the shortest time a demand is measured over; reports closer together add up.
	minElapsed = 10 * time.Millisecond
	// smoothing is the weight of the newest measure in a bucket's demand and report interval.
	smoothing = 0.5
)

// Action is what a bucket is told.
type Action uint8

// The actions dianad sends.
const (
	TokenBucket Action = iota // a token bucket: the instance's share of the limit
	AllowAll                  // blanket_rule ALLOW_ALL
	DenyAll                   // blanket_rule DENY_ALL
	Abandon                   // abandon_action
)

// ActionNames are the metrics' names of the actions, by Action.
var ActionNames = [...]string{TokenBucket: "token_bucket", AllowAll: "allow_all", DenyAll: "deny_all", Abandon: "abandon"}

func (a Action) String() string { return ActionNames[a] }

// Why an action was sent, besides a share of a limit: the metrics' reason label.
const (
	WhyLimit     = "limit"     // the bucket's limit (a token bucket; DENY_ALL for requests_per_unit 0)
	WhyNoLimit   = "no_limit"  // no descriptor has a limit for the bucket: ALLOW_ALL
	WhyUnlimited = "unlimited" // the descriptor's limit is unlimited: ALLOW_ALL
	WhyShadow    = "shadow"    // the limit is in shadow_mode: ALLOW_ALL
	WhyOnError   = "on_error"  // the fleet (Redis) failed: rls.on_error decided
	WhyIdle      = "idle"      // no request for IdleAfter: abandoned
	WhyRemoved   = "removed"   // the bucket's limit disappeared on reload: abandoned
)

// Reasons a stream is refused (ended with an error status): the metrics' reason label.
const (
	RefusedUnknownDomain = "unknown_domain"
	RefusedMalformed     = "malformed"
	RefusedTooMany       = "too_many_buckets"
	RefusedAbsurd        = "absurd_usage"
	RefusedStreams       = "too_many_streams"
)

// Options configure a Service.
type Options struct {
	// Fleet holds the instances' demands: a Table (local mode) or Redis (cluster mode);
	// default a Table.
	Fleet Fleet
	// OnError is what a bucket is told when Fleet fails (cluster mode): ALLOW_ALL (open),
	// DENY_ALL (closed) or a share of the limit divided by Nodes among this process's own
	// instances (local).
	OnError rules.FailPolicy
	Nodes   int64
	// Timeout bounds each round trip of Fleet (0: none but the stream's) when Guard is nil.
	Timeout time.Duration
	// Guard, if set, runs each round trip of Fleet instead, with its own timeout: dianad passes
	// failover.Store.Call, the timeout and circuit breaker of its decisions, so that one open
	// breaker spares Redis for both and a report is answered by OnError at once, without waiting
	// on a Redis that is down (Guard then returns an error without calling).
	Guard func(ctx context.Context, call func(ctx context.Context) error) error
	// The bounds; 0: the defaults.
	MaxBucketsPerStream, MaxBuckets, MaxStreams int
	// AssignmentTTL is the shortest assignment_time_to_live sent; each is at least three report
	// intervals of its bucket, in whole seconds (Envoy reads no fraction).
	AssignmentTTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Hooks, each optional, for metrics and logs.
	Sent    func(a Action, why string, domain string, bucket *pb.BucketId) // every action sent
	Refused func(reason string, err error)                                 // a stream ended with an error
	Failed  func(err error)                                                // Fleet failed; OnError decided
}

// Service is envoy.service.rate_limit_quota.v3.RateLimitQuotaService. It is safe for
// concurrent use; SetConfig swaps the descriptor config and re-assigns what it changed.
type Service struct {
	pb.UnimplementedRateLimitQuotaServiceServer
	o        Options
	cfg      atomic.Pointer[rls.Config]
	fallback *Table // OnError local
	node     string // this process's part of the instances' names
	seq      atomic.Uint64

	mu      sync.Mutex
	streams map[*stream]struct{}
	closed  bool
	buckets atomic.Int64 // held by every stream
}

// New returns a service answering from cfg.
func New(cfg *rls.Config, o Options) *Service {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Fleet == nil {
		o.Fleet = NewTable(o.Now)
	}
	if o.Nodes < 1 {
		o.Nodes = 1
	}
	if o.MaxBucketsPerStream <= 0 {
		o.MaxBucketsPerStream = DefaultMaxBucketsPerStream
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.AssignmentTTL < time.Second {
		o.AssignmentTTL = DefaultAssignmentTTL
	}
	var id [8]byte
	rand.Read(id[:]) // never fails (crypto/rand's contract since Go 1.24)
	s := &Service{o: o, node: hex.EncodeToString(id[:]), streams: map[*stream]struct{}{}}
	if o.OnError == rules.FailLocal {
		s.fallback = NewTable(o.Now)
	}
	s.SetConfig(cfg)
	return s
}

// Stats are what the service holds now.
type Stats struct{ Streams, Buckets int64 }

// Stats returns the open streams and the buckets they hold.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	n := len(s.streams)
	s.mu.Unlock()
	return Stats{Streams: int64(n), Buckets: s.buckets.Load()}
}

// SetConfig replaces the descriptor config. Every stream then re-assigns, at once, the buckets
// whose limit changed, and abandons those whose limit disappeared.
func (s *Service) SetConfig(c *rls.Config) {
	if c == nil {
		c, _ = rls.Parse(nil, rls.ParseOptions{})
	}
	s.cfg.Store(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	for st := range s.streams {
		select {
		case st.wake <- struct{}{}:
		default: // one is pending already
		}
	}
}

// Close ends every stream with UNAVAILABLE and refuses new ones (dianad is shutting down):
// Envoy opens its stream again, to another dianad.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for st := range s.streams {
		st.cancel()
	}
}

// stream is one Envoy instance's StreamRateLimitQuotas call.
type stream struct {
	s        *Service
	srv      pb.RateLimitQuotaService_StreamRateLimitQuotasServer
	instance string
	wake     chan struct{}
	cancel   context.CancelFunc

	// Only the stream's handler goroutine uses what follows: reports, reloads and the end
	// are handled one at a time.
	domain  string
	buckets map[string]*bucket
}

// plan is what a bucket's limit makes of it.
type plan struct {
	action Action // TokenBucket (a share of limit per window), AllowAll or DenyAll
	why    string
	limit  int64 // requests a window, fleet-wide
	window int64 // seconds
	group  string
}

// bucket is one bucket of a stream.
type bucket struct {
	id      *pb.BucketId
	key     string // in stream.buckets
	plan    plan
	last    time.Time           // the last report; zero before the first
	pending int64               // requests reported since the demand was last measured
	demand  float64             // requests a second, smoothed; -1 until measured
	every   time.Duration       // the report interval, smoothed; 0 until measured
	idle    time.Time           // since when no request was reported; zero while some are
	sent    *typev3.TokenBucket // the token bucket last assigned (Envoy's, while it holds it)
	rate    float64             // requests a second of sent
	sentFor plan                // the plan sent was assigned under
}

// StreamRateLimitQuotas serves one Envoy instance: each usage report is answered with an
// action for every bucket it reports, and reloads push what they change.
func (s *Service) StreamRateLimitQuotas(srv pb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ctx, cancel := context.WithCancel(srv.Context())
	defer cancel()
	st := &stream{s: s, srv: srv, wake: make(chan struct{}, 1), cancel: cancel, buckets: map[string]*bucket{},
		instance: s.node + ":" + strconv.FormatUint(s.seq.Add(1), 10)}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return status.Error(codes.Unavailable, "rlqs: dianad is shutting down")
	case len(s.streams) >= s.o.MaxStreams:
		s.mu.Unlock()
		err := status.Errorf(codes.ResourceExhausted, "rlqs: %d streams open already, the most this dianad serves (rls.quota.max_streams)", s.o.MaxStreams)
		s.refused(RefusedStreams, err)
		return err
	}
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	defer st.end()

	reports := make(chan *pb.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := srv.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case m := <-reports:
			if reason, err := st.report(ctx, m); err != nil {
				if reason != "" { // else the stream itself failed (Send, the context)
					s.refused(reason, err)
				}
				return err
			}
		case <-st.wake:
			st.reload(ctx)
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			if srv.Context().Err() == nil { // Close, not the client
				return status.Error(codes.Unavailable, "rlqs: dianad is shutting down")
			}
			return status.FromContextError(srv.Context().Err()).Err()
		}
	}
}

func (s *Service) refused(reason string, err error) {
	if s.o.Refused != nil {
		s.o.Refused(reason, err)
	}
}

// end forgets the stream: its buckets leave the fleet (best effort: they expire anyway).
func (st *stream) end() {
	s := st.s
	s.mu.Lock()
	delete(s.streams, st)
	s.mu.Unlock()
	var gone []*Report
	for _, b := range st.buckets {
		if b.plan.action == TokenBucket {
			gone = append(gone, &Report{Group: b.plan.group, Instance: st.instance, Demand: Leave})
		}
	}
	s.buckets.Add(-int64(len(st.buckets)))
	st.buckets = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // the stream's has ended
	defer cancel()
	st.leave(ctx, gone)
}

// report handles one usage report: it checks it whole before it changes anything, then
// measures each bucket's demand, merges the demands into the fleet and answers.
func (st *stream) report(ctx context.Context, m *pb.RateLimitQuotaUsageReports) (string, error) {
	s := st.s
	cfg := s.cfg.Load()
	switch {
	case st.domain == "" && m.Domain == "":
		return RefusedMalformed, status.Error(codes.InvalidArgument, "rlqs: domain: required in the stream's first report")
	case st.domain == "":
		if _, known := cfg.Bucket(m.Domain, nil); !known {
			return RefusedUnknownDomain, status.Errorf(codes.NotFound, "rlqs: domain %q: no descriptor config declares it", m.Domain)
		}
		st.domain = m.Domain
	case m.Domain != "" && m.Domain != st.domain:
		return RefusedMalformed, status.Errorf(codes.InvalidArgument, "rlqs: domain: %q, but the stream is for %q (open another stream for another domain)", m.Domain, st.domain)
	}
	keys := make([]string, len(m.BucketQuotaUsages))
	fresh := map[string]bool{} // the keys of this report that the stream does not hold yet
	for i, u := range m.BucketQuotaUsages {
		key, err := BucketKey(u.GetBucketId())
		if err != nil {
			return RefusedMalformed, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d].bucket_id: %v", i, err)
		}
		if n := u.NumRequestsAllowed + u.NumRequestsDenied; u.NumRequestsAllowed > MaxReportRequests || u.NumRequestsDenied > MaxReportRequests || n > MaxReportRequests {
			return RefusedAbsurd, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d]: %d requests allowed and %d denied in one report: at most %d are believed",
				i, u.NumRequestsAllowed, u.NumRequestsDenied, uint64(MaxReportRequests))
		}
		keys[i] = key
		if st.buckets[key] == nil {
			fresh[key] = true
		}
	}
	added := len(fresh)
	if n := len(st.buckets) + added; n > s.o.MaxBucketsPerStream {
		return RefusedTooMany, status.Errorf(codes.ResourceExhausted, "rlqs: %d buckets on one stream: at most %d are tracked (rls.quota.max_buckets_per_stream)", n, s.o.MaxBucketsPerStream)
	}
	if added > 0 {
		if n := s.buckets.Add(int64(added)); n > int64(s.o.MaxBuckets) {
			s.buckets.Add(-int64(added))
			return RefusedTooMany, status.Errorf(codes.ResourceExhausted, "rlqs: %d buckets across every stream: at most %d are tracked (rls.quota.max_buckets)", n, s.o.MaxBuckets)
		}
	}
	now := s.o.Now()
	touched := make([]*bucket, 0, len(keys))
	seen := make(map[*bucket]bool, len(keys)) // a bucket reported twice is answered once
	for i, u := range m.BucketQuotaUsages {
		b := st.buckets[keys[i]]
		if b == nil {
			b = &bucket{id: u.BucketId, key: keys[i], demand: -1, plan: st.plan(cfg, u.BucketId)}
			st.buckets[keys[i]] = b
		}
		b.measure(now, int64(u.NumRequestsAllowed+u.NumRequestsDenied))
		if !seen[b] {
			seen[b] = true
			touched = append(touched, b)
		}
	}
	return "", st.answer(ctx, now, touched)
}

// measure adds a report of n requests at now to the bucket's demand and report interval.
func (b *bucket) measure(now time.Time, n int64) {
	if n > 0 || b.last.IsZero() {
		b.idle = time.Time{}
	} else if b.idle.IsZero() {
		b.idle = now
	}
	b.pending += n
	if b.last.IsZero() {
		b.last = now
		return
	}
	el := now.Sub(b.last)
	if el < minElapsed {
		return
	}
	rate := min(float64(b.pending)/el.Seconds(), MaxDemand)
	if b.demand < 0 {
		b.demand, b.every = rate, el
	} else {
		b.demand = smoothing*rate + (1-smoothing)*b.demand
		b.every = time.Duration(smoothing*float64(el) + (1-smoothing)*float64(b.every))
	}
	b.pending, b.last = 0, now
}

// plan maps a bucket onto its limit in cfg.
func (st *stream) plan(cfg *rls.Config, id *pb.BucketId) plan {
	bl, _ := cfg.Bucket(st.domain, id.GetBucket())
	l := bl.Limit
	switch {
	case l == nil:
		return plan{action: AllowAll, why: WhyNoLimit}
	case l.Unlimited:
		return plan{action: AllowAll, why: WhyUnlimited}
	case l.Shadow:
		return plan{action: AllowAll, why: WhyShadow}
	case l.RequestsPerUnit == 0:
		return plan{action: DenyAll, why: WhyLimit}
	}
	return plan{action: TokenBucket, why: WhyLimit, limit: int64(l.RequestsPerUnit), window: l.UnitSeconds(),
		group: groupKey(st.domain, bl.Entries, bl.Values)}
}

// answer merges the demands of bs into the fleet and sends each its action; abandoned buckets
// are forgotten.
func (st *stream) answer(ctx context.Context, now time.Time, bs []*bucket) error {
	s := st.s
	var reps []*Report
	share := make([]int, len(bs)) // bs[i]'s report in reps, -1 for none
	for i, b := range bs {
		share[i] = -1
		if b.plan.action == TokenBucket && !b.idleFor(now) {
			share[i] = len(reps)
			reps = append(reps, &Report{Group: b.plan.group, Instance: st.instance, Demand: b.milli(), TTL: b.ttl(s.o.AssignmentTTL)})
		}
	}
	failed := false
	if len(reps) > 0 {
		if err := s.merge(ctx, reps); err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			failed = true
			if s.o.Failed != nil {
				s.o.Failed(err)
			}
			if s.fallback != nil {
				s.fallback.Merge(ctx, reps)
			}
		}
	}
	resp := &pb.RateLimitQuotaResponse{}
	var gone []*Report
	for j, b := range bs {
		var a *pb.RateLimitQuotaResponse_BucketAction
		switch {
		case b.idleFor(now):
			a = st.abandon(b, WhyIdle)
			st.forget(b)
			if b.plan.action == TokenBucket {
				gone = append(gone, &Report{Group: b.plan.group, Instance: st.instance, Demand: Leave})
			}
		case b.plan.action != TokenBucket:
			a = st.blanket(b, b.plan.action, b.plan.why)
		default:
			r, nodes := reps[share[j]], int64(1)
			switch {
			case failed && s.o.OnError == rules.FailOpen:
				a = st.blanket(b, AllowAll, WhyOnError)
			case failed && s.o.OnError == rules.FailClosed:
				a = st.blanket(b, DenyAll, WhyOnError)
			default:
				if failed {
					nodes = s.o.Nodes
				}
				a = st.share(b, r, nodes)
			}
		}
		resp.BucketAction = append(resp.BucketAction, a)
	}
	st.leave(ctx, gone)
	if len(resp.BucketAction) == 0 {
		return nil
	}
	return st.srv.Send(resp)
}

// forget drops b from the stream.
func (st *stream) forget(b *bucket) {
	if st.buckets[b.key] == b {
		delete(st.buckets, b.key)
		st.s.buckets.Add(-1)
	}
}

// merge is Fleet.Merge through Options.Guard, or within Options.Timeout.
func (s *Service) merge(ctx context.Context, reps []*Report) error {
	if s.o.Guard != nil {
		return s.o.Guard(ctx, func(ctx context.Context) error { return s.o.Fleet.Merge(ctx, reps) })
	}
	if s.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.o.Timeout)
		defer cancel()
	}
	return s.o.Fleet.Merge(ctx, reps)
}

// leave takes the stream out of buckets' fleets, in one round trip (best effort: its entries
// expire anyway).
func (st *stream) leave(ctx context.Context, reps []*Report) {
	if len(reps) == 0 {
		return
	}
	if err := st.s.merge(ctx, reps); err != nil && st.s.o.Failed != nil {
		st.s.o.Failed(err)
	}
	if st.s.fallback != nil {
		st.s.fallback.Merge(ctx, reps)
	}
}

func (b *bucket) idleFor(now time.Time) bool {
	return !b.idle.IsZero() && now.Sub(b.idle) >= max(IdleAfter, 5*b.every)
}

// milli is the bucket's demand for the fleet: milli-requests a second, Unknown until measured.
func (b *bucket) milli() int64 {
	if b.demand < 0 {
		return Unknown
	}
	return int64(b.demand * 1000)
}

// ttl is the bucket's assignment_time_to_live: at least min and three report intervals, whole
// seconds.
func (b *bucket) ttl(least time.Duration) time.Duration {
	d := max(least, 3*b.every)
	return (d + time.Second - 1).Truncate(time.Second)
}

// share is the bucket's token bucket: its share of the limit divided by nodes, by the demand
// it reports against the fleet's (Report r), the same as sent before while within Tolerance.
func (st *stream) share(b *bucket, r *Report, nodes int64) *pb.RateLimitQuotaResponse_BucketAction {
	p := b.plan
	rate := split(float64(p.limit)/float64(p.window)/float64(nodes), r)
	fill := fillSeconds(p.limit, p.window)
	tb := b.sent
	if tb == nil || b.sentFor != p || math.Abs(rate-b.rate) > Tolerance*b.rate {
		next := &typev3.TokenBucket{
			MaxTokens:     uint32(min(max(MinTokens, math.Ceil(rate*Burst.Seconds())), math.MaxUint32)),
			TokensPerFill: wrapperspb.UInt32(uint32(min(max(1, math.Round(rate*float64(fill))), math.MaxUint32))),
			FillInterval:  &durationpb.Duration{Seconds: fill},
		}
		// Envoy keeps its token bucket when max_tokens, tokens_per_fill and the nanoseconds of
		// fill_interval are unchanged, whatever its seconds: make a new interval a new bucket.
		if tb != nil && tb.FillInterval.GetSeconds() != fill && tb.MaxTokens == next.MaxTokens && tb.TokensPerFill.GetValue() == next.TokensPerFill.GetValue() {
			next.MaxTokens++
		}
		tb, b.sent, b.rate, b.sentFor = next, next, rate, p
	}
	st.sentHook(TokenBucket, WhyLimit, b)
	return assign(b, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tb}}, r.TTL)
}

// split is an instance's share of total (requests a second) by the fleet's demands (Report
// r): an instance whose demand is not known yet gets an equal share, the others split the rest
// by their demands (equally while none has any). An instance the full bucket did not record
// (MaxInstances) gets an equal share of a fleet of one more.
func split(total float64, r *Report) float64 {
	n := float64(max(r.Known+r.Unknown, 1))
	switch {
	case r.Full:
		return total / (n + 1)
	case r.Demand < 0:
		return total / n
	case r.Sum == 0:
		return total / n
	}
	return total * (float64(r.Known) / n) * float64(r.Demand) / float64(r.Sum)
}

// fillSeconds is the fill_interval of a limit's token buckets: whole seconds (Envoy reads no
// fraction), its window or a multiple of it long enough to hold 1000 tokens of the limit, so
// that a share's tokens_per_fill is exact to a thousandth of the limit.
func fillSeconds(limit, window int64) int64 {
	if limit >= 1000 {
		return window
	}
	return window * ((1000 + limit - 1) / limit)
}

// blanket is the ALLOW_ALL or DENY_ALL action for b.
func (st *stream) blanket(b *bucket, a Action, why string) *pb.RateLimitQuotaResponse_BucketAction {
	rule := typev3.RateLimitStrategy_ALLOW_ALL
	if a == DenyAll {
		rule = typev3.RateLimitStrategy_DENY_ALL
	}
	b.sent, b.rate = nil, 0
	st.sentHook(a, why, b)
	return assign(b, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, b.ttl(st.s.o.AssignmentTTL))
}

func (st *stream) abandon(b *bucket, why string) *pb.RateLimitQuotaResponse_BucketAction {
	st.sentHook(Abandon, why, b)
	return &pb.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
		BucketAction: &pb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &pb.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
}

func assign(b *bucket, strategy *typev3.RateLimitStrategy, ttl time.Duration) *pb.RateLimitQuotaResponse_BucketAction {
	return &pb.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
		BucketAction: &pb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &pb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: strategy}}}
}

func (st *stream) sentHook(a Action, why string, b *bucket) {
	if st.s.o.Sent != nil {
		st.s.o.Sent(a, why, st.domain, b.id)
	}
}

// reload re-plans every bucket on the running config: a bucket whose limit disappeared is
// abandoned, one whose limit changed is assigned its new share at once (from the demand last
// measured).
func (st *stream) reload(ctx context.Context) {
	if st.domain == "" {
		return
	}
	cfg := st.s.cfg.Load()
	now := st.s.o.Now()
	var changed []*bucket
	var gone []*Report
	resp := &pb.RateLimitQuotaResponse{}
	for _, b := range st.buckets {
		p := st.plan(cfg, b.id)
		if p == b.plan {
			continue
		}
		old := b.plan
		b.plan = p
		if old.action == TokenBucket && (p.action != TokenBucket || p.group != old.group) {
			gone = append(gone, &Report{Group: old.group, Instance: st.instance, Demand: Leave})
		}
		if p.why == WhyNoLimit && old.why != WhyNoLimit {
			resp.BucketAction = append(resp.BucketAction, st.abandon(b, WhyRemoved))
			st.forget(b)
			continue
		}
		changed = append(changed, b)
	}
	st.leave(ctx, gone)
	if len(changed) > 0 {
		if err := st.answer(ctx, now, changed); err != nil {
			return // the stream is failing: its handler ends it
		}
	}
	if len(resp.BucketAction) > 0 {
		st.srv.Send(resp) // an error ends the stream through Recv
	}
}

// BucketKey checks a bucket id and returns its identity on a stream: its entries in key
// order, each key and value quoted.
func BucketKey(id *pb.BucketId) (string, error) {
	m := id.GetBucket()
	switch {
	case len(m) == 0:
		return "", errors.New("empty: a bucket id needs at least one entry")
	case len(m) > MaxBucketEntries:
		return "", fmt.Errorf("%d entries: at most %d are accepted", len(m), MaxBucketEntries)
	}
	keys := make([]string, 0, len(m))
	size := 0
	for k, v := range m {
		if k == "" {
			return "", errors.New("an entry has an empty key")
		}
		if v == "" {
			return "", fmt.Errorf("entry %q has an empty value", k)
		}
		size += len(k) + len(v)
		keys = append(keys, k)
	}
	if size > MaxBucketLen {
		return "", fmt.Errorf("%d bytes of keys and values: at most %d are accepted", size, MaxBucketLen)
	}
	slices.Sort(keys)
	b := make([]byte, 0, size+4*len(keys))
	for _, k := range keys {
		b = strconv.AppendQuote(b, k)
		b = strconv.AppendQuote(b, m[k])
	}
	return string(b), nil
}
