package algos

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
)

// lstep is one request of a leaky-bucket golden vector and the decision expected.
type lstep struct {
	at, cost  int64
	allowed   bool
	delay     int64
	remaining int64
	reset     int64
	retry     int64
}

// lreplay runs steps against st and compares Allowed, Delay, Remaining, ResetAfter, RetryAfter,
// Granted, TTL and Limit.
func lreplay(t *testing.T, l *LeakyBucket, st *State, steps []lstep) {
	t.Helper()
	for i, s := range steps {
		r := Request{Now: s.at, Cost: s.cost}
		d := l.Decide(st, r)
		record(t, l, st, r, d)
		want := Decision{Allowed: s.allowed, Limit: l.burst + 1, Remaining: s.remaining,
			ResetAfter: s.reset, RetryAfter: s.retry, Delay: s.delay, TTL: s.reset}
		if s.allowed {
			want.Granted = s.cost
		}
		if d != want {
			t.Errorf("step %d (t=%d, cost %d):\n got  %+v\n want %+v", i, s.at, s.cost, d, want)
		}
	}
}

func mustLeaky(t *testing.T, rate, period, burst, delay int64) *LeakyBucket {
	t.Helper()
	l, err := NewLeakyBucket(rate, period, burst, delay)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLeakyBucketNginx: limit_req rate=1r/s burst=5, seven requests at once. The first is on
// time (a fresh key stores excess 0), the next five are the burst, the seventh is rejected. The
// delays follow ngx_http_limit_req_account: (excess − delay)/rate when excess > delay.
func TestLeakyBucketNginx(t *testing.T) {
	s := Second
	for _, c := range []struct {
		name   string
		delay  int64
		delays [6]int64
	}{
		{"default (delay all)", DelayAll, [6]int64{0, 1 * s, 2 * s, 3 * s, 4 * s, 5 * s}},
		{"nodelay", NoDelay, [6]int64{}},
		{"delay=5 is nodelay", 5, [6]int64{}},
		// The on-time request and 2 excess ones pass at once; nginx's guide counts only the
		// excess ones ("the first 8" for delay=8), but its code passes delay+1.
		{"delay=2", 2, [6]int64{0, 0, 0, 1 * s, 2 * s, 3 * s}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := mustLeaky(t, 1, Second, 5, c.delay)
			var steps []lstep
			for i := range int64(6) {
				steps = append(steps, lstep{0, 1, true, c.delays[i], 4 - i + 1, (i + 1) * s, 0})
			}
			steps = append(steps, lstep{0, 1, false, 0, 0, 6 * s, 1 * s})
			var st State
			lreplay(t, l, &st, steps)
		})
	}
}

// TestLeakyBucketDrain continues the default nginx example: the queue drains at 1 r/s, and a
// request joins its end.
func TestLeakyBucketDrain(t *testing.T) {
	l := mustLeaky(t, 1, Second, 5, DelayAll)
	s, ms := Second, Millisecond
	var st State
	lreplay(t, l, &st, []lstep{
		{0, 1, true, 0, 5, 1 * s, 0},
		{0, 5, true, 5 * s, 0, 6 * s, 0}, // five at once: the last of them waits 5 s
		{0, 1, false, 0, 0, 6 * s, 1 * s},
		{1 * s, 1, true, 5 * s, 0, 6 * s, 0}, // one slot leaked; the request waits behind 5
		{2500 * ms, 1, true, 4500 * ms, 0, 5500 * ms, 0},
		{2500 * ms, 1, false, 0, 0, 5500 * ms, 500 * ms},
		{2500 * ms, 0, true, 0, 0, 5500 * ms, 0}, // a peek takes nothing and waits for nothing
		{3 * s, 1, true, 5 * s, 0, 6 * s, 0},
		{8 * s, 1, true, 1 * s, 4, 2 * s, 0}, // excess 5 − 5 + 1: one ahead in the queue
		{8 * s, 1, true, 2 * s, 3, 3 * s, 0},
		{20 * s, 1, true, 0, 5, 1 * s, 0}, // as fresh
	})
}

