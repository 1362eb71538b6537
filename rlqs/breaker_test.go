package rlqs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/redisstore"
)

// sentCounter is a go-redis hook counting the round trips a client makes.
type sentCounter struct{ n atomic.Int64 }

func (h *sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// The fleet's round trips go through the decisions' circuit breaker (Options.Guard): with
// redis-server stopped mid-stream (SIGSTOP: connections accepted, never answered), the reports
// that open the breaker wait the timeout, and from then on every report is answered at once
// by on_error without a round trip; the decisions of the node see the same open breaker; once
// Redis is back, the first report after the open period probes it and the split resumes.
func TestBreaker(t *testing.T) {
	const timeout, openFor, failures = 150 * time.Millisecond, 600 * time.Millisecond, 3
	for _, tc := range []struct {
		policy rules.FailPolicy
		want   string
		rate   float64 // requests a second of the token bucket; 0: none
	}{
		{rules.FailOpen, "allow_all/on_error", 0},
		{rules.FailClosed, "deny_all/on_error", 0},
		{rules.FailLocal, "token_bucket/limit", 25}, // 100 a second divided by 4 nodes
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client()
			trips := &sentCounter{}
			c.AddHook(trips)
			fs := failover.New(redisstore.New(c, redisstore.Options{}), failover.Options{Timeout: timeout, Failures: failures, OpenFor: openFor})
			clock := newClock()
			var mu sync.Mutex
			var last string
			var failed []error
			s := New(config(t, apiLimit(100)), Options{Now: clock.Now, Fleet: NewRedis(c, "d:", nil), OnError: tc.policy, Nodes: 4, Guard: fs.Call,
				Failed: func(err error) { mu.Lock(); failed = append(failed, err); mu.Unlock() },
				Sent:   func(a Action, why, _ string, _ *pb.BucketId) { mu.Lock(); last = a.String() + "/" + why; mu.Unlock() }})
			e := dialEnvoy(t, serve(t, s), "edge", clock)
			// report sends a second of traffic and returns the answer, its rate and how long it took.
			report := func() (string, float64, time.Duration) {
				t.Helper()
				for range 50 {
					e.request(acme)
				}
				clock.Add(time.Second)
				start := time.Now()
				e.report()
				took := time.Since(start)
				e.mu.Lock()
				tb := e.buckets[key(acme)].strategy.GetTokenBucket()
				e.mu.Unlock()
				rate := 0.0
				if tb != nil {
					rate = float64(tb.GetTokensPerFill().GetValue()) / float64(max(1, tb.GetFillInterval().GetSeconds()))
				}
				mu.Lock()
				defer mu.Unlock()
				return last, rate, took
			}
			e.request(acme)
			if got, rate, _ := report(); got != "token_bucket/limit" || rate != 100 || len(failed) != 0 {
				t.Fatalf("with Redis up: %s at %v a second, failures %v", got, rate, failed)
			}

			srv.Pause()
			t.Cleanup(srv.Resume) // before the server's own cleanup stops it
			// failures failed round trips open it; more if a timeout fell while this busy machine
			// starved the process of CPU (not counted against Redis).
			n := 0
			for ; !fs.Open(); n++ {
				if n == 20 {
					t.Fatalf("%d failed reports did not open the breaker", n)
				}
				got, rate, took := report()
				if got != tc.want || rate != tc.rate || took < timeout {
					t.Fatalf("report %d with Redis stopped: %s at %v a second after %v, want %s at %v after the timeout", n, got, rate, took, tc.want, tc.rate)
				}
			}
			if n < failures {
				t.Fatalf("the breaker opened after %d failed reports, want %d", n, failures)
			}
			// With the breaker open a report is answered without a round trip to Redis (counted
			// below): what "at once" means, whatever the machine's load.
			before := trips.n.Load()
			for i := range 5 {
				got, rate, _ := report()
				if got != tc.want || rate != tc.rate {
					t.Fatalf("report %d with the breaker open: %s at %v a second, want %s at %v", i, got, rate, tc.want, tc.rate)
				}
			}
			if n := trips.n.Load() - before; n != 0 {
				t.Fatalf("%d round trips to Redis while the breaker was open", n)
			}
			mu.Lock()
			if len(failed) != n+5 || !errors.Is(failed[len(failed)-1], failover.ErrOpen) {
				t.Fatalf("failures told: %v", failed)
			}
			mu.Unlock()
			// The node's decisions meet the same open breaker.
			op := &rules.Op{Key: "k", Alg: fixedWindow(t), OnError: rules.FailClosed}
			fs.Decide(context.Background(), []*rules.Op{op})
			if !errors.Is(op.Err, failover.ErrOpen) {
				t.Fatalf("a decision while the fleet's failures opened the breaker: %v", op.Err)
			}

			srv.Resume()
			time.Sleep(openFor)
			if got, rate, _ := report(); got != "token_bucket/limit" || rate != 100 || fs.Open() {
				t.Fatalf("after Redis came back: %s at %v a second, breaker open %v", got, rate, fs.Open())
			}
		})
	}
}

func fixedWindow(t *testing.T) algos.Algorithm {
	t.Helper()
	a, err := algos.NewFixedWindow(100, algos.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
