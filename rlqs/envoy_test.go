package rlqs

import (
	"context"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// This file plays Envoy's rate_limit_quota filter over a real gRPC stream, as its
// GlobalRateLimitClientImpl does: a new bucket is allowed (no_assignment_behavior unset) and
// reported at once; every bucket is reported every interval (time_elapsed in whole seconds); a
// token bucket assignment makes a token bucket that starts full and fills at
// tokens_per_fill / fill_interval (whole seconds) a second, kept as long as max_tokens,
// tokens_per_fill and fill_interval's nanoseconds are unchanged; an expired assignment falls
// back to the default (allow); abandon_action forgets the bucket.

// vclock is a virtual clock the test moves: the service and the simulated Envoys share it, so
// that a minute of traffic runs in a second.
type vclock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *vclock { return &vclock{t: time.Unix(1_800_000_000, 0)} }

func (c *vclock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *vclock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// serve runs s on a loopback gRPC listener until the test ends and returns its address.
func serve(t *testing.T, s *Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterRateLimitQuotaServiceServer(g, s)
	go g.Serve(ln)
	t.Cleanup(func() { s.Close(); g.Stop() })
	return ln.Addr().String()
}

// tokenBucket is Envoy's AtomicTokenBucketImpl: full at creation, filled continuously.
type tokenBucket struct {
	max, tokens, rate float64
	at                time.Time
}

func (tb *tokenBucket) take(now time.Time) bool {
	tb.tokens = math.Min(tb.max, tb.tokens+now.Sub(tb.at).Seconds()*tb.rate)
	tb.at = now
	if tb.tokens < 1 {
		return false
	}
	tb.tokens--
	return true
}

// ebucket is one bucket of the simulated Envoy.
type ebucket struct {
	id              map[string]string
	allowed, denied uint64
	last            time.Time
	strategy        *typev3.RateLimitStrategy // the active assignment; nil: none
	tb              *tokenBucket
	expires         time.Time
}

// envoy is one simulated Envoy instance.
type envoy struct {
	t      *testing.T
	clock  *vclock
	domain string
	stream pb.RateLimitQuotaService_StreamRateLimitQuotasClient

	mu      sync.Mutex
	buckets map[string]*ebucket
	answers int // responses applied
	cond    *sync.Cond
	err     error // the stream's end

	admitted, refused int // requests, for the test
}

func dialEnvoy(t *testing.T, addr, domain string, clock *vclock) *envoy {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := pb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e := &envoy{t: t, clock: clock, domain: domain, stream: stream, buckets: map[string]*ebucket{}}
	e.cond = sync.NewCond(&e.mu)
	go e.receive()
	return e
}

func key(id map[string]string) string {
	k, err := BucketKey(&pb.BucketId{Bucket: id})
	if err != nil {
		panic(err)
	}
	return k
}

func (e *envoy) receive() {
	for {
		m, err := e.stream.Recv()
		e.mu.Lock()
		if err != nil {
			e.err = err
			e.cond.Broadcast()
			e.mu.Unlock()
			return
		}
		now := e.clock.Now()
		for _, a := range m.BucketAction {
			k := key(a.BucketId.GetBucket())
			b := e.buckets[k]
			if b == nil {
				continue // as Envoy: an action for a bucket it does not hold is ignored
			}
			if a.GetAbandonAction() != nil {
				delete(e.buckets, k)
				continue
			}
			qa := a.GetQuotaAssignmentAction()
			s := qa.GetRateLimitStrategy()
			if tb := s.GetTokenBucket(); tb != nil {
				old := b.strategy.GetTokenBucket()
				if old == nil || old.MaxTokens != tb.MaxTokens || old.TokensPerFill.GetValue() != tb.TokensPerFill.GetValue() || old.FillInterval.GetNanos() != tb.FillInterval.GetNanos() {
					b.tb = &tokenBucket{max: float64(tb.MaxTokens), tokens: float64(tb.MaxTokens),
						rate: float64(tb.TokensPerFill.GetValue()) / float64(tb.FillInterval.GetSeconds()), at: now}
				}
			} else {
				b.tb = nil
			}
			b.strategy = s
			b.expires = now.Add(time.Duration(qa.AssignmentTimeToLive.GetSeconds()) * time.Second)
		}
		e.answers++
		e.cond.Broadcast()
		e.mu.Unlock()
	}
}

// request sends one request into bucket id and says whether it was admitted; a new bucket is
// reported at once (and its answer awaited: the test's network is instant).
func (e *envoy) request(id map[string]string) bool {
	now := e.clock.Now()
	e.mu.Lock()
	k := key(id)
	b := e.buckets[k]
	if b == nil {
		b = &ebucket{id: id, last: now} // its first request goes into the report sent now
		e.buckets[k] = b
		e.admitted++
		e.mu.Unlock()
		e.send(&pb.RateLimitQuotaUsageReports{Domain: e.domain, BucketQuotaUsages: []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &pb.BucketId{Bucket: id}, TimeElapsed: &durationpb.Duration{}, NumRequestsAllowed: 1}}})
		return true
	}
	ok := true
	if b.strategy != nil && now.Before(b.expires) {
		switch {
		case b.tb != nil:
			ok = b.tb.take(now)
		case b.strategy.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
			ok = false
		}
	}
	if ok {
		b.allowed++
		e.admitted++
	} else {
		b.denied++
		e.refused++
	}
	e.mu.Unlock()
	return ok
}

