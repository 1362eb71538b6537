package algos

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// adaptiveTest is the small limit the golden vectors use: P90 within 50% of the baseline,
// limit 2..100, updated every 100 ms with no smoothing, a probe of 10 samples every 10 s.
func adaptiveTest(t *testing.T, slo int64) *Adaptive {
	t.Helper()
	a, err := NewAdaptive(AdaptiveConfig{Percentile: 90, Tolerance: 50, SLO: slo, MinLimit: 2, MaxLimit: 100,
		Interval: 100 * Millisecond, Smoothing: 100, ProbeEvery: 10 * Second, ProbeSamples: 10, Backoff: 90})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// astep is one request of an adaptive golden vector: take cost slots (or release them, with the
// latency measured), and the decision expected.
type astep struct {
	at, cost  int64
	release   bool
	latency   int64
	allowed   bool
	limit     int64
	remaining int64
}

// round is n requests taken at at and released at at + latency: what a backend of that latency
// makes of n concurrent requests.
func round(at, n, latency, limit int64) []astep {
	var s []astep
	for i := range n {
		s = append(s, astep{at, 1, false, 0, true, limit, limit - i - 1})
	}
	for i := range n {
		s = append(s, astep{at + latency, 1, true, latency, true, limit, limit - n + i + 1})
	}
	return s
}

func replayAdaptive(t *testing.T, a *Adaptive, st *State, steps []astep) {
	t.Helper()
	for i, s := range steps {
		d := a.Decide(st, Request{Now: s.at, Cost: s.cost, Release: s.release, Latency: s.latency})
		if d.Allowed != s.allowed || d.Limit != s.limit || d.Remaining != s.remaining {
			t.Fatalf("astep %d (%+v): got %+v", i, s, d)
		}
	}
}

func TestAdaptiveGolden(t *testing.T) {
	a := adaptiveTest(t, 0)
	ms := Millisecond
	var st State
	var steps []astep
	// A fresh state probes at min_limit 2 until 10 requests begun in the probe have ended.
	steps = append(steps, astep{0, 1, false, 0, true, 2, 1}, astep{0, 1, false, 0, true, 2, 0},
		astep{0, 1, false, 0, false, 2, 0}, // over the limit: denied
		astep{0, 0, false, 0, true, 2, 0},  // a peek
		astep{0, 101, false, 0, false, 2, 0})
	steps = append(steps, astep{10 * ms, 2, true, 10 * ms, true, 2, 2})
	for k := range int64(5) {
		steps = append(steps, round(10*ms+k*10*ms, 2, 10*ms, 2)...)
	}
	// 10 samples of 10 ms (the first release came too): baseline 10 ms, target 15 ms. The
	// probe ends on the next request; an interval of 10 samples of 10 ms with the peak at the
	// limit proposes 2 × 15/10 = 3.
	steps = append(steps, round(60*ms, 2, 10*ms, 2)...)
	for k := range int64(4) {
		steps = append(steps, round(70*ms+k*10*ms, 2, 10*ms, 2)...)
	}
	steps = append(steps, round(170*ms, 3, 10*ms, 3)...)
	// Latency 30 ms, twice the target: the interval begun at 170 ms closes at 270 ms on the
	// 10th sample, and 3 × 15/30 = 1.5 is clamped to min_limit 2.
	steps = append(steps, round(180*ms, 3, 30*ms, 3)...)
	steps = append(steps, round(210*ms, 3, 30*ms, 3)...)
	steps = append(steps, astep{240 * ms, 1, false, 0, true, 3, 2}, astep{240 * ms, 1, false, 0, true, 3, 1},
		astep{240 * ms, 1, false, 0, true, 3, 0},
		astep{270 * ms, 1, true, 30 * ms, true, 3, 1}, astep{270 * ms, 1, true, 30 * ms, true, 2, 1},
		astep{270 * ms, 1, true, 30 * ms, true, 2, 2},
		astep{270 * ms, 1, false, 0, true, 2, 1}, astep{270 * ms, 1, false, 0, true, 2, 0},
		astep{270 * ms, 1, false, 0, false, 2, 0})
	replayAdaptive(t, a, &st, steps)
	if b := a.Baseline(&st); b != 10*ms {
		t.Errorf("baseline %d µs, want 10 ms", b)
	}
}

func TestAdaptiveRelease(t *testing.T) {
	a := adaptiveTest(t, 5*Millisecond)
	var st State
	replayAdaptive(t, a, &st, []astep{
		{0, 2, false, 0, true, 2, 0},
		{0, 1, true, 0, true, 2, 1},   // a release without latency: no sample
		{0, 5, true, 0, true, 2, 2},   // more than in flight: none left, not fewer than none
		{0, 3, false, 0, false, 2, 2}, // 3 > 2
		{0, 1, false, 0, true, 2, 1},
	})
	if d := a.Decide(&st, Request{Now: 0, Cost: 1}); d.TTL != 10*Second || d.ResetAfter != 100*Millisecond {
		t.Errorf("TTL %d, reset %d: want probe_every and interval", d.TTL, d.ResetAfter)
	}
	if d := a.Decide(&st, Request{Now: 0, Cost: 1}); d.Allowed || d.RetryAfter != 100*Millisecond {
		t.Errorf("denial %+v: want RetryAfter = interval", d)
	}
}

// drive runs rounds: every period, n() requests taken at once and released latency later.
func drive(a *Adaptive, st *State, now *int64, rounds int, period, latency int64, n func() int64) {
	for range rounds {
		k := n()
		for range k {
			a.Decide(st, Request{Now: *now, Cost: 1})
		}
		for range k {
			a.Decide(st, Request{Now: *now + latency, Cost: 1, Release: true, Latency: latency})
		}
		*now += period
	}
}

// TestAdaptiveFollowsLatency drives the limit with an SLO through its moves: growth while the
// latency is under the target, none while the traffic holds fewer than half the limit in flight,
// and a cut when the latency exceeds it.
func TestAdaptiveFollowsLatency(t *testing.T) {
	ms := Millisecond
	tests := []struct {
		name     string
		inflight int64 // requests per round
		latency  int64
		rounds   int
		want     int64 // the limit after
	}{
		// 10 ms against an SLO of 5 ms halves the limit at most per interval: 2 is min_limit.
		{"over target, at the floor", 2, 10 * ms, 20, 2},
		// 1 ms against 5 ms: at most ×2 per interval, from 2: 4, 8, 16, 32 in 4 intervals
		// (rounds every 25 ms, 20 rounds: intervals close at 100, 200, 300 and 400 ms).
		{"under target", -1, 1 * ms, 20, 32},
		{"under target, longer", -1, 1 * ms, 40, 100}, // max_limit
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := adaptiveTest(t, 5*ms)
			var st State
			now := int64(0)
			drive(a, &st, &now, tc.rounds, 25*ms, tc.latency, func() int64 {
				if tc.inflight < 0 {
					return a.Limit(&st) // fill the limit: not app-limited
				}
				return tc.inflight
			})
			if got := a.Limit(&st); got != tc.want {
				t.Errorf("limit %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAdaptiveAppLimited(t *testing.T) {
	a := adaptiveTest(t, 5*Millisecond)
	var st State
	// Grow to 8 with full rounds, then send 3 at a time (under 8/2): the limit stays at 8.
	now := int64(0)
	drive(a, &st, &now, 12, 25*Millisecond, Millisecond, func() int64 { return a.Limit(&st) }) // 2 → 4 → 8
	if got := a.Limit(&st); got != 8 {
		t.Fatalf("limit %d, want 8", got)
	}
	// The interval from 200 to 300 ms was full: it closes on the next request, at 16. After
	// it, 3 in flight is under 16/2.
	drive(a, &st, &now, 400, 25*Millisecond, Millisecond, func() int64 { return 3 })
	if got := a.Limit(&st); got != 16 {
		t.Errorf("app-limited traffic moved the limit to %d", got)
	}
}

// TestAdaptiveProbes checks the baseline's re-measure: periodically, and at once after 5
// intervals over the target; samples of requests begun before the probe do not count.
func TestAdaptiveProbes(t *testing.T) {
	ms := Millisecond
	a := adaptiveTest(t, 0)
	var st State
	now := int64(0)
	run := func(d, latency int64) {
		for end := now + d; now < end; {
			n := a.Limit(&st)
			for range n {
				a.Decide(&st, Request{Now: now, Cost: 1})
			}
			now += latency
			for range n {
				a.Decide(&st, Request{Now: now, Cost: 1, Release: true, Latency: latency})
			}
		}
	}
	run(5*Second, 10*ms)
	if b, l := a.Baseline(&st), a.Limit(&st); b != 10*ms || l != 100 {
		t.Fatalf("baseline %d, limit %d: want 10 ms, max_limit 100 (this backend never queues)", b, l)
	}
	// The backend slows to 40 ms for good: the limit falls to min_limit, where 40 ms is still over
	// the baseline; after 3 such intervals a probe measures 40 ms and puts the limit back to 100.
	run(2*Second, 40*ms)
	if b, l := a.Baseline(&st), a.Limit(&st); b != 40*ms || l != 100 {
		t.Fatalf("baseline %d, limit %d after the slowdown, want 40 ms, 100", b, l)
	}
	// Back to 10 ms: the limit grows (10 ms is under 60 ms), and the probe 10 s after the last
	// one brings the baseline down.
	run(12*Second, 10*ms)
	if b := a.Baseline(&st); b != 10*ms {
		t.Fatalf("baseline %d after the recovery, want 10 ms", b)
	}
	// A request begun before a probe does not count: hold one request 1 s across a probe.
	st = State{}
	a.Decide(&st, Request{Now: 0, Cost: 1})
	d := a.Decide(&st, Request{Now: Second, Cost: 1, Release: true, Latency: Second + 1})
	if a.Baseline(&st) != 0 || d.Limit != 2 {
		t.Errorf("a request older than the probe was sampled: baseline %d", a.Baseline(&st))
	}
}

func TestAdaptivePercentile(t *testing.T) {
	a := adaptiveTest(t, 0)
	tests := []struct {
		name    string
		samples []int64
		pct     int64
		want    int64
	}{
		{"equal samples", []int64{7000, 7000, 7000}, 90, 7000},
		{"1..100, P90", seq(1, 100), 90, 90},
		{"1..100, P99", seq(1, 100), 99, 99},
		{"1..1000 ms, P90", scale(seq(1, 1000), 1000), 90, 899_000},
		{"one outlier of 100", append(slices.Repeat([]int64{1000}, 99), 100_000), 99, 1000},
		{"one outlier of 100, P99 of 50", append(slices.Repeat([]int64{1000}, 49), 100_000), 99, 100_000},
		{"past the histogram", []int64{1 << 40}, 90, MaxAdaptiveLatency},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a.pct = tc.pct
			w := make([]int64, adaptiveWords)
			for _, v := range tc.samples {
				a.sample(w, 0, v)
			}
			got := a.percentile(w)
			// Within the bucket's width (25%) of the exact value.
			if got < tc.want*3/4 || got > tc.want*5/4 {
				t.Errorf("got %d, want %d within 25%%", got, tc.want)
			}
		})
	}
}

func TestAdaptiveBuckets(t *testing.T) {
	prev := -1
	for v := int64(1); v <= MaxAdaptiveLatency; v = v + 1 + v/97 {
		b := bucket(v)
		lo, hi := bucketBounds(b)
		if v < lo || v >= hi || b < prev || b >= adaptiveBuckets {
			t.Fatalf("v %d in bucket %d [%d, %d)", v, b, lo, hi)
		}
		if lo >= 4 && (hi-lo)*4 > lo {
			t.Fatalf("bucket %d [%d, %d) wider than 25%%", b, lo, hi)
		}
		prev = b
	}
	if got := bucket(MaxAdaptiveLatency); got != adaptiveBuckets-1 {
		t.Errorf("the largest latency is in bucket %d, want the last", got)
	}
}

func TestAdaptiveParams(t *testing.T) {
	ok := AdaptiveConfig{Percentile: 99, Tolerance: 50, MinLimit: 1, MaxLimit: 10, Interval: Second,
		Smoothing: 50, ProbeEvery: Minute, ProbeSamples: 50, Backoff: 90}
	tests := []struct {
		param string
		edit  func(*AdaptiveConfig)
	}{
		{"percentile", func(c *AdaptiveConfig) { c.Percentile = 100 }},
		{"percentile", func(c *AdaptiveConfig) { c.Percentile = 49 }},
		{"tolerance", func(c *AdaptiveConfig) { c.Tolerance = -1 }},
		{"slo", func(c *AdaptiveConfig) { c.SLO = MaxAdaptiveLatency + 1 }},
		{"min_limit", func(c *AdaptiveConfig) { c.MinLimit = 0 }},
		{"max_limit", func(c *AdaptiveConfig) { c.MaxLimit = 0 }},
		{"max_limit", func(c *AdaptiveConfig) { c.MaxLimit = MaxAdaptiveLimit + 1 }},
		{"interval", func(c *AdaptiveConfig) { c.Interval = 999 }},
		{"smoothing", func(c *AdaptiveConfig) { c.Smoothing = 0 }},
		{"probe_every", func(c *AdaptiveConfig) { c.ProbeEvery = c.Interval - 1 }},
		{"probe_samples", func(c *AdaptiveConfig) { c.ProbeSamples = 9 }},
		{"backoff", func(c *AdaptiveConfig) { c.Backoff = 49 }},
		{"backoff", func(c *AdaptiveConfig) { c.Backoff = 100 }},
	}
	if _, err := NewAdaptive(ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		c := ok
		tc.edit(&c)
		_, err := NewAdaptive(c)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != tc.param {
			t.Errorf("%s: got %v", tc.param, err)
		}
	}
}

// TestAdaptiveExtremes runs random traffic at the bounds (the largest limits, latencies past
// the histogram, clocks going back) and checks the invariants: nothing panics, the limit stays
// in its bounds, inflight never goes negative, and a dry run changes nothing.
func TestAdaptiveExtremes(t *testing.T) {
	configs := []AdaptiveConfig{
		{Percentile: 99, Tolerance: 1000, MinLimit: 1, MaxLimit: MaxAdaptiveLimit, Interval: Millisecond, Smoothing: 100, ProbeEvery: Millisecond, ProbeSamples: 10, Backoff: 50},
		{Percentile: 50, SLO: MaxAdaptiveLatency, MinLimit: MaxAdaptiveLimit, MaxLimit: MaxAdaptiveLimit, Interval: Hour, Smoothing: 1, ProbeEvery: Day, ProbeSamples: 10_000, Backoff: 99},
		{Percentile: 99, SLO: 1, MinLimit: 1, MaxLimit: MaxAdaptiveLimit, Interval: Millisecond, Smoothing: 100, ProbeEvery: Millisecond, ProbeSamples: 10, Backoff: 50},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, c := range configs {
		a, err := NewAdaptive(c)
		if err != nil {
			t.Fatal(err)
		}
		var st State
		now := int64(1 << 50)
		for range 20_000 {
			now += rng.Int64N(2*Millisecond) - Millisecond/4 // sometimes backwards
			r := Request{Now: now, Cost: rng.Int64N(3), DryRun: rng.IntN(5) == 0}
			if rng.IntN(2) == 0 {
				r.Release, r.Latency, r.Dropped = true, rng.Int64N(1<<62), rng.IntN(8) == 0
				r.DryRun = false
			}
			before := slices.Clone(st.Log)
			d := a.Decide(&st, r)
			if r.DryRun && !slices.Equal(before, st.Log) {
				t.Fatalf("config %d: a dry run changed the state", i)
			}
			if l := a.Limit(&st); l < c.MinLimit || l > c.MaxLimit || d.Remaining < 0 || st.Log[awInflight] < 0 ||
				a.Baseline(&st) > MaxAdaptiveLatency {
				t.Fatalf("config %d: limit %d, decision %+v, inflight %d", i, l, d, st.Log[awInflight])
			}
		}
	}
}

func TestAdaptiveAllocs(t *testing.T) {
	a := adaptiveTest(t, 0)
	var st State
	now := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now += 100
		a.Decide(&st, Request{Now: now, Cost: 1})
		a.Decide(&st, Request{Now: now, Cost: 1, Release: true, Latency: 1000})
		a.Decide(&st, Request{Now: now, Cost: 1, DryRun: true})
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request", allocs)
	}
}

func seq(from, to int64) []int64 {
	var s []int64
	for v := from; v <= to; v++ {
		s = append(s, v)
	}
	return s
}

func scale(s []int64, k int64) []int64 {
	for i := range s {
		s[i] *= k
	}
	return s
}

// TestAdaptiveDrops checks the drop signal: a dropped release cuts the limit by backoff (90%)
// at most once an interval, is no sample, and an interval with a drop does not raise the limit.
func TestAdaptiveDrops(t *testing.T) {
	ms := Millisecond
	a := adaptiveTest(t, 5*ms)
	var st State
	now := int64(0)
	drive(a, &st, &now, 20, 25*ms, ms, func() int64 { return a.Limit(&st) }) // 2 → 32, as above
	if got := a.Limit(&st); got != 32 {
		t.Fatalf("limit %d, want 32", got)
	}
	drop := func(at, latency int64) Decision {
		a.Decide(&st, Request{Now: at, Cost: 1})
		return a.Decide(&st, Request{Now: at + latency, Cost: 1, Release: true, Latency: latency, Dropped: true})
	}
	steps := []struct {
		name      string
		at        int64
		limit     int64 // after the drop
		thousands int64 // the limit word, in thousandths
	}{
		{"a drop cuts by 10%", now, 28, 28_800},
		{"one cut per interval", now + 50*ms, 28, 28_800},
		{"a clock gone back does not cut", now - 10*ms, 28, 28_800},
		{"an interval later, another cut", now + 100*ms, 25, 25_920},
	}
	for _, s := range steps {
		d := drop(s.at, ms)
		if d.Limit != s.limit || st.Log[awLimit] != s.thousands || !d.Allowed || d.Granted != 0 {
			t.Fatalf("%s: decision %+v, limit word %d; want limit %d (%d)", s.name, d, st.Log[awLimit], s.limit, s.thousands)
		}
	}
	if st.Log[awCount] != 0 {
		t.Errorf("drops were taken as samples: %d in the histogram", st.Log[awCount])
	}
	// An interval of fast samples (1 ms, against an SLO of 5 ms: ×2 proposed) with a drop in it
	// keeps the limit, and the next one without a drop doubles it.
	now += 200 * ms
	drive(a, &st, &now, 4, 25*ms, ms, func() int64 { return a.Limit(&st) })
	drop(now, ms)
	limitWord := st.Log[awLimit]
	drive(a, &st, &now, 4, 25*ms, ms, func() int64 { return a.Limit(&st) })
	if st.Log[awLimit] != limitWord {
		t.Errorf("an interval with a drop moved the limit from %d to %d thousandths", limitWord, st.Log[awLimit])
	}
	drive(a, &st, &now, 5, 25*ms, ms, func() int64 { return a.Limit(&st) })
	if got := st.Log[awLimit]; got != 2*limitWord {
		t.Errorf("the interval after: limit %d thousandths, want %d", got, 2*limitWord)
	}
	// A backend that fails everything: a cut per interval down to min_limit.
	for range 40 {
		drop(now, ms)
		now += 100 * ms
	}
	if got := a.Limit(&st); got != 2 {
		t.Errorf("after 40 intervals of drops only: limit %d, want min_limit 2", got)
	}
}