// TestLeakyBucketTenPerSecond: rate=10r/s burst=5, seven requests in one millisecond.
func TestLeakyBucketTenPerSecond(t *testing.T) {
	ms := Millisecond
	for _, c := range []struct {
		delay  int64
		delays [6]int64
	}{
		{DelayAll, [6]int64{0, 100 * ms, 200 * ms, 300 * ms, 400 * ms, 500 * ms}},
		{2, [6]int64{0, 0, 0, 100 * ms, 200 * ms, 300 * ms}},
		{NoDelay, [6]int64{}},
	} {
		l := mustLeaky(t, 10, Second, 5, c.delay)
		var st State
		for i := range 6 {
			d := l.Decide(&st, Request{Now: int64(i), Cost: 1})
			// Requests 1 µs apart: the delay shrinks by the µs that passed.
			want := max(0, c.delays[i]-int64(i))
			if !d.Allowed || d.Delay != want {
				t.Errorf("delay %d, request %d: %+v, want delay %d", c.delay, i, d, want)
			}
		}
		if d := l.Decide(&st, Request{Now: 6, Cost: 1}); d.Allowed || d.RetryAfter != 100*ms-6 {
			t.Errorf("delay %d, request 7: %+v, want a rejection for 99.994 ms", c.delay, d)
		}
	}
}

// TestLeakyBucketNginxGuide: nginx's rate-limiting guide, rate=5r/s burst=12 delay=8, 25 requests
// at once: 9 pass at once, 4 wait 200, 400, 600, 800 ms, 12 are rejected.
func TestLeakyBucketNginxGuide(t *testing.T) {
	l := mustLeaky(t, 5, Second, 12, 8)
	var st State
	var delays []int64
	rejected := 0
	for range 25 {
		d := l.Decide(&st, Request{Now: 0, Cost: 1})
		if d.Allowed {
			delays = append(delays, d.Delay)
		} else {
			rejected++
		}
	}
	ms := Millisecond
	want := []int64{0, 0, 0, 0, 0, 0, 0, 0, 0, 200 * ms, 400 * ms, 600 * ms, 800 * ms}
	if len(delays) != len(want) || rejected != 12 {
		t.Fatalf("passed with delays %v, rejected %d; want %v and 12", delays, rejected, want)
	}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("delays %v, want %v", delays, want)
		}
	}
}

// TestLeakyBucketRejectMode: burst 0 admits one request per 1/rate and rejects the rest.
func TestLeakyBucketRejectMode(t *testing.T) {
	l := mustLeaky(t, 1, Second, 0, DelayAll)
	s, ms := Second, Millisecond
	var st State
	lreplay(t, l, &st, []lstep{
		{0, 1, true, 0, 0, 1 * s, 0},
		{500 * ms, 1, false, 0, 0, 500 * ms, 500 * ms},
		{1 * s, 1, true, 0, 0, 1 * s, 0},
		{2*s - 1, 1, false, 0, 0, 1, 1},
		{2 * s, 2, false, 0, 1, 0, Never}, // more than the bucket
		{2 * s, 1, true, 0, 0, 1 * s, 0},
	})
}

