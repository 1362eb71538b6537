package failover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

// wait bounds every wait for something that should happen soon.
const wait = 10 * time.Second

// rig is a Store on a real redis-server, with a hook that counts what its client sends.
type rig struct {
	srv    *redistest.Server
	redis  *redisstore.Store
	s      *Store
	sent   *counter
	mu     sync.Mutex
	states []bool // OnState
}

func newRig(t *testing.T, o Options, ro redisstore.Options) *rig {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client()
	sent := &counter{}
	c.AddHook(sent)
	r := &rig{srv: srv, redis: redisstore.New(c, ro), sent: sent}
	o.OnState = func(open bool) {
		r.mu.Lock()
		r.states = append(r.states, open)
		r.mu.Unlock()
	}
	r.s = New(r.redis, o)
	return r
}

// decide decides one op of each given policy, all on alg with fallback fb, and returns them.
func (r *rig) decide(ctx context.Context, key string, alg, fb algos.Algorithm, req algos.Request, policies ...rules.FailPolicy) []*rules.Op {
	ops := make([]*rules.Op, len(policies))
	for i, p := range policies {
		ops[i] = &rules.Op{Key: fmt.Sprintf("%s:%d", key, i), Alg: alg, Req: req, OnError: p, Fallback: fb}
	}
	r.s.Decide(ctx, ops)
	return ops
}

// changes returns the breaker changes reported so far.
func (r *rig) changes() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.states...)
}

// counter counts the round trips a client makes (a command or a pipeline each). While gate is
// set, a round trip first waits for the gate to close, after telling entered.
type counter struct {
	n       atomic.Int64
	yield   atomic.Bool // a round trip first gives its turn on the CPU to other goroutines
	gate    atomic.Pointer[chan struct{}]
	entered chan struct{}
}

