package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
)

// TestConcurrentCallsShareRoundTrips: 32 goroutines deciding on one key at once share round
// trips (fewer round trips than decisions), and each decision is still counted once: a bucket
// of 500 that refills once an hour admits exactly 500 of 1,600.
func TestConcurrentCallsShareRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, Options{})
	g := must(algos.NewGCRA(1, algos.Hour, 500))
	ctx := context.Background()
	if _, err := s.DecideOne(ctx, "warm", g, algos.Request{Cost: 0}); err != nil { // loads the script
		t.Fatal(err)
	}
	trips := &roundTrips{}
	c.AddHook(trips)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 50 {
				if !decideHot(t, s, g, &admitted) {
					return
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 500 {
		t.Fatalf("admitted %d of 1,600, want exactly 500", got)
	}
	if n := trips.n.Load(); n >= 1600 {
		t.Fatalf("1,600 concurrent decisions took %d round trips, want fewer", n)
	} else {
		t.Logf("1,600 decisions from 32 goroutines: %d round trips", n)
	}
}

// TestNoCallLeftQueued: callers that come and go at random moments, so that round trips end,
// gatherings yield and lone callers send in every order, each get their answer (none is left
// in a queue that no round trip will take), each decision counts once (a bucket of 700 admits
// exactly 700 of 2,400), and afterwards no round trip is counted as under way.
func TestNoCallLeftQueued(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{})
	g := must(algos.NewGCRA(1, algos.Hour, 700))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 48 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(i), 1))
			for range 50 {
				if d := rnd.IntN(400); d < 200 {
					time.Sleep(time.Duration(d) * time.Microsecond)
				} else if d < 300 {
					runtime.Gosched()
				}
				if !decideHot(t, s, g, &admitted) {
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("after a minute, calls have not returned: %d round trips under way", s.sendingNow())
	}
	if got := admitted.Load(); got != 700 {
		t.Fatalf("admitted %d of 2,400, want exactly 700", got)
	}
	if n := s.sendingNow(); n != 0 {
		t.Fatalf("%d round trips still counted as under way", n)
	}
}

// decideHot decides one unit on the key "hot", counting it in admitted if it is admitted; false
// after an error, which it reports.
func decideHot(t *testing.T, s *Store, g algos.Algorithm, admitted *atomic.Int64) bool {
	d, err := s.DecideOne(context.Background(), "hot", g, algos.Request{Cost: 1})
	if err != nil {
		t.Error(err)
		return false
	}
	if d.Allowed {
		admitted.Add(1)
	}
	return true
}

// TestQueuedCallerLeavesAtItsDeadline: while Redis does not answer, a caller queued behind the
// round trips under way gets its own deadline's error at that deadline, and once Redis is back
// decisions go on.
func TestQueuedCallerLeavesAtItsDeadline(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{})
	g := must(algos.NewGCRA(10, algos.Second, 10))
	if _, err := s.DecideOne(context.Background(), "k", g, algos.Request{Cost: 0}); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	long, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range maxSending { // they take every round trip, one each
		wg.Go(func() { s.DecideOne(long, "k", g, algos.Request{Cost: 1}) })
		for s.sendingNow() <= i {
			time.Sleep(time.Millisecond)
		}
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	start := time.Now()
	_, err := s.DecideOne(short, "k", g, algos.Request{Cost: 1})
	took := time.Since(start)
	srv.Resume()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued caller: err = %v, want its deadline", err)
	}
	if took > time.Second {
		t.Fatalf("a queued caller with a 50 ms deadline waited %v", took)
	}
	wg.Wait()
	if _, err := s.DecideOne(context.Background(), "k", g, algos.Request{Cost: 1}); err != nil {
		t.Fatalf("after Redis is back: %v", err)
	}
	if n := s.sendingNow(); n != 0 {
		t.Fatalf("%d round trips still counted as under way", n)
	}
}

// sendingNow returns the round trips under way.
func (s *Store) sendingNow() int {
	s.co.mu.Lock()
	defer s.co.mu.Unlock()
	return s.co.sending
}

// roundTrips counts what a client sends: a command or a pipeline is one round trip.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}
