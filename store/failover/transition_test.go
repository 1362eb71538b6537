package failover

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

var errDown = errors.New("test: Redis unreachable")

// redisError is an error reply of Redis (redis.Error): Redis answered.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// switchable is Redis (a real redis-server, on the caller's clock) behind a switch: while down,
// every call fails without being sent. failKey, if set, makes the write-back of that key fail
// while Redis is up.
type switchable struct {
	r       *redisstore.Store
	down    atomic.Bool
	failKey string
	wrote   atomic.Int64 // write-back calls sent
}

func (s *switchable) Decide(ctx context.Context, ops []*rules.Op) {
	if s.down.Load() {
		for _, op := range ops {
			op.Err = errDown
		}
		return
	}
	s.r.Decide(ctx, ops)
}

func (s *switchable) WriteBack(ctx context.Context, backs []redisstore.Back) {
	if s.down.Load() {
		for _, b := range backs {
			b.Op.Err = errDown
		}
		return
	}
	s.wrote.Add(1)
	var send []redisstore.Back
	for _, b := range backs {
		if b.Op.Key == s.failKey {
			b.Op.Err = redisError("ERR test: this key's write-back fails")
			continue
		}
		send = append(send, b)
	}
	s.r.WriteBack(ctx, send)
}

// transitionRig is one node (a failover Store with on_error local) on a virtual clock.
type transitionRig struct {
	t      *testing.T
	now    int64
	redis  *switchable
	s      *Store
	gaveUp []string
	mu     sync.Mutex
}

func newTransitionRig(t *testing.T, writeBack bool) *transitionRig {
	srv := redistest.Start(t)
	r := &transitionRig{t: t, now: 1_700_000_000_000_000, redis: &switchable{r: redisstore.New(srv.Client(), redisstore.Options{CallerClock: true})}}
	clock := func() int64 { return r.now }
	o := Options{Timeout: wait, Failures: 1 << 30, Local: memstore.New(memstore.Options{Clock: clock}), Clock: clock,
		OnWriteBack: func(key string, units int64, err error) {
			r.mu.Lock()
			r.gaveUp = append(r.gaveUp, key)
			r.mu.Unlock()
		}}
	if writeBack {
		o.WriteBack = r.redis.WriteBack
	}
	r.s = New(r.redis, o)
	return r
}

// admit decides n requests of key at one per step µs and returns how many were admitted.
func (r *transitionRig) admit(key string, alg algos.Algorithm, n int, step int64) int {
	r.t.Helper()
	admitted := 0
	for range n {
		op := &rules.Op{Key: key, Alg: alg, Req: algos.Request{Now: r.now, Cost: 1}, OnError: rules.FailLocal, Fallback: alg}
		r.s.Decide(context.Background(), []*rules.Op{op})
		if op.Err != nil && !errors.Is(op.Err, errDown) {
			r.t.Fatalf("%s: %v", key, op.Err)
		}
		if op.Dec.Allowed {
			admitted++
		}
		r.now += step
	}
	return admitted
}

// The limit holds across an outage as a whole: a node that falls back starts from what Redis
// said last (3 of 10 left: it admits 3, not 10), and when Redis returns it writes back what it
// admitted alone before it decides there again (Redis then knows the window is full).
func TestTransitionsFixedWindow(t *testing.T) {
	for _, writeBack := range []bool{true, false} {
		name := "with write-back"
		if !writeBack {
			name = "without write-back"
		}
		t.Run(name, func(t *testing.T) {
			r := newTransitionRig(t, writeBack)
			fw := must(algos.NewFixedWindow(10, algos.Hour))
			r.now = r.now / algos.Hour * algos.Hour // the window's start
			if got := r.admit("k", fw, 7, algos.Second); got != 7 {
				t.Fatalf("Redis up: %d of 7 admitted", got)
			}
			r.redis.down.Store(true)
			if got := r.admit("k", fw, 10, algos.Second); got != 3 {
				t.Fatalf("Redis down: %d of 10 admitted, want the 3 Redis had left", got)
			}
			r.redis.down.Store(false)
			got := r.admit("k", fw, 5, algos.Second)
			switch {
			case writeBack && got != 0:
				t.Fatalf("Redis back: %d of 5 admitted, want 0: the 3 admitted alone were written back", got)
			case !writeBack && got != 3:
				t.Fatalf("Redis back, no write-back: %d of 5 admitted, want 3 (Redis never heard of the outage's)", got)
			}
			if writeBack && r.redis.wrote.Load() != 1 {
				t.Fatalf("%d write-back calls, want 1", r.redis.wrote.Load())
			}
		})
	}
}