func (h *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.enter(ctx); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.enter(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

func (h *counter) enter(ctx context.Context) error {
	h.n.Add(1)
	if h.yield.Load() {
		runtime.Gosched()
	}
	if g := h.gate.Load(); g != nil {
		h.entered <- struct{}{}
		select {
		case <-*g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func must(a algos.Algorithm, err error) algos.Algorithm {
	if err != nil {
		panic(err)
	}
	return a
}

// TestHealthy: with Redis up, decisions are redisstore's own, errors are nil, the breaker stays
// closed, and a batch of ops is one round trip.
func TestHealthy(t *testing.T) {
	var observed []error
	// A long timeout: a busy machine must not turn a healthy round trip into a failure here.
	r := newRig(t, Options{Timeout: wait, Observe: func(_ time.Duration, err error) { observed = append(observed, err) }},
		redisstore.Options{CallerClock: true})
	ctx := context.Background()
	limits := algotest.Exact()
	for _, l := range limits {
		t.Run(l.Name, func(t *testing.T) {
			for i := range 5 {
				req := algos.Request{Now: 1_000_000 + int64(i)*algos.Second, Cost: 1, ID: int64(i) + 1, DryRun: i%2 == 1}
				ops := r.decide(ctx, "f:"+l.Name, l.Alg, nil, req, rules.FailClosed)
				want, err := r.redis.DecideOne(ctx, "d:"+l.Name, l.Alg, req)
				if err != nil {
					t.Fatal(err)
				}
				if ops[0].Err != nil || ops[0].Dec != want {
					t.Fatalf("request %d: %+v, err %v; redisstore decides %+v", i, ops[0].Dec, ops[0].Err, want)
				}
			}
		})
	}
	for i, err := range observed {
		if err != nil {
			t.Fatalf("round trip %d observed error %v", i, err)
		}
	}
	if len(observed) != 5*len(limits) {
		t.Fatalf("observed %d round trips, want %d", len(observed), 5*len(limits))
	}

	ops := make([]*rules.Op, len(limits))
	for i, l := range limits {
		ops[i] = &rules.Op{Key: "batch:" + l.Name, Alg: l.Alg, Req: algos.Request{Now: 1_000_000, Cost: 1, ID: 1}}
	}
	r.s.Decide(ctx, ops) // loads the batch scripts (scripts.Batch): NOSCRIPT, then EVAL
	for i, l := range limits {
		ops[i] = &rules.Op{Key: "batch2:" + l.Name, Alg: l.Alg, Req: algos.Request{Now: 1_000_000, Cost: 1, ID: 2}}
	}
	before := r.sent.n.Load()
	r.s.Decide(ctx, ops)
	if n := r.sent.n.Load() - before; n != 1 {
		t.Errorf("a batch of %d ops made %d round trips, want 1", len(ops), n)
	}
	for _, op := range ops {
		if op.Err != nil || !op.Dec.Allowed {
			t.Errorf("%s: %+v, err %v", op.Key, op.Dec, op.Err)
		}
	}
	if r.s.Open() || len(r.changes()) != 0 {
		t.Fatal("the breaker moved while Redis was up")
	}
}

// TestRedisStopped: with Redis down each policy gives its decision; after Failures failed round
// trips the breaker opens, and from then on Decide does not call Redis.
func TestRedisStopped(t *testing.T) {
	var observed atomic.Int64
	r := newRig(t, Options{Failures: 3, OpenFor: time.Minute,
		Observe: func(_ time.Duration, err error) {
			if err == nil {
				t.Error("a round trip to a stopped Redis observed no error")
			}
			observed.Add(1)
		}}, redisstore.Options{})
	alg := must(algos.NewSlidingLog(10, algos.Minute))
	fb := must(algos.NewSlidingLog(5, algos.Minute))
	r.srv.Stop()

	check := func(stage string, ops []*rules.Op, retry int64, cause func(error) bool) {
		t.Helper()
		tests := []struct {
			policy rules.FailPolicy
			want   algos.Decision
		}{
			{rules.FailOpen, algos.Decision{Allowed: true, Limit: 10, Remaining: 10, Granted: 2}},
			{rules.FailClosed, algos.Decision{Limit: 10, RetryAfter: retry, ResetAfter: retry}},
		}
		for i, tt := range tests {
			op := ops[i]
			if op.OnError != tt.policy {
				t.Fatalf("op %d has policy %v, want %v", i, op.OnError, tt.policy)
			}
			if !cause(op.Err) {
				t.Errorf("%s, %v: unexpected err %v", stage, tt.policy, op.Err)
			}
			if retry < 0 && tt.policy == rules.FailClosed { // unknown: check the range only
				if op.Dec.RetryAfter <= 0 || op.Dec.RetryAfter > time.Minute.Microseconds() || op.Dec.RetryAfter != op.Dec.ResetAfter {
					t.Errorf("%s, %v: %+v, want RetryAfter = ResetAfter in (0, 1m]", stage, tt.policy, op.Dec)
				}
				op.Dec.RetryAfter, op.Dec.ResetAfter = tt.want.RetryAfter, tt.want.ResetAfter
			}
			if op.Dec != tt.want {
				t.Errorf("%s, %v: %+v, want %+v", stage, tt.policy, op.Dec, tt.want)
			}
		}
		if local := ops[2]; local.OnError != rules.FailLocal || !cause(local.Err) || !local.Dec.Allowed || local.Dec.Limit != 5 {
			t.Errorf("%s, local: %+v, err %v: want allowed by the fallback's limit 5", stage, local.Dec, local.Err)
		}
	}
	redisFailed := func(err error) bool { return err != nil && !errors.Is(err, ErrOpen) }
	req := algos.Request{Cost: 2}
	for i := range 3 {
		retry := time.Second.Microseconds() // closed: no probe scheduled
		if i == 2 {
			retry = time.Minute.Microseconds() // this one opens the breaker for OpenFor
		}
		ops := r.decide(context.Background(), fmt.Sprintf("c%d", i), alg, fb, req, rules.FailOpen, rules.FailClosed, rules.FailLocal)
		check(fmt.Sprintf("failure %d", i+1), ops, retry, redisFailed)
		if open := r.s.Open(); open != (i == 2) {
			t.Fatalf("after %d failures: open = %v", i+1, open)
		}
	}
	if got := r.changes(); len(got) != 1 || !got[0] {
		t.Fatalf("breaker changes %v, want [true]", got)
	}

	before := r.sent.n.Load()
	for i := range 20 {
		ops := r.decide(context.Background(), fmt.Sprintf("o%d", i), alg, fb, req, rules.FailOpen, rules.FailClosed, rules.FailLocal)
		check(fmt.Sprintf("open, call %d", i+1), ops, -1, func(err error) bool { return err == ErrOpen })
	}
	if n := r.sent.n.Load() - before; n != 0 {
		t.Fatalf("the open breaker let %d round trips through", n)
	}
	if n := observed.Load(); n != 3 {
		t.Fatalf("observed %d round trips, want the 3 that failed", n)
	}
}

// TestFailLocal: while Redis is down, a FailLocal op is decided in process memory by its
// fallback: a limit of 10 per minute across 2 nodes admits exactly 5 here, and dry runs take
// nothing.
func TestFailLocal(t *testing.T) {
	r := newRig(t, Options{Failures: 1, OpenFor: time.Minute}, redisstore.Options{})
	alg := must(algos.NewSlidingLog(10, algos.Minute))
	fb := must(algos.NewSlidingLog(5, algos.Minute)) // 10 per minute / 2 nodes
	r.srv.Stop()
	ctx := context.Background()
	for i := range 10 {
		ops := r.decide(ctx, "dry", alg, fb, algos.Request{Cost: 1, DryRun: true}, rules.FailLocal)
		if !ops[0].Dec.Allowed || ops[0].Err == nil {
			t.Fatalf("dry run %d: %+v, err %v; want allowed with the cause in Err", i, ops[0].Dec, ops[0].Err)
		}
	}
	admitted := 0
	for i := range 8 {
		ops := r.decide(ctx, "dry", alg, fb, algos.Request{Cost: 1}, rules.FailLocal)
		if ops[0].Err == nil {
			t.Fatalf("request %d: no error while Redis is down", i)
		}
		if ops[0].Dec.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d of 8 locally, want 5", admitted)
	}
}

// TestRedisPaused: a Redis that accepts connections but never answers costs each call at most
// Timeout, which ends it with a deadline error, and opens the breaker.
func TestRedisPaused(t *testing.T) {
	r := newRig(t, Options{Timeout: 100 * time.Millisecond, Failures: 2, OpenFor: time.Minute}, redisstore.Options{})
	g := must(algos.NewGCRA(10, algos.Second, 10))
	r.srv.Pause()
	t.Cleanup(r.srv.Resume)
	for i := range 2 {
		ops := r.decide(context.Background(), "k", g, nil, algos.Request{Cost: 1}, rules.FailOpen)
		if !errors.Is(ops[0].Err, context.DeadlineExceeded) || !ops[0].Dec.Allowed {
			t.Fatalf("call %d: %+v, err %v; want allowed with a deadline error", i, ops[0].Dec, ops[0].Err)
		}
	}
	if !r.s.Open() {
		t.Fatal("breaker closed after 2 timeouts")
	}
	ops := r.decide(context.Background(), "k", g, nil, algos.Request{Cost: 1}, rules.FailOpen)
	if ops[0].Err != ErrOpen {
		t.Fatalf("open breaker: err %v, want ErrOpen", ops[0].Err)
	}
}

// TestRecovery: after a restart (data and scripts gone) the probe due after OpenFor succeeds and
// the breaker closes by itself; decisions are Redis's again.
func TestRecovery(t *testing.T) {
	r := newRig(t, Options{Failures: 1, OpenFor: 100 * time.Millisecond}, redisstore.Options{})
	g := must(algos.NewGCRA(1, algos.Hour, 10))
	ctx := context.Background()
	r.srv.Stop()
	r.decide(ctx, "k", g, nil, algos.Request{Cost: 1}, rules.FailClosed)
	if !r.s.Open() {
		t.Fatal("breaker closed after a failure with Failures 1")
	}
	r.srv.Restart()
	var ops []*rules.Op
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		ops = r.decide(ctx, "k", g, nil, algos.Request{Cost: 1}, rules.FailClosed)
		if ops[0].Err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision from Redis within %v of its restart: %v", wait, ops[0].Err)
		}
	}
	if r.s.Open() {
		t.Fatal("breaker still open after Redis decided")
	}
	if d := ops[0].Dec; !d.Allowed || d.Remaining != 9 {
		t.Fatalf("first decision after recovery: %+v, want allowed with 9 remaining", d)
	}
	st, err := r.redis.State(ctx, ops[0].Key, g)
	if err != nil || st.W[0] == 0 {
		t.Fatalf("Redis holds %+v (err %v) for the decided key", st, err)
	}
	if got := r.changes(); len(got) != 2 || !got[0] || got[1] {
		t.Fatalf("breaker changes %v, want [true false]", got)
	}
}

// TestOneProbe: when the probe is due and many callers arrive together, exactly one calls Redis;
// the others decide by policy meanwhile, without waiting for it.
func TestOneProbe(t *testing.T) {
	const openFor = 100 * time.Millisecond
	r := newRig(t, Options{Timeout: wait, Failures: 1, OpenFor: openFor}, redisstore.Options{})
	g := must(algos.NewGCRA(1, algos.Hour, 100))
	ctx := context.Background()
	r.srv.Stop()
	r.decide(ctx, "k", g, nil, algos.Request{Cost: 1}, rules.FailClosed)
	if !r.s.Open() {
		t.Fatal("breaker closed after a failure with Failures 1")
	}
	r.srv.Restart()
	time.Sleep(openFor) // the probe is due

	gate := make(chan struct{})
	r.sent.entered = make(chan struct{}, 100)
	r.sent.gate.Store(&gate)
	before := r.sent.n.Load()
	const callers = 16
	results := make(chan *rules.Op, callers)
	for range callers {
		go func() { results <- r.decide(ctx, "k", g, nil, algos.Request{Cost: 1}, rules.FailClosed)[0] }()
	}
	for i := range callers - 1 {
		select {
		case op := <-results:
			if op.Err != ErrOpen || op.Dec.Allowed {
				t.Errorf("caller %d beside the probe: %+v, err %v; want denied with ErrOpen", i, op.Dec, op.Err)
			}
		case <-time.After(wait):
			t.Fatalf("only %d callers returned while the probe was held", i)
		}
	}
	select {
	case <-r.sent.entered:
	case <-time.After(wait):
		t.Fatal("no probe reached Redis")
	}
	if n := r.sent.n.Load() - before; n != 1 {
		t.Fatalf("%d round trips while the probe was held, want 1", n)
	}
	r.sent.gate.Store(nil)
	close(gate)
	var probe *rules.Op
	select {
	case probe = <-results:
	case <-time.After(wait):
		t.Fatal("the probe did not return once released")
	}
	if probe.Err == nil && r.s.Open() {
		t.Fatal("the probe succeeded and the breaker is still open")
	}
	for deadline := time.Now().Add(wait); r.s.Open(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("breaker still open %v after Redis came back", wait)
		}
		r.decide(ctx, "k", g, nil, algos.Request{Cost: 1}, rules.FailClosed)
	}
}

// TestConcurrentOutage: callers keep deciding while Redis goes down and comes back; every op
// gets its policy's decision or Redis's, and the breaker opens and closes by itself.
func TestConcurrentOutage(t *testing.T) {
	r := newRig(t, Options{Timeout: time.Second, Failures: 3, OpenFor: 50 * time.Millisecond}, redisstore.Options{})
	g := must(algos.NewGCRA(1, algos.Minute, 1_000_000))
	fb := must(algos.NewGCRA(1, algos.Minute, 1_000_000))
	var stop atomic.Bool
	var wg sync.WaitGroup
	var decided, failed atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				ops := r.decide(context.Background(), fmt.Sprintf("w%d", w), g, fb, algos.Request{Cost: 1, DryRun: i%2 == 0},
					rules.FailOpen, rules.FailClosed, rules.FailLocal)
				for _, op := range ops {
					if op.Err == nil {
						decided.Add(1)
						if !op.Dec.Allowed {
							t.Errorf("Redis denied %s: %+v", op.Key, op.Dec)
						}
						continue
					}
					failed.Add(1)
					if want := op.OnError != rules.FailClosed; op.Dec.Allowed != want {
						t.Errorf("%v with err %v: %+v", op.OnError, op.Err, op.Dec)
					}
				}
			}
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(wait); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("%s: not within %v", what, wait)
			}
		}
	}
	waitFor("decisions from Redis", func() bool { return decided.Load() > 100 })
	r.srv.Stop()
	waitFor("breaker open", r.s.Open)
	waitFor("policy decisions", func() bool { return failed.Load() > 100 })
	r.srv.Restart()
	waitFor("breaker closed", func() bool { return !r.s.Open() })
	stop.Store(true)
	wg.Wait()
	got := r.changes()
	if len(got) < 2 || !got[0] || got[len(got)-1] {
		t.Fatalf("breaker changes %v: want open first, closed last", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("breaker changes %v: not alternating", got)
		}
	}
}

