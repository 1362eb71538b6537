package rls

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// Bounds on one request: Envoy sends a few descriptors of a few entries; these keep a hostile
// caller's request from costing more than a few keys' worth of memory and Redis time.
const (
	MaxDescriptors   = 256
	MaxDescriptorLen = 16 << 10 // bytes of keys and values in one descriptor
)

// The draft RateLimit headers envoyproxy/ratelimit sends with LIMIT_RESPONSE_HEADERS_ENABLED
// (its default header names).
const (
	HeaderLimit     = "RateLimit-Limit"
	HeaderRemaining = "RateLimit-Remaining"
	HeaderReset     = "RateLimit-Reset"
)

// Options configure a Service.
type Options struct {
	// Store decides the limits: a process-memory store (local mode) or the cluster store stack.
	Store rules.Store
	// OnError is what a limit does when Store cannot decide (cluster mode).
	OnError rules.FailPolicy
	// Headers adds the RateLimit-* headers of the descriptor closest to its limit (the one over
	// it, when one is) to every answer, as envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED.
	Headers bool
	// DynamicMetadata adds to every answer the dynamic metadata envoyproxy/ratelimit's
	// RESPONSE_DYNAMIC_METADATA adds: the domain, the descriptors, the hits_addend, and the
	// metadata of the descriptors that passed (see Metadata).
	DynamicMetadata bool
	// QuotaMode puts every descriptor in quota_mode, as envoyproxy/ratelimit's QUOTA_MODE.
	QuotaMode bool
	// ShadowMode answers OK to every request, the descriptors' statuses unchanged, as
	// envoyproxy/ratelimit's SHADOW_MODE; the denials it lets pass count as shadow_denied.
	ShadowMode bool
	// Observe, if set, is told every limit decided, by its metric key: its outcome, and the
	// store's error when the decision came from OnError. For metrics and logs.
	Observe func(key string, o Outcome, err error)
	// Unknown, if set, is told every request for a domain no config file declares: all its
	// descriptors pass, as there.
	Unknown func(domain string)
	// Now is the clock of duration_until_reset for a window nothing was counted in; default
	// time.Now.
	Now func() time.Time
}

// Outcome is what became of one descriptor.
type Outcome = rules.Outcome

// Service answers envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit. It is safe for
// concurrent use; SetConfig swaps the descriptor config atomically.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	o   Options
	cfg atomic.Pointer[Config]
}

// New returns a service answering with cfg.
func New(cfg *Config, o Options) *Service {
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Service{o: o}
	s.SetConfig(cfg)
	return s
}

// SetConfig replaces the descriptor config; requests in flight finish with the one they started
// with.
func (s *Service) SetConfig(c *Config) {
	if c == nil {
		c = &Config{}
	}
	s.cfg.Store(c)
}

// Config returns the running descriptor config.
func (s *Service) Config() *Config { return s.cfg.Load() }

// checked is one descriptor of a request on its way through ShouldRateLimit.
type checked struct {
	m         match
	unlimited bool
	cost      int64
	op        rules.Op
	st        *pb.RateLimitResponse_DescriptorStatus
}

// scratch is a request's working memory, reused by later requests: the stores decide the ops
// before Decide returns and keep no pointer to them (redisstore's coalescer decides a copy of a
// waiting caller's), and the answer holds none of it.
type scratch struct {
	ds  []checked
	ops []*rules.Op
}

// maxPooled bounds the descriptors of a scratch kept for reuse: a request of many does not
// keep its memory.
const maxPooled = 16

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// getScratch returns a scratch with n zero descriptors and no ops.
func getScratch(n int) *scratch {
	sc := scratches.Get().(*scratch)
	sc.ds = slices.Grow(sc.ds[:0], n)[:n]
	sc.ops = sc.ops[:0]
	return sc
}