// A second outage of the same key starts again from Redis, not from what the first left in
// the local store.
func TestTransitionsTwoOutages(t *testing.T) {
	r := newTransitionRig(t, true)
	tb := must(algos.NewGCRA(10, algos.Hour, 10)) // 10 an hour, a bucket of 10
	for i, want := range []struct{ up, down int }{{4, 6}, {0, 0}} {
		if got := r.admit("k", tb, 4, algos.Second); got != want.up {
			t.Fatalf("round %d, Redis up: %d of 4 admitted, want %d", i, got, want.up)
		}
		r.redis.down.Store(true)
		if got := r.admit("k", tb, 10, algos.Second); got != want.down {
			t.Fatalf("round %d, Redis down: %d of 10 admitted, want %d", i, got, want.down)
		}
		r.redis.down.Store(false)
	}
}

// A sliding log's seed is spread over its window: Redis's 10 requests of the last minute leave
// the log one by one, so the node admits again well before a minute has passed, and not at
// once.
func TestTransitionsSlidingSeed(t *testing.T) {
	r := newTransitionRig(t, true)
	sl := must(algos.NewSlidingLog(10, algos.Minute))
	if got := r.admit("k", sl, 10, 6*algos.Second); got != 10 {
		t.Fatalf("Redis up: %d of 10 admitted", got)
	}
	r.redis.down.Store(true)
	if got := r.admit("k", sl, 1, 0); got != 0 {
		t.Fatalf("at once: %d admitted, want 0: the log is full", got)
	}
	r.now += algos.Minute/seedParts + algos.Second
	if got := r.admit("k", sl, 3, 0); got != 1 {
		t.Fatalf("an eighth of a window later: %d of 3 admitted, want 1: a part of the seed left the log", got)
	}
}

// A key whose write-back Redis keeps refusing, while it takes the others', is given up after
// writeBackTries round trips and reported; the others' units are written back once.
func TestTransitionsGiveUp(t *testing.T) {
	r := newTransitionRig(t, true)
	fw := must(algos.NewFixedWindow(10, algos.Hour))
	r.now = r.now / algos.Hour * algos.Hour
	r.redis.failKey = "b"
	r.redis.down.Store(true)
	r.admit("a", fw, 2, algos.Second)
	r.admit("b", fw, 2, algos.Second)
	r.redis.down.Store(false)
	for i := range writeBackTries {
		if got := r.admit("c", fw, 1, algos.Second); got != 1 {
			t.Fatalf("round trip %d: c not admitted", i)
		}
	}
	if len(r.gaveUp) != 1 || r.gaveUp[0] != "b" {
		t.Fatalf("gave up %v, want [b]", r.gaveUp)
	}
	if n := r.s.tr.owing.Load(); n != 0 {
		t.Fatalf("%d keys still owe units", n)
	}
	if got := r.admit("a", fw, 10, algos.Second); got != 8 {
		t.Fatalf("a after the outage: %d of 10 admitted, want 8 (its 2 written back once)", got)
	}
}

// A warm-up limiter is not carried across an outage: its Remaining (may a request go now) does
// not tell its state, so it starts the outage from its local state, as before, and owes nothing.
func TestTransitionsLeaveWarmUpAlone(t *testing.T) {
	r := newTransitionRig(t, true)
	wu := must(algos.NewWarmUp(10, algos.Second, algos.Second))
	r.admit("k", wu, 1, 0) // Redis: Remaining 0 after it
	r.redis.down.Store(true)
	if got := r.admit("k", wu, 1, 0); got != 1 {
		t.Fatalf("Redis down: %d of 1 admitted, want the local limiter's first", got)
	}
	if n := r.s.tr.owing.Load(); n != 0 {
		t.Fatalf("%d keys owe units", n)
	}
}

// A sliding log's units go back to Redis at the times they were admitted (to an eighth of the
// window), not at the write-back's: they leave Redis's log when they would have.
func TestTransitionsSlidingWriteBack(t *testing.T) {
	r := newTransitionRig(t, true)
	sl := must(algos.NewSlidingLog(10, algos.Minute))
	r.admit("k", sl, 1, algos.Second) // Redis learns the key
	r.redis.down.Store(true)
	admittedAt := r.now
	if got := r.admit("k", sl, 3, 0); got != 3 {
		t.Fatalf("Redis down: %d of 3 admitted", got)
	}
	r.now += 30 * algos.Second
	r.redis.down.Store(false)
	r.admit("other", sl, 1, 0) // the write-back goes first
	st, err := r.redis.r.State(context.Background(), "k", sl)
	if err != nil {
		t.Fatal(err)
	}
	span := algos.Minute / seedParts
	if len(st.Log) != 4 {
		t.Fatalf("Redis's log %v: want the first request and the 3 written back", st.Log)
	}
	for _, at := range st.Log[1:] {
		if at < admittedAt-span || at > admittedAt+span {
			t.Fatalf("Redis's log %v: the units written back are not near %d, when they were admitted", st.Log, admittedAt)
		}
	}
}