// TestCallerGone: a caller's context done before or during the round trip is not a Redis
// failure: the ops get its error and the breaker does not move.
func TestCallerGone(t *testing.T) {
	g := must(algos.NewGCRA(10, algos.Second, 10))

	t.Run("before", func(t *testing.T) {
		r := newRig(t, Options{Failures: 1}, redisstore.Options{})
		r.srv.Stop()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ops := r.decide(ctx, "k", g, nil, algos.Request{Cost: 1}, rules.FailOpen, rules.FailLocal)
		for _, op := range ops {
			if op.Err != context.Canceled {
				t.Errorf("%v: err %v, want context.Canceled", op.OnError, op.Err)
			}
		}
		if r.s.Open() || r.sent.n.Load() != 0 {
			t.Fatalf("open %v after %d round trips, want closed and none", r.s.Open(), r.sent.n.Load())
		}
	})

	t.Run("during", func(t *testing.T) {
		r := newRig(t, Options{Timeout: time.Minute, Failures: 1}, redisstore.Options{})
		r.srv.Pause()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		ops := r.decide(ctx, "k", g, nil, algos.Request{Cost: 1}, rules.FailOpen)
		r.srv.Resume()
		if ops[0].Err != context.DeadlineExceeded {
			t.Fatalf("err %v, want the caller's context.DeadlineExceeded", ops[0].Err)
		}
		if r.s.Open() || len(r.changes()) != 0 {
			t.Fatal("the caller's deadline moved the breaker")
		}
		ops = r.decide(context.Background(), "k", g, nil, algos.Request{Cost: 1}, rules.FailOpen)
		if ops[0].Err != nil {
			t.Fatalf("after resume: %v", ops[0].Err)
		}
	})

	t.Run("probe", func(t *testing.T) {
		const openFor = 100 * time.Millisecond
		r := newRig(t, Options{Timeout: time.Minute, Failures: 1, OpenFor: openFor}, redisstore.Options{})
		r.srv.Stop()
		r.decide(context.Background(), "k", g, nil, algos.Request{Cost: 1}, rules.FailOpen)
		if !r.s.Open() {
			t.Fatal("breaker closed after a failure with Failures 1")
		}
		r.srv.Restart()
		r.srv.Pause()
		time.Sleep(openFor) // the probe is due
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		before := r.sent.n.Load()
		ops := r.decide(ctx, "k", g, nil, algos.Request{Cost: 1}, rules.FailOpen)
		r.srv.Resume()
		if ops[0].Err != context.DeadlineExceeded || r.sent.n.Load() == before {
			t.Fatalf("probe: err %v after %d round trips, want the caller's deadline after one", ops[0].Err, r.sent.n.Load()-before)
		}
		if !r.s.Open() {
			t.Fatal("a probe cut short by its caller closed the breaker")
		}
		// The probe's turn was given back: the next caller probes at once, no new OpenFor.
		before = r.sent.n.Load()
		r.decide(context.Background(), "k", g, nil, algos.Request{Cost: 1}, rules.FailOpen)
		if r.sent.n.Load() == before {
			t.Fatal("the next caller did not probe")
		}
	})
}