// put clears sc, so that it holds no limit or key, and keeps it for reuse.
func (sc *scratch) put() {
	if cap(sc.ds) > maxPooled {
		return
	}
	clear(sc.ds)
	clear(sc.ops[:cap(sc.ops)])
	scratches.Put(sc)
}

// ShouldRateLimit decides every descriptor of the request, each on its own as
// envoyproxy/ratelimit does (a descriptor over its limit does not keep the others from
// counting), in one call of the store (one round trip to Redis in cluster mode). The overall
// code is OVER_LIMIT when any descriptor is.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.Descriptors) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if len(req.Descriptors) > MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: at most %d are accepted", len(req.Descriptors), MaxDescriptors)
	}
	cfg := s.cfg.Load()
	known := cfg.domains[req.Domain] != nil
	if !known && s.o.Unknown != nil {
		s.o.Unknown(req.Domain)
	}
	sc := getScratch(len(req.Descriptors))
	defer sc.put()
	ds := sc.ds
	var replaced map[string]bool // the names of the limits another matched limit replaces
	for i, d := range req.Descriptors {
		c := &ds[i]
		c.cost = int64(max(1, req.HitsAddend))
		if d.GetHitsAddend() != nil {
			c.cost = int64(min(d.HitsAddend.Value, uint64(algos.MaxCount+1))) // 0 asks without counting
		}
		if n := descriptorLen(d); n > MaxDescriptorLen {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: %d bytes of keys, values and separators: at most %d are accepted", i, n, MaxDescriptorLen)
		}
		if d.GetLimit() != nil && known { // an unknown domain has no limits, overrides included, as there
			l, err := override(req.Domain, d)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].limit: %v", i, err)
			}
			c.m = match{limit: l, metric: l.FullKey}
		} else {
			c.m, _ = cfg.lookup(req.Domain, d.Entries)
		}
		if l := c.m.limit; l != nil {
			for _, r := range l.Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[r] = true
			}
			if l.Unlimited {
				c.unlimited, c.m.limit = true, nil
			}
		}
	}
	ops := sc.ops
	for i := range ds {
		c := &ds[i]
		l := c.m.limit
		if l != nil && l.Name != "" && replaced[l.Name] {
			c.m.limit, l = nil, nil
		}
		if l == nil || l.Alg == nil {
			continue
		}
		batched, _ := l.Alg.(*rules.Batched)
		c.op = rules.Op{Key: storeKey(req.Domain, req.Descriptors[i].Entries, l, c.m.shared), Alg: l.Alg,
			Req: algos.Request{Cost: c.cost}, OnError: s.o.OnError, Fallback: l.Fallback, Batch: batched}
		ops = append(ops, &c.op)
	}
	sc.ops = ops
	if len(ops) > 0 {
		s.o.Store.Decide(ctx, ops)
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return s.response(req, ds), nil
}

// response builds the answer from the decided descriptors as envoyproxy/ratelimit does: the
// overall code is OVER_LIMIT when a descriptor not in quota_mode is over its limit, or when
// every quota_mode descriptor is (a request within some quota passes; the dynamic metadata
// says which).
func (s *Service) response(req *pb.RateLimitRequest, ds []checked) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(ds))}
	slots := make([]statusSlot, len(ds))
	var closest *pb.RateLimitResponse_DescriptorStatus
	quotas, quotasOver := 0, 0
	for i := range ds {
		c := &ds[i]
		st := &slots[i].st
		s.status(c, st, &slots[i].dur)
		c.st, resp.Statuses[i] = st, st
		if st.CurrentLimit != nil && (closest == nil || st.LimitRemaining < closest.LimitRemaining) {
			closest = st
		}
		quota := !c.unlimited && (s.o.QuotaMode || c.m.limit != nil && c.m.limit.Quota)
		if quota {
			quotas++
		}
		if st.Code == pb.RateLimitResponse_OVER_LIMIT {
			if quota {
				quotasOver++
				continue
			}
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
			closest = st // the last one over its limit, as there
		}
	}
	if quotas > 0 && quotas == quotasOver {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	if s.o.ShadowMode {
		resp.OverallCode = pb.RateLimitResponse_OK
	}
	if s.o.Headers && closest != nil {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: HeaderLimit, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: HeaderRemaining, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: HeaderReset, Value: strconv.FormatInt(closest.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	if s.o.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, ds)
	}
	return resp
}