// TestLeakyBucketHighFrequency: leakage is never truncated. nginx subtracts rate·ms/1000 on each
// call, so admitted requests that come often lose leakage; here requests every 500 µs at 1 r/s
// are admitted exactly once a second, and 3 r/s is exactly 3 r/s.
func TestLeakyBucketHighFrequency(t *testing.T) {
	l := mustLeaky(t, 1, Second, 0, DelayAll)
	var st State
	var at []int64
	for now := int64(0); now < 100*Second; now += 500 {
		if l.Decide(&st, Request{Now: now, Cost: 1}).Allowed {
			at = append(at, now)
		}
	}
	if len(at) != 100 {
		t.Fatalf("admitted %d in 100 s, want 100", len(at))
	}
	for i, a := range at {
		if a != int64(i)*Second {
			t.Fatalf("admission %d at %d µs, want %d", i, a, int64(i)*Second)
		}
	}

	// 3 r/s, burst 10, a request every 500 µs for 1,000 s: request k (from 0) is admitted from
	// (k − 10)/3 s, so 11 + ⌊3·999.9995⌋ = 3,010 are (1/3 s rounded down to 333,333 µs: 3,011).
	// The delays keep the forwarded ones 1/3 s apart: request k is forwarded at k/3 s.
	l = mustLeaky(t, 3, Second, 10, DelayAll)
	st = State{}
	admitted := int64(0)
	for now := int64(0); now < 1000*Second; now += 500 {
		d := l.Decide(&st, Request{Now: now, Cost: 1})
		if !d.Allowed {
			continue
		}
		if fwd := now + d.Delay; fwd != ceilDiv(admitted*Second, 3) {
			t.Fatalf("request %d forwarded at %d µs, want %d", admitted, fwd, ceilDiv(admitted*Second, 3))
		}
		admitted++
	}
	if admitted != 3010 {
		t.Fatalf("admitted %d, want 3010", admitted)
	}
}

// TestLeakyBucketNginxModel compares random traces (forward clock) with nginx's rule computed in
// exact rationals: e' = max(0, e − rate·elapsed/period + 1) per unit of cost, reject if e' >
// burst, delay ⌈(e' − delay)·period/rate⌉, Remaining ⌊burst − e'⌋.
func TestLeakyBucketNginxModel(t *testing.T) {
	for ci, c := range []struct{ rate, period, burst, delay, gap int64 }{
		{1, Second, 5, DelayAll, 2 * Second},
		{3, Second, 10, 4, 600 * Millisecond},
		{7, Day, 2, NoDelay, 6 * Hour},
		{1000, Second, 50, 10, 1500},
		{333, 1000, 0, 0, 20},
	} {
		l := mustLeaky(t, c.rate, c.period, c.burst, c.delay)
		rng := rand.New(rand.NewPCG(uint64(ci), 7))
		var st State
		e, last, fresh := new(big.Rat), int64(0), true
		now := int64(1_000_000_000)
		var rejected, delayed int
		for i := range 20_000 {
			now += rng.Int64N(c.gap + 1)
			n := int64(1)
			if rng.IntN(5) == 0 {
				n = rng.Int64N(4)
			}
			d := l.Decide(&st, Request{Now: now, Cost: n})

			// nginx, in rationals; a cost n is n requests at the same time.
			x := new(big.Rat).Set(e)
			if !fresh {
				x.Sub(x, big.NewRat(c.rate*(now-last), c.period))
			}
			if fresh {
				x.SetInt64(-1) // a fresh key stores excess 0 for its first request
			}
			for k := int64(0); k < n; k++ {
				x.Add(x, big.NewRat(1, 1))
				if x.Sign() < 0 {
					x.SetInt64(0)
				}
			}
			if n == 0 && x.Sign() < 0 {
				x.SetInt64(0)
			}
			allowed := x.Cmp(big.NewRat(c.burst, 1)) <= 0
			if n == 0 {
				allowed = true
			}
			if d.Allowed != allowed {
				t.Fatalf("case %d step %d (n=%d): allowed %v, nginx %v (excess %s)", ci, i, n, d.Allowed, allowed, x.FloatString(6))
			}
			if !allowed {
				rejected++
			}
			if !allowed || n == 0 {
				continue
			}
			var delay int64
			over := new(big.Rat).Sub(x, big.NewRat(min(c.delay, c.burst), 1))
			if over.Sign() > 0 {
				over.Mul(over, big.NewRat(c.period, c.rate))
				delay = ceilRat(over)
			}
			rem := new(big.Rat).Sub(big.NewRat(c.burst, 1), x)
			if d.Delay != delay || d.Remaining != floorRat(rem) {
				t.Fatalf("case %d step %d: %+v, nginx delay %d remaining %d (excess %s)", ci, i, d, delay, floorRat(rem), x.FloatString(6))
			}
			if delay > 0 {
				delayed++
			}
			e, last, fresh = x, now, false
		}
		// The traces must reach both the queue and the rejections.
		if rejected < 100 || (c.delay < c.burst && delayed < 100) {
			t.Errorf("case %d: only %d rejected and %d delayed", ci, rejected, delayed)
		}
	}
}