// TestStarvedProcess: a healthy Redis behind a process starved of CPU times calls out; those
// timeouts are the process's own, so they get the fail policy's decision but do not open the
// breaker. Without the starvation check, two of them in a row opened it. The process runs in a
// child with one P and no asynchronous preemption, so that busy goroutines hold the CPU for
// 10 ms at a time whatever else runs on the machine, and each call yields to them first.
//
// The runtime records the scheduling wait of one in gTrackingPeriod (8) of a goroutine's
// switches out of running, so a timeout alone may find none recorded in its window. Before each
// call the test yields until the runtime has recorded a wait of at least the timeout since the
// store's newer snapshot (recordedSince): a snapshot renewed by that call then still leaves it
// inside the window the call asserts on. A wait that is never recorded fails the test as a
// process that did not starve.
func TestStarvedProcess(t *testing.T) {
	if os.Getenv("DIANA_STARVED_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStarvedProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DIANA_STARVED_CHILD=1", "GODEBUG=asyncpreemptoff=1", "GOMAXPROCS=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("starved child: %v\n%s", err, out)
		}
		return
	}
	const timeout = 2 * time.Millisecond
	var starved atomic.Int64
	r := newRig(t, Options{Timeout: timeout, Failures: 2, OpenFor: time.Minute,
		OnStarved: func(time.Duration) { starved.Add(1) }}, redisstore.Options{})
	g := must(algos.NewGCRA(1000, algos.Second, 1000))
	// Connect and load the script first, through redisstore: a 2ms timeout is short for a
	// first call under -race.
	if _, err := r.redis.DecideOne(context.Background(), "warm", g, algos.Request{Cost: 1}); err != nil {
		t.Fatalf("healthy Redis: %v", err)
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				busy(10 * time.Millisecond)
				runtime.Gosched()
			}
		}()
	}
	// Each round trip gives its turn to the spinners before it is sent, and comes back to the
	// CPU past its deadline: the timeout is the process's doing, not Redis's.
	r.sent.yield.Store(true)
	timeouts := 0
	for deadline := time.Now().Add(wait); timeouts < 5 && !r.s.Open() && time.Now().Before(deadline); {
		for !r.s.st.recordedSince(timeout) {
			if time.Now().After(deadline) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("no scheduling wait of %v recorded in %v: the test did not starve the process", timeout, wait)
			}
			runtime.Gosched()
		}
		ops := r.decide(context.Background(), "k", g, nil, algos.Request{Cost: 1}, rules.FailOpen)
		if isTimeout(ops[0].Err) {
			timeouts++
			if !ops[0].Dec.Allowed {
				t.Fatalf("timed-out call: %+v, want the fail policy's (open) decision", ops[0].Dec)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	if r.s.Open() || len(r.changes()) != 0 {
		t.Fatalf("breaker opened (changes %v) on %d timeouts of a starved process", r.changes(), timeouts)
	}
	if timeouts < 5 {
		t.Fatalf("%d timeouts under load, want 5: the test did not starve the process", timeouts)
	}
	if starved.Load() < int64(timeouts) {
		t.Errorf("OnStarved told of %d timeouts, want %d", starved.Load(), timeouts)
	}
}

// busy holds the CPU for about d, with no function call the runtime could preempt it at (the
// test's child runs without asynchronous preemption).
func busy(d time.Duration) {
	n := spinsPer(d)
	x := 0
	for i := 0; i < n; i++ {
		x += i
	}
	sink.Store(int64(x))
}

var sink atomic.Int64

// spinsPer measures once how many loop turns take about d (the d of its first call).
func spinsPer(d time.Duration) int {
	spinsOnce.Do(func() {
		const n = 10_000_000
		start := time.Now()
		x := 0
		for i := 0; i < n; i++ {
			x += i
		}
		sink.Store(int64(x))
		spins = int(int64(n) * int64(d) / int64(max(time.Since(start), 1)))
	})
	return spins
}

var (
	spinsOnce sync.Once
	spins     int
)

// With Redis refusing connections, each op's error says so, as the start-up check does: go-redis
// retries a refused dial until the round trip's deadline, and the deadline alone ("context
// deadline exceeded") would hide why (issue 25, item 9).
func TestRefusedSaysRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	srv.Stop() // its port now refuses connections
	s := New(redisstore.New(c, redisstore.Options{}), Options{Failures: 3})
	g := must(algos.NewGCRA(10, algos.Second, 1))
	for i := range 3 { // until the breaker opens
		ops := []*rules.Op{
			{Key: "a", Alg: g, Req: algos.Request{Cost: 1}, OnError: rules.FailOpen},
			{Key: "b", Alg: g, Req: algos.Request{Cost: 1}, OnError: rules.FailClosed},
		}
		s.Decide(context.Background(), ops)
		for _, op := range ops {
			if op.Err == nil || !strings.Contains(op.Err.Error(), "connection refused") {
				t.Fatalf("round trip %d, %v: err %v, want one that says connection refused", i, op.OnError, op.Err)
			}
			if !errors.Is(op.Err, context.DeadlineExceeded) {
				t.Fatalf("round trip %d, %v: err %v no longer says the deadline ended the round trip", i, op.OnError, op.Err)
			}
		}
	}
	if !s.Open() {
		t.Fatal("three refused round trips did not open the breaker")
	}
}