// statusSlot is a descriptor's status and its duration, allocated together.
type statusSlot struct {
	st  pb.RateLimitResponse_DescriptorStatus
	dur durationpb.Duration
}

// dynamicMetadata is the dynamic metadata envoyproxy/ratelimit answers with (its
// ratelimitToMetadata): domain; descriptors, each with its entries as "key=value", its limit
// override and its hits_addend when it has them; the request's hits_addend when not 0; and
// metadata, the descriptors' metadata merged in request order, of those that passed (an
// unlimited descriptor is not among them). Merging keeps the first value of a key, merging
// objects key by key.
func dynamicMetadata(req *pb.RateLimitRequest, ds []checked) *structpb.Struct {
	descs := make([]*structpb.Value, len(req.Descriptors))
	for i, d := range req.Descriptors {
		entries := make([]*structpb.Value, len(d.Entries))
		for j, e := range d.Entries {
			entries[j] = structpb.NewStringValue(e.Key + "=" + e.Value)
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if d.Limit != nil {
			f["limit"] = structpb.NewStringValue(d.Limit.String())
		}
		if d.HitsAddend != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(d.HitsAddend.Value))
		}
		descs[i] = structpb.NewStructValue(&structpb.Struct{Fields: f})
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.Domain),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if req.HitsAddend != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(req.HitsAddend))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range ds {
		c := &ds[i]
		if c.unlimited || c.st.Code == pb.RateLimitResponse_OVER_LIMIT || c.m.limit == nil {
			continue
		}
		mergeMetadata(passed, c.m.limit.Metadata)
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src's fields to dst: a key dst holds already keeps its value, unless both
// are objects, which merge the same way. src is never changed (it is the config's).
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			if sv := v.GetStructValue(); sv != nil {
				cp := &structpb.Struct{Fields: map[string]*structpb.Value{}}
				mergeMetadata(cp, sv)
				v = structpb.NewStructValue(cp)
			}
			dst.Fields[k] = v
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeMetadata(have.GetStructValue(), v.GetStructValue())
		}
	}
}

// status sets st, the zero status, to one descriptor's answer: OK without a limit when none
// applies; OK with limit_remaining 2^32-1 when unlimited; else the limit, what remains of it
// and the time until its window resets (in dur, the zero duration), OVER_LIMIT when over it
// (unless in shadow mode, which answers OK and counts the denial).
func (s *Service) status(c *checked, st *pb.RateLimitResponse_DescriptorStatus, dur *durationpb.Duration) {
	l := c.m.limit
	st.Code = pb.RateLimitResponse_OK
	switch {
	case c.unlimited:
		st.LimitRemaining = math.MaxUint32
		return
	case l == nil:
		return
	}
	st.CurrentLimit = l.proto
	var d algos.Decision
	switch {
	case l.Alg == nil:
		d.Allowed = c.cost == 0 // requests_per_unit 0: every hit is over the limit
	case l.counter && c.op.Err == nil:
		// The counter's count, compared with the limit: over once more hits were counted than
		// it allows, until the window ends (a hit the counter cannot hold is over too).
		d = c.op.Dec
		count := algos.MaxCount - d.Remaining
		d.Allowed = d.Allowed && count <= int64(l.RequestsPerUnit)
		d.Remaining = int64(l.RequestsPerUnit) - count
	case l.counter:
		d = c.op.Dec // its on_error policy's: the limit's share per node, or open or closed
		d.Remaining = min(d.Remaining, int64(l.RequestsPerUnit))
	default:
		d = c.op.Dec
	}
	reset := (d.ResetAfter + algos.Second - 1) / algos.Second
	if reset <= 0 {
		// Nothing counted in this window (or no store asked): the window's end, as there.
		u := l.Window
		reset = u - s.o.Now().Unix()%u
	}
	dur.Seconds = reset
	st.DurationUntilReset = dur
	outcome := rules.Allowed
	if d.Allowed {
		st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
	} else {
		outcome = rules.Denied
		st.Code = pb.RateLimitResponse_OVER_LIMIT
		if l.Shadow {
			outcome, st.Code = rules.ShadowDenied, pb.RateLimitResponse_OK
		}
		if s.o.ShadowMode {
			outcome = rules.ShadowDenied
		}
	}
	if s.o.Observe != nil {
		s.o.Observe(c.m.metric, outcome, c.op.Err)
	}
}