// report sends the usage of every bucket, as the filter's report timer does, and waits for
// the answer.
func (e *envoy) report() {
	now := e.clock.Now()
	m := &pb.RateLimitQuotaUsageReports{Domain: e.domain}
	e.mu.Lock()
	for _, b := range e.buckets {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &pb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &pb.BucketId{Bucket: b.id}, NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
			TimeElapsed: &durationpb.Duration{Seconds: int64(now.Sub(b.last) / time.Second)}})
		b.allowed, b.denied, b.last = 0, 0, now
	}
	e.mu.Unlock()
	if len(m.BucketQuotaUsages) > 0 {
		e.send(m)
	}
}

// send sends m and waits for the answer.
func (e *envoy) send(m *pb.RateLimitQuotaUsageReports) {
	e.t.Helper()
	e.mu.Lock()
	want := e.answers + 1
	e.mu.Unlock()
	if err := e.stream.Send(m); err != nil {
		e.t.Fatalf("send: %v", err)
	}
	e.await(want)
}

// await waits until n answers were applied.
func (e *envoy) await(n int) {
	e.t.Helper()
	deadline := time.AfterFunc(10*time.Second, func() {
		e.mu.Lock()
		e.err = context.DeadlineExceeded
		e.cond.Broadcast()
		e.mu.Unlock()
	})
	defer deadline.Stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.answers < n && e.err == nil {
		e.cond.Wait()
	}
	if e.answers < n {
		e.t.Fatalf("no answer from the service: %v", e.err)
	}
}

// sim drives envoys in lockstep on the virtual clock, in steps of step: each sends rate(i,
// at) requests a second into bucket, evenly, and reports every interval from its start.
type sim struct {
	clock  *vclock
	envoys []*envoy
	bucket map[string]string
	rate   func(i int, at time.Duration) float64
	at     time.Duration // since the start
	acc    []float64
}

// run runs the traffic for d and returns the requests each envoy admitted meanwhile.
func (s *sim) run(d time.Duration) []int {
	if s.acc == nil {
		s.acc = make([]float64, len(s.envoys))
	}
	admitted := make([]int, len(s.envoys))
	for end := s.at + d; s.at < end; s.at += step {
		if s.at > 0 && s.at%interval == 0 {
			for _, e := range s.envoys {
				e.report()
			}
		}
		for i, e := range s.envoys {
			s.acc[i] += s.rate(i, s.at) * step.Seconds()
			for ; s.acc[i] >= 1; s.acc[i]-- {
				if e.request(s.bucket) {
					admitted[i]++
				}
			}
		}
		s.clock.Add(step)
	}
	return admitted
}

// poisson turns a traffic of rates into Poisson arrivals: the requests of each step drawn
// around rate's mean, from a seeded source.
func poisson(rate func(i int, at time.Duration) float64, seed uint64) func(i int, at time.Duration) float64 {
	rnd := rand.New(rand.NewPCG(seed, seed))
	return func(i int, at time.Duration) float64 {
		limit, k, p := math.Exp(-rate(i, at)*step.Seconds()), 0, rnd.Float64()
		for ; p > limit; p *= rnd.Float64() {
			k++
		}
		return float64(k) / step.Seconds()
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func itoa(n int) string { return strconv.Itoa(n) }