func floorRat(r *big.Rat) int64 {
	q := new(big.Int)
	q.Div(r.Num(), r.Denom()) // Euclidean: the floor, as the denominator is positive
	return q.Int64()
}

func ceilRat(r *big.Rat) int64 {
	return -floorRat(new(big.Rat).Neg(r))
}

func TestLeakyBucketCostAboveCapacity(t *testing.T) {
	l := mustLeaky(t, 1, Second, 5, DelayAll)
	var st State
	if d := l.Decide(&st, Request{Now: 0, Cost: 7}); d.Allowed || d.RetryAfter != Never || d.Remaining != 6 {
		t.Fatalf("cost 7 > burst + 1: %+v", d)
	}
	// Cost 6 fills the bucket at once: six requests together, the last delayed 5 s.
	if d := l.Decide(&st, Request{Now: 0, Cost: 6}); !d.Allowed || d.Delay != 5*Second || d.Remaining != 0 {
		t.Fatalf("cost 6: %+v", d)
	}
	if d := l.Decide(&st, Request{Now: 0, Cost: 1 << 62}); d.Allowed || d.RetryAfter != Never {
		t.Fatalf("cost 2^62: %+v", d)
	}
	if st.W != [4]int64{6 * Second, 0} {
		t.Fatalf("state %v", st.W)
	}
}

func TestLeakyBucketPeek(t *testing.T) {
	l := mustLeaky(t, 2, Second, 3, DelayAll)
	var st State
	l.Decide(&st, Request{Now: 0, Cost: 3})
	before := st
	d := l.Decide(&st, Request{Now: 100 * Millisecond, Cost: 0})
	want := Decision{Allowed: true, Limit: 4, Remaining: 1, ResetAfter: 1400 * Millisecond, TTL: 1400 * Millisecond}
	if d != want || st.W != before.W {
		t.Fatalf("peek: %+v (state %v), want %+v and no change", d, st.W, want)
	}
}

func TestLeakyBucketPartial(t *testing.T) {
	l := mustLeaky(t, 10, Second, 9, 4)
	var st State
	ms := Millisecond
	for i, c := range []struct {
		at, cost, granted, delay, retry int64
	}{
		{0, 4, 4, 0, 0},
		{0, 10, 6, 500 * ms, 0},       // 6 left; the last of them is 5 beyond delay
		{0, 3, 0, 0, 100 * ms},        // none left: one unit in 0.1 s
		{250 * ms, 5, 2, 450 * ms, 0}, // 2.5 leaked: excess 9.5
		{300 * ms, 1, 1, 500 * ms, 0},
		{300 * ms, 1, 0, 0, 100 * ms},
	} {
		d := l.Decide(&st, Request{Now: c.at, Cost: c.cost, Partial: true})
		if d.Granted != c.granted || d.Allowed != (c.granted > 0) || d.Delay != c.delay || d.RetryAfter != c.retry {
			t.Errorf("request %d: got %+v, want granted %d delay %d retry %d", i, d, c.granted, c.delay, c.retry)
		}
	}
}