// override is the limit a descriptor brings itself (Envoy's limit override): its
// requests_per_unit per unit, counted as a plain limit of the config is, under the
// descriptor's entries, never in shadow mode.
func override(domain string, d *rlv3.RateLimitDescriptor) (*Limit, error) {
	o := d.Limit
	unit := pb.RateLimitResponse_RateLimit_Unit(o.Unit) // the same numbers, as there
	secs := unitSeconds(unit)
	if secs == 0 {
		return nil, fmt.Errorf("unit %s: must be one of %s", o.Unit, unitNames())
	}
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.Entries {
		b.WriteString(".")
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteString("_" + e.Value)
		}
	}
	l := &Limit{FullKey: b.String(), RequestsPerUnit: o.RequestsPerUnit, Unit: unit, Multiplier: 1, Window: secs, Algorithm: "fixed_window"}
	l.proto = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: o.RequestsPerUnit, Unit: unit}
	if o.RequestsPerUnit > 0 {
		// Counted as a config's plain limit is (see Limit.counter), the limit itself deciding
		// while Redis cannot.
		fw, err := algos.NewFixedWindow(int64(o.RequestsPerUnit), secs*algos.Second)
		if err != nil {
			return nil, err
		}
		l.Fallback = fw
		l.Alg, _ = algos.NewCounter(secs * algos.Second)
		l.counter = true
	}
	return l, nil
}

// storeKey is the identity a limit counts a descriptor under: the domain, the limit's window
// and algorithm ("counter" for a counter), and the entries (a share_threshold entry by its wildcard value), each part
// escaped so that no two descriptors share a key. "rls:" cannot start a rule's key.
func storeKey(domain string, entries []*rlv3.RateLimitDescriptor_Entry, l *Limit, shared []string) string {
	var b strings.Builder
	n := len("rls:|3600|") + len(domain) + len(l.Algorithm)
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	b.Grow(n + n/8) // room for a few escapes: one allocation
	b.WriteString("rls:")
	escape(&b, domain)
	b.WriteString("|")
	b.WriteString(strconv.FormatInt(l.Window, 10))
	b.WriteString("|")
	if l.counter {
		b.WriteString(l.Alg.Script().Name) // not the fixed window's: its state is a hash
	} else {
		b.WriteString(l.Algorithm)
	}
	for i, e := range entries {
		b.WriteString("|")
		escape(&b, e.Key)
		b.WriteString("=")
		if i < len(shared) && shared[i] != "" {
			escape(&b, shared[i])
		} else {
			escape(&b, e.Value)
		}
	}
	return b.String()
}

// escape writes s with '\', '|' and '=' escaped by '\'.
func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '|', '=':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
}

// descriptorLen is the size of a descriptor's key: its keys and values, and two bytes of
// separators per entry (so that a million empty entries count too).
func descriptorLen(d *rlv3.RateLimitDescriptor) int {
	n := 0
	for _, e := range d.Entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	return n
}
