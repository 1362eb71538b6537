package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

// Call shares Decide's breaker both ways: failed calls open it for the decisions, failed
// decisions open it for the calls; while open neither calls Redis; one probe closes it for both.
func TestCallSharesTheBreaker(t *testing.T) {
	fw := must(algos.NewFixedWindow(100, algos.Hour))
	decide := func(r *rig, _ func(context.Context) error) error {
		return r.decide(context.Background(), "k", fw, nil, algos.Request{Cost: 1}, rules.FailOpen)[0].Err
	}
	call := func(r *rig, ping func(context.Context) error) error { return r.s.Call(context.Background(), ping) }
	for _, tc := range []struct {
		name        string
		fail, other func(r *rig, ping func(context.Context) error) error
	}{
		{"calls open it for decisions", call, decide},
		{"decisions open it for calls", decide, call},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Options{Timeout: 100 * time.Millisecond, Failures: 3, OpenFor: 300 * time.Millisecond}, redisstore.Options{})
			c := r.srv.Client()
			c.AddHook(r.sent) // the calls' round trips counted with the decisions'
			ping := func(ctx context.Context) error { return c.Ping(ctx).Err() }
			if err := r.s.Call(context.Background(), ping); err != nil {
				t.Fatalf("call with Redis up: %v", err)
			}
			r.srv.Pause()
			// Three failures open it; more if a timeout fell while the busy machine starved the
			// test of CPU (not counted against Redis).
			for n := 0; !r.s.Open(); n++ {
				if n == 20 {
					t.Fatalf("%d failed round trips did not open the breaker", n)
				}
				if err := tc.fail(r, ping); err == nil {
					t.Fatal("a round trip to a stopped Redis succeeded")
				}
			}
			// While open, a call fails without a round trip (what the breaker guarantees,
			// whatever the machine's load): no command is sent.
			sent := r.sent.n.Load()
			if err := tc.other(r, ping); !errors.Is(err, ErrOpen) {
				t.Fatalf("while open: %v, want ErrOpen", err)
			}
			if n := r.sent.n.Load() - sent; n != 0 {
				t.Fatalf("while open: %d commands sent, want none", n)
			}
			r.srv.Resume()
			time.Sleep(300 * time.Millisecond)
			if err := tc.other(r, ping); err != nil {
				t.Fatalf("the probe after the open period: %v", err)
			}
			if r.s.Open() {
				t.Fatal("an answered probe did not close the breaker")
			}
		})
	}
}

// TestWithTimeout: a caller's deadline that comes first is used as it is, without a context of
// its own (none allocated); otherwise the timeout bounds the call.
func TestWithTimeout(t *testing.T) {
	const d = 50 * time.Millisecond
	for _, tc := range []struct {
		name   string
		parent time.Duration // the caller's deadline from now; 0: none
		same   bool
	}{
		{"no deadline", 0, false},
		{"sooner", 20 * time.Millisecond, true},
		{"later", time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := context.Background()
			if tc.parent > 0 {
				var cancel context.CancelFunc
				parent, cancel = context.WithTimeout(parent, tc.parent)
				defer cancel()
			}
			before := time.Now()
			ctx, cancel := withTimeout(parent, d)
			after := time.Now()
			defer cancel()
			end, ok := ctx.Deadline()
			switch parentEnd, _ := parent.Deadline(); {
			case !ok:
				t.Fatal("no deadline")
			case (ctx == parent) != tc.same:
				t.Errorf("ctx is the caller's: %v, want %v", ctx == parent, tc.same)
			case tc.same && !end.Equal(parentEnd):
				t.Errorf("deadline %v, want the caller's, %v", end, parentEnd)
			case !tc.same && (end.Before(before.Add(d)) || end.After(after.Add(d))):
				t.Errorf("deadline %v after the call, want %v", end.Sub(before), d)
			}
			if tc.same {
				if n := testing.AllocsPerRun(100, func() { _, c := withTimeout(parent, d); c() }); n != 0 {
					t.Errorf("%v allocations, want none", n)
				}
			}
		})
	}
}