// TestLeakyBucketMaxWait: MaxWait changes nothing; the burst is the queue.
func TestLeakyBucketMaxWait(t *testing.T) {
	l := mustLeaky(t, 1, Second, 2, DelayAll)
	var a, b State
	for i := range 5 {
		d0 := l.Decide(&a, Request{Now: 0, Cost: 1})
		d1 := l.Decide(&b, Request{Now: 0, Cost: 1, MaxWait: Hour})
		if d0 != d1 {
			t.Fatalf("request %d: %+v without MaxWait, %+v with", i, d0, d1)
		}
	}
}

// TestLeakyBucketBackwardsClock: a clock that goes back never adds capacity, however far back.
func TestLeakyBucketBackwardsClock(t *testing.T) {
	l := mustLeaky(t, 1, Second, 2, DelayAll)
	var st State
	now := 1_700_000_000 * Second
	for range 3 {
		if !l.Decide(&st, Request{Now: now, Cost: 1}).Allowed {
			t.Fatal("a fresh bucket refused")
		}
	}
	for _, back := range []int64{1, Second, Hour, 10 * Day, now} {
		d := l.Decide(&st, Request{Now: now - back, Cost: 1})
		want := back + Second
		if d.Allowed || d.RetryAfter != want || d.ResetAfter != back+3*Second {
			t.Fatalf("clock back %d µs: %+v, want a rejection for %d µs", back, d, want)
		}
		if d := l.Decide(&st, Request{Now: now - back, Cost: 2, Partial: true}); d.Allowed || d.RetryAfter != want {
			t.Fatalf("clock back %d µs, partial: %+v", back, d)
		}
		if d := l.Decide(&st, Request{Now: now - back, Cost: 4}); d.Allowed || d.RetryAfter != Never {
			t.Fatalf("clock back %d µs, cost 4: %+v", back, d)
		}
	}
	// Admitted after going back a little, the request queues behind the others.
	if d := l.Decide(&st, Request{Now: now + Second - 1, Cost: 1}); d.Allowed {
		t.Fatalf("admitted early: %+v", d)
	}
	d := l.Decide(&st, Request{Now: now + Second, Cost: 1})
	if !d.Allowed || d.Delay != 2*Second {
		t.Fatalf("after one leak: %+v", d)
	}
}

func TestLeakyBucketParams(t *testing.T) {
	for _, c := range []struct {
		rate, period, burst, delay int64
		param                      string
	}{
		{0, Second, 1, 0, "rate"},
		{-1, Second, 1, 0, "rate"},
		{1, 0, 1, 0, "period"},
		{1, Second, -1, 0, "burst"},
		{1, Second, 1, -1, "delay"},
		{1, Second, MaxCount, 0, "burst"},
		{1, Second, 1000 * Year / Second, 0, "burst"}, // drains in 1000 years
		{MaxCount + 1, Second, 1, 0, "rate"},
		{1, MaxSpan + 1, 0, 0, "period"},
	} {
		_, err := NewLeakyBucket(c.rate, c.period, c.burst, c.delay)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != c.param || !errors.Is(err, ErrParam) {
			t.Errorf("NewLeakyBucket(%d, %d, %d, %d) = %v, want an error about %s", c.rate, c.period, c.burst, c.delay, err, c.param)
		}
	}
	l, err := NewLeakyBucket(MaxCount, Second, MaxCount-1, NoDelay)
	if err != nil {
		t.Fatal(err)
	}
	if s := l.Script(); s.Name != "leaky_bucket" || s.Limit != MaxCount || s.Args[3] != MaxCount-1 {
		t.Fatalf("script %+v: want NoDelay clamped to the burst", s)
	}
}

func TestLeakyBucketAllocs(t *testing.T) {
	l := mustLeaky(t, 3, Second, 10, 2)
	var st State
	now := int64(0)
	if a := testing.AllocsPerRun(1000, func() {
		now += 100 * Millisecond
		l.Decide(&st, Request{Now: now, Cost: 1})
	}); a != 0 {
		t.Fatalf("%v allocations per Decide", a)
	}
}
